"""Container runtimes: each rank of a run inside its framework's pinned image. Stdlib only.

One small registered class per `run.container` value. `verify()` checks the image against
its lock (`<images>/<framework>.lock.json`, written by dlbench.images.podman when it built the
image) before any rank starts; `command(inner)` wraps one rank's command line. The launcher
(launchers.py) wraps every rank's command, locally and under srun, so a multi-node job starts
one container per rank on every node. docs/containers.md explains the flags.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from dlbench.launch.request import CONTAINER_NAMES, LaunchRequest, registrar
from dlbench.provenance import sha256_file as sha256_of

REPO_ROOT = Path(__file__).resolve().parents[2]
PODMAN_CONF = REPO_ROOT / "containers" / "podman" / "containers.conf"
# Where the images hold the framework's venv and dlbench's code (containers/Containerfile).
IMAGE_PYTHON = "/opt/venv/bin/python"
IMAGE_CODE_DIR = "/opt/dlbench"
# Host variables every rank needs inside: its placement (dlbench's and Slurm's).
PASSED_VARIABLES = ("DLBENCH_*", "SLURM*", "CUDA_VISIBLE_DEVICES")

RUNTIMES: dict[str, type[Runtime]] = {}
register = registrar(RUNTIMES, CONTAINER_NAMES, "container runtime")


class ImageMismatch(Exception):
    """The image is not the one its lock pins (or either is missing): the run must not start."""


def runtime_for(request: LaunchRequest) -> Runtime:
    return RUNTIMES[request.container](request)


def image_name(framework: str, device: str = "cpu") -> str:
    """The image a framework's runs on `device` use: its own name on the CPU, else
    <framework>-<device>, built from that device's env lock (dlbench.images.podman.env_lock)."""
    return framework if device == "cpu" else f"{framework}-{device}"


def lock_path(images: str | os.PathLike, framework: str) -> Path:
    return Path(images) / f"{framework}.lock.json"


def squashfs_path(images: str | os.PathLike, framework: str) -> Path:
    """The squashfs pyxis runs a framework's ranks from (dlbench.images.squashfs builds it)."""
    return Path(images) / f"{framework}.sqsh"


def squashfs_lock_path(images: str | os.PathLike, framework: str) -> Path:
    return Path(images) / f"{framework}.squashfs.lock.json"


def sif_path(images: str | os.PathLike, framework: str) -> Path:
    """The .sif Apptainer runs a framework's ranks from (dlbench.images.sif builds it)."""
    return Path(images) / f"{framework}.sif"


def sif_lock_path(images: str | os.PathLike, framework: str) -> Path:
    return Path(images) / f"{framework}.sif.lock.json"


def read_lock(images: str | os.PathLike, framework: str) -> dict:
    path = lock_path(images, framework)
    try:
        lock = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ImageMismatch(
            f"no image lock for {framework} at {path} ({error.__class__.__name__}): build the image first "
            "(bash tools/containers.sh, or snakemake podman_images)"
        ) from None
    lock["lock_sha256"] = sha256_of(path)
    lock["lock_path"] = str(path.resolve())
    return lock


def podman_base(images: str | os.PathLike) -> list[str]:
    """podman with dlbench's store and settings (storage flags on the command line, not in a
    storage.conf: that one made every run stall 20 s here)."""
    store = (Path(images) / "podman").resolve()  # podman refuses long or unlike spellings of it
    return ["env", f"CONTAINERS_CONF={PODMAN_CONF}", "podman", "--root", f"{store}/root", "--runroot", f"{store}/run"]


class Runtime:
    name = ""

    def __init__(self, request: LaunchRequest) -> None:
        self.request = request
        self._lock: dict | None = None

    @property
    def image(self) -> str:
        return image_name(self.request.coords.framework, self.request.device)

    @property
    def lock(self) -> dict:
        if self._lock is None:
            self._lock = read_lock(self.request.images, self.image)
        return self._lock

    def rank_argv(self) -> list[str]:
        """The rank's own command inside the image: the image's Python, the same request."""
        return [IMAGE_PYTHON, "-m", "dlbench.launch", *self.request.to_argv()]

    def command(self, inner: list[str]) -> list[str]:
        raise NotImplementedError

    def srun_options(self) -> list[str]:
        """Options of the srun step that starts the ranks (a SPANK plug-in's, e.g. pyxis)."""
        return []

    def verify(self) -> dict:
        """What was checked (for the header); ImageMismatch names the image and both digests."""
        raise NotImplementedError

    def check_env_lock(self) -> None:
        """An image built from another env lock than the repository's is stale: never silent."""
        framework, name = self.request.coords.framework, self.lock.get("env_lock") or ""
        current = REPO_ROOT / name
        if name and current.exists() and self.lock.get("env_lock_sha256") != sha256_of(current):
            raise ImageMismatch(
                f"image {self.lock.get('image')} ({framework}) was built from {name} sha256 "
                f"{self.lock.get('env_lock_sha256')}, but the file is now sha256 {sha256_of(current)}: "
                "rebuild it (snakemake podman_images)"
            )

    def mounts(self) -> list[tuple[str, str]]:
        """(host path, mode): results read-write; data read-only where it lies outside results."""
        cwd = Path.cwd()
        found = [(str(cwd / "results"), "rw")]
        for extra in (self.request.data_dir, self.request.max_batch_file):
            if extra:
                path = Path(extra).resolve()
                if not path.is_relative_to(cwd / "results"):
                    found.append((str(path if path.is_dir() else path.parent), "ro"))
        return found

    def provenance_env(self) -> dict[str, str]:
        """What the rank's header records about the image it runs in."""
        return {
            "DLBENCH_CONTAINER_RUNTIME": self.name,
            "DLBENCH_IMAGE": str(self.lock.get("image")),
            "DLBENCH_IMAGE_DIGEST": str(self.image_digest()),
            "DLBENCH_IMAGE_LOCK": self.lock["lock_path"],
            "DLBENCH_IMAGE_LOCK_SHA256": self.lock["lock_sha256"],
        }

    def image_digest(self) -> str:
        raise NotImplementedError

    @classmethod
    def pinned(cls, images: str | os.PathLike, image: str) -> tuple[Path, str | None]:
        """The lock that pins what this runtime runs of `image`, and the digest a rank's header
        must then record (the audit's check); None where the lock pins nothing."""
        path = lock_path(images, image)
        return path, _read_json(path).get("config_digest")


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


@register
class NoContainer(Runtime):
    """Today's path: the rank runs in the framework's venv on the host."""

    name = "none"

    def command(self, inner: list[str]) -> list[str]:
        return inner

    def verify(self) -> dict:
        return {}


@register
class Podman(Runtime):
    """`podman run` by image ID (the config digest the lock pins): what is verified is what runs."""

    name = "podman"

    def image_digest(self) -> str:
        return self.lock["config_digest"]

    def network(self) -> str:
        # Several devices' processes meet at a rendezvous address (host network); one needs none.
        scale = self.request.coords.scale_obj
        return "host" if scale.nodes * scale.devices_per_node > 1 else "none"

    def command(self, inner: list[str]) -> list[str]:
        cwd = str(Path.cwd())
        cmd = [*podman_base(self.request.images), "run", "--rm", "--read-only", f"--network={self.network()}"]
        cmd += ["--ipc=host", "--pull=never", "--hostname", os.uname().nodename, "-w", cwd]
        for path, mode in self.mounts():
            cmd += ["-v", f"{path}:{path}:{mode}"]
        if self.request.device == "cuda":
            cmd += ["--device", "nvidia.com/gpu=all"]  # CDI; cluster only, untested here
        for name in PASSED_VARIABLES:
            cmd += ["-e", name]
        cmd += ["-e", "HOME=/tmp"]
        for key, value in self.provenance_env().items():
            cmd += ["-e", f"{key}={value}"]
        return [*cmd, self.image_digest().removeprefix("sha256:"), *inner]

    def verify(self) -> dict:
        image, pinned = self.lock.get("image"), self.lock.get("config_digest")
        if shutil.which("podman") is None:
            raise ImageMismatch("run.container: podman, but podman is not installed (bash tools/containers.sh)")
        out = subprocess.run(
            [*podman_base(self.request.images), "image", "inspect", "--format", "{{.Id}}", str(image)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        actual = "sha256:" + out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None
        if actual != pinned:
            said = (out.stderr.strip().splitlines() or ["no answer"])[-1]
            found = actual or f"not in the store ({said})"
            raise ImageMismatch(
                f"image {image} is {found}, but {self.lock['lock_path']} pins {pinned}: "
                f"refusing to run {self.request.coords.framework} in an image other than the pinned one"
            )
        self.check_env_lock()
        return {"runtime": self.name, "image": image, "digest": pinned}


# Apptainer forwards the whole host environment unless --cleanenv, and an OCI image's ENV only
# fills what the host left unset (a host PYTHONPATH or venv would win over the image's). With
# --cleanenv, what a rank needs from the host is set per task by srun after the command line is
# built, so this shell hands it over as APPTAINERENV_<name>, which --cleanenv keeps. Names come
# from `env` (letters, digits, _ only); each value is read through its name, never re-parsed.
# How a rank finds the other nodes (read-only: Apptainer binds resolv.conf read-write).
HOST_NAME_FILES = ("/etc/hosts", "/etc/resolv.conf")
PASS_PLACEMENT = (
    "for name in $(env | sed -nE 's/^((DLBENCH_|SLURM)[A-Za-z0-9_]*|CUDA_VISIBLE_DEVICES)=.*/\\1/p'); do "
    'eval "export APPTAINERENV_$name=\\"\\$$name\\""; done; exec "$@"'
)


class FromImage(Runtime):
    """A runtime whose ranks run from a file made from the pinned podman image (pyxis's
    squashfs, Apptainer's .sif), pinned by a lock of its own beside the image's: `verify()`
    checks that the file was made from the image the image lock pins now, and that it is, byte
    for byte, the file its own lock pins."""

    path_of = staticmethod(sif_path)
    lock_path_of = staticmethod(sif_lock_path)
    digest_key = ""  # the file's sha256 in its lock
    maker = ""  # the module that makes the file and its lock

    @property
    def file(self) -> Path:
        return self.path_of(self.request.images, self.image).resolve()

    @property
    def file_lock(self) -> dict:
        path = self.lock_path_of(self.request.images, self.image)
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise ImageMismatch(
                f"no {self.name} image lock at {path} ({error.__class__.__name__}): make it first "
                f"(python -m {self.maker} {self.image}, or snakemake with run.container: {self.name})"
            ) from None

    def image_digest(self) -> str:
        return "sha256:" + str(self.file_lock.get(self.digest_key) or "")

    @classmethod
    def pinned(cls, images: str | os.PathLike, image: str) -> tuple[Path, str | None]:
        path = cls.lock_path_of(images, image)
        digest = _read_json(path).get(cls.digest_key)
        return path, f"sha256:{digest}" if digest else None

    def provenance_env(self) -> dict[str, str]:
        lock = self.lock_path_of(self.request.images, self.image)
        values = super().provenance_env() | {"DLBENCH_IMAGE": str(self.file), "DLBENCH_IMAGE_LOCK": str(lock)}
        return values | {"DLBENCH_IMAGE_LOCK_SHA256": sha256_of(lock)}

    def verify(self) -> dict:
        pinned, image = self.file_lock, self.lock
        if pinned.get("config_digest") != image.get("config_digest"):
            raise ImageMismatch(
                f"{self.file} was made from {pinned.get('config_digest')}, but {image['lock_path']} pins "
                f"{image.get('config_digest')}: make it again (python -m {self.maker} {self.image})"
            )
        if not self.file.is_file():
            raise ImageMismatch(f"image {self.file} does not exist (python -m {self.maker} {self.image})")
        actual = "sha256:" + sha256_of(self.file)
        if actual != self.image_digest():
            raise ImageMismatch(
                f"image {self.file} is {actual}, but {self.lock_path_of(self.request.images, self.image)} "
                f"pins {self.image_digest()}: refusing to run {self.request.coords.framework} in another image"
            )
        self.check_env_lock()
        return {"runtime": self.name, "image": str(self.file), "digest": actual}


@register
class Apptainer(FromImage):
    """`apptainer exec` of the .sif built from the image's OCI archive (dlbench.images.sif), one
    per rank, locally or under srun (tests/test_container_apptainer.py runs it where Apptainer
    is installed). Shares the host network: Apptainer makes a network namespace only for root
    or with a site's CNI setup. --contain: the container's own /tmp, /var/tmp and an empty
    home, no host /dev."""

    name = "apptainer"
    path_of, lock_path_of = staticmethod(sif_path), staticmethod(sif_lock_path)
    digest_key, maker = "sif_sha256", "dlbench.images.sif"

    def command(self, inner: list[str]) -> list[str]:
        # --no-eval: the values below reach the rank verbatim, not through a shell. The site's
        # bind paths (apptainer.conf: /etc/hosts, /etc/localtime, anything a site adds) are
        # host files bound read-write, so a rank running as root could change the node's
        # /etc/hosts: none of them, and the node's name resolution read-only.
        cmd = ["apptainer", "exec", "--cleanenv", "--no-eval", "--contain", "--no-mount", "bind-paths"]
        cmd += ["--pwd", str(Path.cwd())]
        cmd += [arg for name in HOST_NAME_FILES for arg in ("--bind", f"{name}:{name}:ro")]
        if self.request.device == "cuda":
            cmd.append("--nv")
        for path, mode in self.mounts():
            cmd += ["--bind", f"{path}:{path}:{mode}"]
        for key, value in self.provenance_env().items():
            cmd += ["--env", f"{key}={value}"]
        return ["sh", "-c", PASS_PLACEMENT, "apptainer-env", *cmd, str(self.file), *inner]


@register
class Pyxis(FromImage):
    """pyxis/enroot: srun itself starts every task in a container made from the squashfs file
    (srun_options); the task's command, which runs inside, only sets what the header records.
    pyxis passes the task's environment in (DLBENCH_*, SLURM_*, CUDA_VISIBLE_DEVICES) and
    enroot shares the host network. Run for real on the local Slurm cluster where enroot and
    pyxis are installed by their own guides (docs/containers.md; tests/test_container_pyxis.py)."""

    name = "pyxis"
    path_of, lock_path_of = staticmethod(squashfs_path), staticmethod(squashfs_lock_path)
    digest_key, maker = "squashfs_sha256", "dlbench.images.squashfs"

    def srun_options(self) -> list[str]:
        # The read-only image; results the only writable host path, data outside it read-only.
        # enroot gives /tmp a private tmpfs (as podman does): binding the node's /tmp there
        # exposed every host file under it read-write and hid results and data beneath it.
        mounts = [f"{path}:{path}:{mode}" for path, mode in self.mounts()]
        return [
            f"--container-image={self.file}",
            f"--container-mounts={','.join(mounts)}",
            f"--container-workdir={Path.cwd()}",
            "--no-container-mount-home",
            "--container-readonly",
        ]

    def command(self, inner: list[str]) -> list[str]:
        values = {"HOME": "/tmp", **self.provenance_env()}
        return ["env", *(f"{key}={value}" for key, value in values.items()), *inner]
