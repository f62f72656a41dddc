"""Files made from a framework's pinned podman image, each pinned by a lock of its own beside
the image's: pyxis's squashfs (dlbench.images.squashfs) and Apptainer's .sif
(dlbench.images.sif). What they share: the lock's fields, being made again only where they are
not current, and the command line."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dlbench.images.podman import BuildError, _now, _write_json, build_lock, cli_result, image_id, images_dir
from dlbench.images.podman import ensure as podman_ensure
from dlbench.launch.container import lock_path, read_lock, sha256_of


@dataclass(frozen=True)
class Derived:
    """One kind of file made from the image: its runtime, where it and its lock lie, and the
    prefix of its lock's fields (`<key>`, `<key>_sha256`, `<key>_bytes`)."""

    runtime: str
    key: str
    path_of: Callable[[Path, str], Path]
    lock_path_of: Callable[[Path, str], Path]
    module: str  # python -m <module> FRAMEWORK makes it


def pinned_image(images: Path, framework: str) -> dict:
    """The image lock, checked against the image podman holds (BuildError: rebuild it first)."""
    image = read_lock(images, framework)  # ImageMismatch where the image was never built
    if image_id(images, image["image"]) != image["config_digest"]:
        raise BuildError(f"image {image['image']} is not the pinned {image['config_digest']}: rebuild it first")
    return image


def write_lock(derived: Derived, images: Path, framework: str, image: dict, started: float, **facts) -> dict:
    """The file's lock: its digest and size, the image it came from, and `facts` of its maker."""
    out = derived.path_of(images, framework)
    lock = {
        "framework": framework,
        "runtime": derived.runtime,
        derived.key: out.name,
        f"{derived.key}_sha256": sha256_of(out),
        f"{derived.key}_bytes": out.stat().st_size,
        "image": image["image"],
        "config_digest": image["config_digest"],
        "image_lock_sha256": sha256_of(lock_path(images, framework)),
        "env_lock": image.get("env_lock"),
        "env_lock_sha256": image.get("env_lock_sha256"),
        **facts,
        "built_at": _now(),
        "build_seconds": round(time.monotonic() - started, 1),
    }
    _write_json(derived.lock_path_of(images, framework), lock)
    return lock


def ensure(derived: Derived, framework: str, images: Path, build: Callable[[str, Path], dict]) -> dict:
    """The framework's image and the file, each made again only where it is not current (the
    file: missing, another size than its lock's, or made from another image than the pinned one)."""
    image = podman_ensure(framework, images)
    with build_lock(images):
        try:
            lock = json.loads(derived.lock_path_of(images, framework).read_text())
        except (OSError, ValueError):
            lock = {}
        path = derived.path_of(images, framework)
        made = path.is_file() and path.stat().st_size == lock.get(f"{derived.key}_bytes")
        if not made or lock.get("config_digest") != image["config_digest"]:
            lock = build(framework, images)
    return lock


def main(derived: Derived, description: str, build: Callable[[str, Path], dict], argv: list[str] | None) -> int:
    p = argparse.ArgumentParser(prog=f"python -m {derived.module}", description=description)
    p.add_argument("framework")
    p.add_argument("--images", default=None, help="default: $DLBENCH_IMAGES, else .images/")
    p.add_argument("--ensure", action="store_true", help="build the image and the file only where not current")
    args = p.parse_args(argv)
    images = Path(args.images).resolve() if args.images else images_dir()

    def produce():
        if args.ensure:
            return ensure(derived, args.framework, images, build)
        with build_lock(images):
            return build(args.framework, images)

    return cli_result(derived.module, produce)
