"""The squashfs file pyxis/enroot runs ranks from, made from the pinned podman image.

    python -m dlbench.images.squashfs FRAMEWORK [--images DIR] [--ensure]

The file system of the image the framework's lock pins (by its config digest, `podman image
mount`), packed by `mksquashfs` with fixed owners and times: the same image gives the same
file, byte for byte. The image's environment (its config's Env: PATH, PYTHONPATH) becomes the
file's /etc/environment, where enroot reads it, as `enroot import` writes it. Written to
`<images>/<framework>.sqsh`, pinned by its sha256 in
`<images>/<framework>.squashfs.lock.json` together with the podman image it came from; the
pyxis runtime (dlbench/launch/container.py) checks both before any rank starts
(docs/containers.md, pyxis).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from dlbench.images import derived
from dlbench.images.podman import BuildError, podman, require
from dlbench.launch.container import podman_base, squashfs_lock_path, squashfs_path

SQUASHFS = derived.Derived("pyxis", "squashfs", squashfs_path, squashfs_lock_path, "dlbench.images.squashfs")

# zstd: 2 s where gzip (the default) took 30 s and lzo 60 s for the MXNet image here, at about
# gzip's size; the kernel (>= 4.14) and squashfuse read it.
ZSTD = ("-comp", "zstd", "-Xcompression-level", "3")
# Fixed owners and times (mksquashfs 4.5 builds reproducibly by default; these remove what
# the mounted tree's times and owners would add); no xattrs (the image carries none we need).
# Where enroot reads an image's environment (enroot import writes the image config's Env there).
ENVIRONMENT_FILE = "etc/environment"
MKSQUASHFS_FLAGS = ("-noappend", "-all-root", "-no-xattrs", "-mkfs-time", "0", "-all-time", "0", *ZSTD)


@contextlib.contextmanager
def mounted(images: Path, config_digest: str):
    """The image's file system, read where podman's store keeps it (rootful `podman image
    mount`): the pinned layers only, in 3 s where `podman export` and unpacking took 20 s."""
    image = config_digest.removeprefix("sha256:")
    root = podman(images, "image", "mount", image)
    try:
        yield Path(root)
    finally:
        subprocess.run([*podman_base(images), "image", "unmount", image], capture_output=True)


def image_environment(images: Path, config_digest: str) -> list[str]:
    """The image's Env (Containerfile ENV): podman sets it on `run`, the mounted tree lacks it."""
    image = config_digest.removeprefix("sha256:")
    found = podman(images, "image", "inspect", "--format", "{{json .Config.Env}}", image)
    return json.loads(found or "null") or []


def mksquashfs(rootfs: Path, out: Path, environment: list[str]) -> None:
    """`environment` replaces the tree's etc/environment (a pseudo file: the mounted image is
    never written), which enroot applies to every process it starts."""
    partial = out.with_name(out.name + ".partial")
    partial.unlink(missing_ok=True)
    env_file, exclude = out.with_name(out.name + ".environment"), out.with_name(out.name + ".exclude")
    env_file.write_text("".join(f"{line}\n" for line in environment))
    exclude.write_text(f"{ENVIRONMENT_FILE}\n")
    pseudo = f"{ENVIRONMENT_FILE} f 644 0 0 cat {env_file}"
    cmd = ["mksquashfs", str(rootfs), str(partial), *MKSQUASHFS_FLAGS, "-quiet", "-p", pseudo, "-ef", str(exclude)]
    try:
        done = subprocess.run(cmd, capture_output=True)
    finally:
        env_file.unlink(missing_ok=True)
        exclude.unlink(missing_ok=True)
    if done.returncode != 0:
        raise BuildError(f"mksquashfs {rootfs} failed: {done.stderr.decode(errors='replace')[-2000:]}")
    os.replace(partial, out)  # a build cut short never stands beside the lock that pins the old one


def mksquashfs_version() -> str:
    out = subprocess.run(["mksquashfs", "-version"], capture_output=True, text=True)
    return (out.stdout.splitlines() or ["unknown"])[0]


def build(framework: str, images: Path) -> dict:
    """The framework's squashfs from its pinned podman image, and its lock."""
    require("podman", "mksquashfs")
    started = time.monotonic()
    image = derived.pinned_image(images, framework)
    environment = image_environment(images, image["config_digest"])
    with mounted(images, image["config_digest"]) as rootfs:
        mksquashfs(rootfs, squashfs_path(images, framework), environment)
    facts = {"environment": environment, "mksquashfs": mksquashfs_version(), "mksquashfs_flags": list(MKSQUASHFS_FLAGS)}
    return derived.write_lock(SQUASHFS, images, framework, image, started, **facts)


def ensure(framework: str, images: Path) -> dict:
    """The framework's image and its squashfs, each made again only where it is not current."""
    return derived.ensure(SQUASHFS, framework, images, build)


def main(argv: list[str] | None = None) -> int:
    return derived.main(SQUASHFS, __doc__.splitlines()[0], build, argv)


if __name__ == "__main__":
    sys.exit(main())
