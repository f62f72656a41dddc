#!/usr/bin/env bash
# Build and install enroot and pyxis (the SPANK plug-in behind `srun --container-image`) from
# their source trees, for `run.container: pyxis` (docs/containers.md, pyxis/enroot):
#
#   bash tools/hpc-runtimes.sh ENROOT_SRC PYXIS_SRC
#
# Neither is in Debian's or PyPI's registries. ENROOT_SRC is NVIDIA/enroot with its three
# submodules in deps/ (musl, makeself, linux-headers); PYXIS_SRC is NVIDIA/pyxis. Installs their
# Debian dependencies (pyxis needs libslurm-dev of the installed Slurm's own release), builds in a
# scratch copy (the trees stay clean), installs under /usr/local and prints the versions.
# Idempotent: the same trees already installed are not built again. Root only.
# tools/slurm-local/up.sh then loads pyxis into the local cluster.
set -euo pipefail

say() { echo "[hpc-runtimes] $*"; }
die() {
    echo "[hpc-runtimes] ERROR: $*" >&2
    exit 1
}
[ $# = 2 ] || die "usage: bash tools/hpc-runtimes.sh ENROOT_SRC PYXIS_SRC"

PREFIX=/usr/local
STAMP=$PREFIX/share/dlbench/hpc-runtimes.txt
PLUGIN=$PREFIX/lib/slurm/spank_pyxis.so
# enroot's build (static helpers on the bundled musl) and its runtime; pyxis's headers.
BUILD_DEPS=(gcc make patch libcap2-bin libtool automake libmd-dev)
RUN_DEPS=(curl gawk jq squashfs-tools parallel pigz squashfuse fuse-overlayfs)

# ------------------------------------------------------------ the source trees
enroot_src=$(realpath -e "$1" 2> /dev/null) || die "enroot source $1 does not exist"
pyxis_src=$(realpath -e "$2" 2> /dev/null) || die "pyxis source $2 does not exist"
[ -f "$enroot_src/enroot.in" ] && [ -f "$enroot_src/Makefile" ] ||
    die "enroot source $enroot_src is not NVIDIA/enroot (no enroot.in and Makefile)"
# The file each submodule's build starts from (a git archive leaves their folders empty).
for sub in musl/configure makeself/makeself.sh linux-headers/Makefile; do
    [ -f "$enroot_src/deps/$sub" ] ||
        die "enroot source $enroot_src: submodule deps/${sub%%/*} is missing ($sub; git submodule update --init, or docs/containers.md's mirrors)"
done
[ -f "$pyxis_src/pyxis_slurmstepd.c" ] && [ -f "$pyxis_src/Makefile" ] ||
    die "pyxis source $pyxis_src is not NVIDIA/pyxis (no pyxis_slurmstepd.c and Makefile)"
enroot_version=$(sed -n 's/^VERSION *:= *//p' "$enroot_src/Makefile")
pyxis_version=$(sed -n 's/^PYXIS_VER *?= *//p' "$pyxis_src/Makefile")
[ -n "$enroot_version" ] && [ -n "$pyxis_version" ] || die "no version in $enroot_src/Makefile or $pyxis_src/Makefile"

# ------------------------------------------------------------ Debian dependencies
[ "$(id -u)" = 0 ] || die "must run as root (installs under /usr/local and with apt-get)"
command -v srun > /dev/null ||
    die "Slurm is not installed (no srun): pyxis is built against the cluster's own Slurm (tools/slurm-local/up.sh installs it)"
slurm_version=$(srun --version | awk '{print $2}')
installed() { dpkg-query -W -f='${Status}' "$1" 2> /dev/null | grep -q 'install ok installed'; }
missing=()
for pkg in "${BUILD_DEPS[@]}" "${RUN_DEPS[@]}" libslurm-dev; do installed "$pkg" || missing+=("$pkg"); done
if [ ${#missing[@]} -gt 0 ]; then
    say "apt-get install ${missing[*]}"
    apt-get update -qq || die "apt-get update failed"
    for pkg in "${missing[@]}"; do # one message naming the package that cannot be had
        candidate=$(apt-cache policy "$pkg" | awk '/Candidate:/ {print $2}')
        [ -n "$candidate" ] && [ "$candidate" != "(none)" ] ||
            die "Debian package $pkg is not available from the configured apt sources (apt-cache policy $pkg)"
    done
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null ||
        die "apt-get install ${missing[*]} failed"
fi
# pyxis must be built against the headers of the Slurm release it is loaded into.
dev_version=$(dpkg-query -W -f='${Version}' libslurm-dev)
[ "${dev_version%%-*}" = "$slurm_version" ] ||
    die "libslurm-dev is $dev_version but Slurm (srun) is $slurm_version: pyxis must match the cluster's Slurm release"

# ------------------------------------------------------------ build and install
# logged NAME CMD...: CMD's output kept in the scratch dir, its tail shown if it fails.
logged() {
    local name=$1
    shift
    "$@" >> "$work/$name.log" 2>&1 || {
        tail -n 20 "$work/$name.log" >&2
        die "$name: $* failed"
    }
}
tree_sha() { (cd "$1" && find . -type f ! -path './.git/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16); }
want="enroot $enroot_version $(tree_sha "$enroot_src"); pyxis $pyxis_version $(tree_sha "$pyxis_src") slurm $slurm_version"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -f "$PLUGIN" ] && command -v enroot > /dev/null; then
    say "already installed from these trees: $want"
else
    work=$(mktemp -d /tmp/hpc-runtimes.XXXXXX)
    trap 'rm -rf "$work"' EXIT
    cp -a "$enroot_src" "$work/enroot"
    cp -a "$pyxis_src" "$work/pyxis"
    started=$SECONDS
    say "building enroot $enroot_version (static helpers on the bundled musl) in $work"
    logged enroot make -C "$work/enroot" -j"$(nproc)"
    logged enroot make -C "$work/enroot" install prefix=$PREFIX
    # Unprivileged users' overlay and squashfs helpers need these file capabilities.
    logged enroot make -C "$work/enroot" setcap prefix=$PREFIX
    say "building pyxis $pyxis_version against libslurm-dev $dev_version"
    logged pyxis make -C "$work/pyxis" -j"$(nproc)"
    logged pyxis make -C "$work/pyxis" install prefix=$PREFIX
    mkdir -p "$(dirname "$STAMP")"
    echo "$want" > "$STAMP"
    say "built and installed in $((SECONDS - started)) s"
fi

# ------------------------------------------------------------ versions
say "enroot $(enroot version) ($(command -v enroot))"
say "pyxis $pyxis_version ($PLUGIN; plugstack line: required $PLUGIN)"
say "Slurm $slurm_version, libslurm-dev $dev_version; squashfs-tools $(dpkg-query -W -f='${Version}' squashfs-tools), squashfuse $(dpkg-query -W -f='${Version}' squashfuse)"
