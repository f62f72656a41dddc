#!/usr/bin/env bash
# containers/base.sh ROOTFS_TAR — the Debian base of every dlbench image, made with
# debootstrap from the apt mirror this host already uses (no container registry).
# Writes a reproducibly ordered tar of the root file system; dlbench.images.podman imports it.
# This file's sha256 is the base's recipe hash: editing it rebuilds every image.
set -euo pipefail
out=$1
suite=bookworm
# The allocators a run may ask for (run.allocator, dlbench/launch/allocator.py) besides the C library's.
packages=python3,python3-venv,libgomp1,libquadmath0,libjemalloc2,libtcmalloc-minimal4
# The first deb822 or one-line Debian source apt is configured with.
mirror=$(grep -hoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list.d/*.sources \
    /etc/apt/sources.list 2>/dev/null | head -1 | awk '{print $2}' || true)
mirror=${DLBENCH_DEBIAN_MIRROR:-${mirror:-http://deb.debian.org/debian}}
root=$(mktemp -d "${TMPDIR:-/tmp}/dlbench-rootfs.XXXXXX")
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" > "$out.log" 2>&1 \
    || { tail -20 "$out.log" >&2; exit 1; }
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/log/* "$root"/tmp/*
tar --sort=name --numeric-owner --mtime=@0 -C "$root" -cf "$out" .
