#!/usr/bin/env bash
# README command (2): set up everything the tests need on a fresh machine, then run them.
# Extra arguments go to pytest (e.g. -m "not slow").
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
bash tools/bootstrap.sh
# Headless Chromium for the report's browser test (tests/test_report_browser.py).
bash tools/install-chromium.sh
# The framework environments, through the same rule the pipeline uses.
.venvs/analysis/bin/snakemake --quiet rules --profile profiles/local frameworks_envs
# The one-host Slurm cluster for tests/test_slurm.py (needs root; its tests skip without it).
# On a host with a Slurm configuration of its own in /etc/slurm, up.sh changes nothing and says
# so (DLBENCH_SLURM_LOCAL_FORCE=1 replaces it: tools/slurm-local/README.md).
if [ "$(id -u)" = 0 ]; then
    bash tools/slurm-local/up.sh || echo "[test] no local Slurm cluster: tests marked slurm will skip" >&2
fi
# The container tests (tests/test_container_podman.py): podman and runc, debootstrap for the base,
# squashfs-tools for pyxis's image, buildah and skopeo (the rest of tools/containers.sh's tools:
# tests/test_cluster_page.py plans the images with them), and one image, the smallest (MXNet:
# ≈ 2 min with the base).
# Under CI a container test that cannot run fails instead of skipping.
if [ "$(id -u)" = 0 ]; then
    missing=()
    for tool in podman runc debootstrap mksquashfs buildah skopeo; do
        command -v "$tool" > /dev/null || missing+=("$tool")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap squashfs-tools buildah skopeo > /dev/null
    fi
    .venvs/analysis/bin/python -m dlbench.images.podman ensure mxnet > /dev/null \
        || echo "[test] the MXNet image did not build: the container tests will fail under CI" >&2
fi
# tests/test_container_pyxis.py runs pyxis for real only where enroot and pyxis are installed
# (by hand, from their own guides: docs/containers.md; no package registry has them), else skips.
# There its images are set-up, made here (PyTorch's image and squashfs: ≈ 8 min on a fresh machine).
if [ "$(id -u)" = 0 ] && command -v enroot > /dev/null; then
    for framework in mxnet pytorch; do
        .venvs/analysis/bin/python -m dlbench.images.squashfs "$framework" --ensure > /dev/null \
            || echo "[test] the $framework squashfs did not build: the pyxis tests will fail" >&2
    done
fi
# The allocators run.allocator preloads (tests/test_allocator.py; Debian's packages).
# (grep reads all of ldconfig's list: an early exit would fail the pipe under pipefail)
if [ "$(id -u)" = 0 ] && [ "$(/sbin/ldconfig -p | grep -cE 'lib(jemalloc\.so\.2|tcmalloc_minimal\.so\.4) ')" -lt 2 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libjemalloc2 libtcmalloc-minimal4 > /dev/null
fi
# Two workers (pytest-xdist): tests/conftest.py groups the tests so that each module's fixtures
# are made once and the Slurm tests run one at a time in one worker. The 25 slowest tests are
# printed every run (docs/testing.md: the suite's time budget).
exec .venvs/analysis/bin/python -m pytest -ra -n 2 --dist loadgroup --durations=25 "$@"
