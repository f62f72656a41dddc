"""Build the framework images with podman and write their locks (docs/containers.md).

    python -m dlbench.images.podman base [--images DIR]     the Debian base (containers/base.sh)
    python -m dlbench.images.podman build FRAMEWORK [--images DIR]
        the framework's image, its OCI archive, its lock
    python -m dlbench.images.podman ensure FRAMEWORK [--images DIR]
        the same, and the base, unless they are current (tools/test.sh)
    python -m dlbench.images.squashfs FRAMEWORK [--images DIR]
        pyxis: the squashfs made from the image, and its lock (its own module: it builds on this one)
    python -m dlbench.images.sif FRAMEWORK [--images DIR]
        Apptainer: the .sif made from the image's OCI archive, and its lock

Each image's lock, `<images>/<framework>.lock.json`, pins the image by its config digest (the
image ID podman runs it by) and its OCI archive's manifest digest, and records what built it:
the env lock's, the recipe's, the base recipe's and dlbench's code's sha256. The launcher
(dlbench/launch/container.py) checks the image against it before any rank starts. Builds are
not reproducible bit for bit: a rebuild is a new digest, written to the lock (never silent).
Runs on the workflow's side (the analysis environment), never inside a training process.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from dlbench import __version__
from dlbench.files import write_atomically
from dlbench.launch.container import ImageMismatch, lock_path, podman_base, sha256_of

REPO_ROOT = Path(__file__).resolve().parents[2]
CONTAINERS_DIR = REPO_ROOT / "containers"
RECIPE = CONTAINERS_DIR / "Containerfile"
BASE_RECIPE = CONTAINERS_DIR / "base.sh"
DEFAULT_IMAGES = REPO_ROOT / ".images"
BASE_LOCK = "base.lock.json"


class BuildError(RuntimeError):
    pass


def images_dir(environ=os.environ) -> Path:
    """Where images, their store and locks live: $DLBENCH_IMAGES, else .images/ in the repo."""
    return Path(environ.get("DLBENCH_IMAGES") or DEFAULT_IMAGES).resolve()


def code_files(repo: Path = REPO_ROOT) -> list[Path]:
    """dlbench's code as the image holds it (the build rule's inputs, and the code hash)."""
    return sorted(p for p in (repo / "dlbench").rglob("*") if p.is_file() and p.suffix != ".pyc")


def code_sha256(repo: Path = REPO_ROOT) -> str:
    digest = hashlib.sha256()
    for path in code_files(repo):
        digest.update(str(path.relative_to(repo)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def env_lock(image: str) -> str:
    """The env lock of an image: its framework's (a plug-in may share another's environment),
    on its device (`<framework>-cuda`: envs/<framework>-cuda.txt, launch.container.image_name)."""
    from dlbench.runners import env_name

    framework, _, device = image.partition("-")
    return f"envs/{env_name(framework, device or 'cpu')}.txt"


def build_inputs(framework: str, repo: Path = REPO_ROOT) -> dict:
    """What an image is built from, by sha256: a change to any of them is a new image."""
    return {
        "env_lock": env_lock(framework),
        "env_lock_sha256": sha256_of(repo / env_lock(framework)),
        "recipe": "containers/Containerfile",
        "recipe_sha256": sha256_of(repo / "containers" / "Containerfile"),
        "base_recipe_sha256": sha256_of(repo / "containers" / "base.sh"),
        "code_sha256": code_sha256(repo),
    }


def require(*tools: str) -> None:
    for tool in tools:
        if shutil.which(tool) is None:
            raise BuildError(f"{tool} is not installed: bash tools/containers.sh installs it (apt, as root)")


def podman(images: Path, *args: str, capture: bool = True, timeout: float = 3600) -> str:
    cmd = [*podman_base(images), *args]
    out = subprocess.run(cmd, capture_output=capture, text=True, timeout=timeout)
    if out.returncode != 0:
        raise BuildError(f"{' '.join(cmd[3:])} failed ({out.returncode}): {(out.stderr or '')[-2000:]}")
    return (out.stdout or "").strip()


@contextlib.contextmanager
def build_lock(images: Path):
    """One build at a time per store (Snakemake's rules, test sessions, by hand)."""
    images.mkdir(parents=True, exist_ok=True)
    with open(images / ".build.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def image_id(images: Path, ref: str) -> str | None:
    try:
        return "sha256:" + podman(images, "image", "inspect", "--format", "{{.Id}}", ref)
    except BuildError:
        return None


def _write_json(path: Path, value: dict) -> None:
    write_atomically(path, json.dumps(value, indent=1) + "\n")


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


# ------------------------------------------------------------------ the base


def build_base(images: Path) -> dict:
    """debootstrap a Debian root file system (containers/base.sh) and import it as the base."""
    require("podman", "debootstrap")
    images.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    recipe_sha = sha256_of(BASE_RECIPE)
    ref = f"localhost/dlbench/base:{recipe_sha[:12]}"
    with tempfile.TemporaryDirectory(dir=images) as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        out = subprocess.run(["bash", str(BASE_RECIPE), str(rootfs)], capture_output=True, text=True)
        if out.returncode != 0:
            raise BuildError(f"containers/base.sh failed: {out.stderr[-2000:]}")
        env = "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        podman(images, "import", "--change", env, str(rootfs), ref)
        rootfs_bytes = rootfs.stat().st_size
    lock = {
        "image": ref,
        "config_digest": image_id(images, ref),
        "recipe": "containers/base.sh",
        "recipe_sha256": recipe_sha,
        "rootfs_bytes": rootfs_bytes,
        "built_at": _now(),
        "build_seconds": round(time.monotonic() - started, 1),
    }
    _write_json(images / BASE_LOCK, lock)
    return lock


# ------------------------------------------------------------------ a framework's image


def fetch_wheels(framework: str, images: Path) -> Path:
    """The lock's wheels, fetched on the host with its own pip settings (index, CA), checked by
    hash; the build mounts them read-only and installs offline. Kept to reuse."""
    wheels = images / "wheels" / framework
    wheels.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes"]
    cmd += ["--only-binary=:all:", "--python-version", "3.11", "-d", str(wheels)]
    out = subprocess.run([*cmd, "-r", str(REPO_ROOT / env_lock(framework))], capture_output=True, text=True)
    if out.returncode != 0:
        raise BuildError(f"pip download of {env_lock(framework)} failed: {out.stderr[-2000:]}")
    return wheels


def stage(framework: str, directory: Path, inputs: dict, base: dict) -> Path:
    """The build context: exactly what the Containerfile copies."""
    if directory.exists():
        shutil.rmtree(directory)
    (directory / "envs").mkdir(parents=True)
    # Under the framework's name: the recipe installs envs/$FRAMEWORK.txt.
    shutil.copy2(REPO_ROOT / env_lock(framework), directory / "envs" / f"{framework}.txt")
    shutil.copy2(REPO_ROOT / "pyproject.toml", directory)
    shutil.copytree(REPO_ROOT / "dlbench", directory / "dlbench", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy2(RECIPE, directory / "Containerfile")
    git = _git_state()
    info = {"framework": framework, "dlbench_version": __version__, **inputs, "base": base["image"]}
    info |= {"base_config_digest": base["config_digest"], **git, "built_at": _now()}
    (directory / "BUILD_INFO.json").write_text(json.dumps(info, indent=1) + "\n")
    return directory


def _git_state() -> dict:
    def git(*args: str) -> str | None:
        out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else None

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": git("rev-parse", "HEAD"), "git_dirty": bool(dirty) if dirty is not None else None}


def manifest_digest(archive: Path) -> str:
    """The OCI archive's manifest digest (index.json's only manifest): stable across re-saves."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise BuildError(f"{archive} has no index.json")
        manifests = json.load(member)["manifests"]
    if len(manifests) != 1:
        raise BuildError(f"{archive}: {len(manifests)} manifests, expected one")
    return manifests[0]["digest"]


def build(framework: str, images: Path, archive: bool = True) -> dict:
    """Build the framework's image on the base, save its OCI archive, write its lock."""
    require("podman")
    started = time.monotonic()
    base = json.loads((images / BASE_LOCK).read_text())
    if image_id(images, base["image"]) != base["config_digest"]:
        raise BuildError(
            f"base image {base['image']} is not {base['config_digest']}: rebuild it (dlbench.images.podman base)"
        )
    inputs = build_inputs(framework)
    key = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    ref = f"localhost/dlbench/{framework}:{key[:12]}"
    wheels = fetch_wheels(framework, images)
    with tempfile.TemporaryDirectory(dir=images) as tmp:
        context = stage(framework, Path(tmp) / "context", inputs, base)
        args = ["build", "--pull=never", "--layers", "-v", f"{wheels}:/wheels:ro", "-t", ref]
        args += ["--build-arg", f"BASE={base['config_digest'].removeprefix('sha256:')}"]
        args += ["--build-arg", f"FRAMEWORK={framework}", "-f", str(context / "Containerfile"), str(context)]
        podman(images, *args)
    lock = {"framework": framework, "runtime": "podman", "image": ref, "config_digest": image_id(images, ref)}
    lock["size_bytes"] = int(podman(images, "image", "inspect", "--format", "{{.Size}}", ref))
    if archive:
        path, partial = images / f"{framework}.oci.tar", images / f"{framework}.oci.tar.partial"
        partial.unlink(missing_ok=True)
        podman(images, "save", "--format", "oci-archive", "-o", str(partial), ref)
        os.replace(partial, path)  # a save cut short never stands beside the lock that pins the old one
        lock |= {"archive": path.name, "archive_bytes": path.stat().st_size, "manifest_digest": manifest_digest(path)}
    lock |= {**inputs, "base": base["image"], "base_config_digest": base["config_digest"], **_git_state()}
    lock["built_at"] = _now()
    lock["build_seconds"] = round(time.monotonic() - started, 1)
    _replace_lock(framework, images, lock)
    return lock


def _replace_lock(framework: str, images: Path, lock: dict) -> None:
    """Write the new lock; drop the image the old one pinned (its layers stay as build cache)."""
    path = lock_path(images, framework)
    old = json.loads(path.read_text()) if path.exists() else {}
    _write_json(path, lock)
    if old.get("image") and old["image"] != lock["image"]:
        subprocess.run([*podman_base(images), "rmi", old["image"]], capture_output=True)
    subprocess.run([*podman_base(images), "image", "prune", "-f"], capture_output=True)  # superseded layers


def current(framework: str, images: Path) -> bool:
    """The framework's image exists and was built from today's locks, recipe and code."""
    try:
        lock = json.loads(lock_path(images, framework).read_text())
        base = json.loads((images / BASE_LOCK).read_text())
    except (OSError, ValueError):
        return False
    wanted = build_inputs(framework)
    return all(lock.get(k) == v for k, v in wanted.items()) and base.get("config_digest") == lock["base_config_digest"]


def ensure(framework: str, images: Path) -> dict:
    """Build the base and the framework's image unless they are current (minutes once, then 0 s)."""
    with build_lock(images):
        base = images / BASE_LOCK
        if not base.exists() or json.loads(base.read_text())["recipe_sha256"] != sha256_of(BASE_RECIPE):
            build_base(images)
        if not current(framework, images):
            build(framework, images)
    return json.loads(lock_path(images, framework).read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dlbench.images.podman", description=__doc__.splitlines()[0])
    p.add_argument("command", choices=("base", "build", "ensure"))
    p.add_argument("framework", nargs="?")
    p.add_argument("--images", default=None, help="default: $DLBENCH_IMAGES, else .images/")
    args = p.parse_args(argv)
    images = Path(args.images).resolve() if args.images else images_dir()
    if args.command != "base" and not args.framework:
        p.error(f"{args.command} needs a FRAMEWORK")

    def produce():
        if args.command == "base":
            with build_lock(images):
                return build_base(images)
        if args.command == "build":
            with build_lock(images):
                return build(args.framework, images)
        return ensure(args.framework, images)

    return cli_result("dlbench.images.podman", produce)


def cli_result(prog: str, produce) -> int:
    """An images command's ending, shared by this CLI and the derived files' (squashfs, sif):
    its result printed (JSON, or a command line as it is), or the build's error on one line and
    exit status 1."""
    try:
        result = produce()
    except (BuildError, ImageMismatch, OSError, KeyError, ValueError) as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 1
    print(result if isinstance(result, str) else json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
