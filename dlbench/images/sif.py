"""The .sif Apptainer runs ranks from, made from the pinned podman image's OCI archive.

    python -m dlbench.images.sif FRAMEWORK [--images DIR] [--ensure]

`apptainer build <framework>.sif oci-archive:<framework>.oci.tar`: the archive the image's
build saved, whose manifest digest its lock pins (checked first). The archive rather than a
definition file or `docker-archive:`: it is the file the podman build already wrote and pinned,
so the .sif holds exactly the pinned layers and the image's environment, and nothing is
fetched. A .sif is not byte-reproducible (its header holds a creation time and an id), so its
sha256 is pinned as built, in `<images>/<framework>.sif.lock.json` beside the image's lock;
the Apptainer runtime (dlbench/launch/container.py) checks both before any rank starts
(docs/containers.md, Apptainer). Apptainer itself comes from its own install guide.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from dlbench.images import derived
from dlbench.images.podman import BuildError, manifest_digest, require
from dlbench.launch.container import sif_lock_path, sif_path

SIF = derived.Derived("apptainer", "sif", sif_path, sif_lock_path, "dlbench.images.sif")


def apptainer_version() -> str:
    out = subprocess.run(["apptainer", "--version"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def build(framework: str, images: Path) -> dict:
    """The framework's .sif from its pinned image's OCI archive, and its lock."""
    require("apptainer")
    started = time.monotonic()
    image = derived.pinned_image(images, framework)
    if not image.get("archive"):
        raise BuildError(f"{framework}'s image lock names no OCI archive: rebuild the image (dlbench.images.podman)")
    archive = images / image["archive"]
    if manifest_digest(archive) != image.get("manifest_digest"):
        raise BuildError(f"{archive} is not the archive the lock pins ({image.get('manifest_digest')}): rebuild it")
    out = sif_path(images, framework)
    partial = out.with_name(out.name + ".partial")
    partial.unlink(missing_ok=True)
    done = subprocess.run(["apptainer", "build", str(partial), f"oci-archive:{archive}"], capture_output=True)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise BuildError(f"apptainer build {out.name} failed: {done.stderr.decode(errors='replace')[-2000:]}")
    os.replace(partial, out)  # a build cut short never stands beside the lock that pins the old one
    facts = {"archive": image["archive"], "manifest_digest": image["manifest_digest"], "apptainer": apptainer_version()}
    return derived.write_lock(SIF, images, framework, image, started, **facts)


def ensure(framework: str, images: Path) -> dict:
    """The framework's image and its .sif, each made again only where it is not current."""
    return derived.ensure(SIF, framework, images, build)


def main(argv: list[str] | None = None) -> int:
    return derived.main(SIF, __doc__.splitlines()[0], build, argv)


if __name__ == "__main__":
    sys.exit(main())
