#!/usr/bin/env bash
# README: build the framework images that `run.container: podman` runs every rank in
# (docs/containers.md). Installs podman, debootstrap, runc, buildah and skopeo with apt where
# missing (root), then builds the Debian base and each framework image of the grid from its
# hash-locked envs/<framework>.txt through Snakemake (rule podman_images), each pinned by
# .images/<framework>.lock.json ($DLBENCH_IMAGES moves them). Up-to-date images are kept.
# Extra arguments go to Snakemake (e.g. --configfile my-grid.yaml). Only this script needs
# podman: the test suite and `run.container: none` (the default) do not.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
missing=()
for tool in podman debootstrap runc buildah skopeo; do
    command -v "$tool" > /dev/null || missing+=("$tool")
done
command -v mksquashfs > /dev/null || missing+=(squashfs-tools)  # pyxis's squashfs images
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "containers: ${missing[*]} missing; install them as root (apt-get install ${missing[*]})" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" > /dev/null
fi
bash tools/bootstrap.sh
.venvs/analysis/bin/snakemake --profile profiles/local podman_images "$@"
du -sh "${DLBENCH_IMAGES:-.images}" 2>/dev/null || true
