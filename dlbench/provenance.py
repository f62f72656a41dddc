"""Machine-captured provenance for the step-log header. Stdlib only (runs in every framework env).

`collect()` runs once per rank, before the timed loop, so it stays cheap: a few small files
under /proc and /sys, `git` twice, `nvidia-smi` once per rank and its long forms (`-q`,
`topo -m`) only on each node's local rank 0. The container image's sha256 is never computed
here by default: workflow/scripts/verify_image.py hashes the image once, before the jobs, and
leaves a record that the job names in DLBENCH_IMAGE_RECORD.

Environment variables read (all optional):
    APPTAINER_CONTAINER, SINGULARITY_CONTAINER   set by Apptainer/Singularity inside a container
    DLBENCH_IMAGE_RECORD   JSON written by verify_image.py: the image path and its verified sha256
    DLBENCH_HASH_IMAGE=1   hash the image here when no record is available (reads the whole file)
    DLBENCH_CONFIG_SHA256  sha256 of the resolved workflow config (see config_sha256), set by the rule
    SLURM_*                job id, node list, cluster, partition, CPU binding, distribution (else the
                           job id from /proc/self/cgroup)
    DLBENCH_LOCAL_RANK, SLURM_LOCALID, LOCAL_RANK   which process on a node collects the GPU details
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# Where the images' recipes put dlbench and its build record (containers/*.def).
IMAGE_BUILD_INFO = Path("/opt/dlbench/BUILD_INFO.json")
IMAGE_LABELS = Path("/.singularity.d/labels.json")
SLURM_VARIABLES = (
    "SLURM_JOB_ID",
    "SLURM_JOB_NODELIST",
    "SLURM_CLUSTER_NAME",
    "SLURM_JOB_PARTITION",
    "SLURM_JOB_NUM_NODES",
    "SLURM_NTASKS",
    "SLURM_STEP_ID",
    "SLURM_PROCID",
    # what srun applied to this task (run.cpu_bind, run.distribution)
    "SLURM_CPU_BIND",
    "SLURM_DISTRIBUTION",
)
GPU_QUERY = (
    "index,name,uuid,pci.bus_id,driver_version,vbios_version,memory.total,power.limit,"
    "clocks.max.sm,clocks.max.memory,persistence_mode,compute_mode,ecc.mode.current,"
    "pcie.link.gen.max,pcie.link.width.max"
)
# nvidia-smi -q sections that describe the moment, not the machine (and Processes names other users' jobs).
VOLATILE_SECTIONS = {"Processes", "Timestamp"}


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def config_sha256(config: dict) -> str:
    """sha256 of a workflow config as canonical JSON (sorted keys, no whitespace)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def command_output(cmd: list[str], timeout: float = 10, cwd=None) -> str | None:
    """A command's stdout, or None (not installed, failed, timed out)."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def _run(cmd: list[str], timeout: float = 10) -> str | None:
    out = command_output(cmd, timeout, cwd=REPO_ROOT)
    return out.strip() if out is not None else None


def _read(path: str | os.PathLike) -> str | None:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _read_json(path: str | os.PathLike) -> dict | None:
    text = _read(path)
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# ------------------------------------------------------------------ CPU, memory, OS


def cpu_model() -> str:
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def cpus_allowed() -> int | None:
    """CPUs this process may run on (a Slurm allocation or taskset narrows os.cpu_count())."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def memory_total_gb() -> float | None:
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 1024**2, 1)
    return None


def _cgroup_paths() -> dict[str, str]:
    """controller → path from /proc/self/cgroup ('' is the cgroup v2 unified hierarchy)."""
    paths = {}
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                paths[controller] = parts[2]
    return paths


def memory_limit_gb() -> float | None:
    """The memory cap of this process's cgroup (a Slurm --mem), or None when there is none."""
    paths = _cgroup_paths()
    candidates = []
    if "" in paths:
        candidates.append(Path("/sys/fs/cgroup") / paths[""].lstrip("/") / "memory.max")
    if "memory" in paths:
        candidates.append(Path("/sys/fs/cgroup/memory") / paths["memory"].lstrip("/") / "memory.limit_in_bytes")
    for path in candidates:
        text = (_read(path) or "").strip()
        if text.isdigit() and int(text) < 1 << 60:  # v1 reports "no limit" as a huge number
            return round(int(text) / 1024**3, 1)
    return None


def os_release() -> str | None:
    for line in (_read("/etc/os-release") or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return None


# ------------------------------------------------------------------ Slurm


def slurm_info() -> dict | None:
    """Job id, node list, cluster, partition from SLURM_*; the job id from the cgroup if those are gone.

    `apptainer exec --cleanenv` drops SLURM_* inside the container; Slurm's cgroup path
    (…/job_<id>/step_…) still names the job.
    """
    info = {k.lower(): os.environ[k] for k in SLURM_VARIABLES if os.environ.get(k)}
    if "slurm_job_nodelist" not in info and os.environ.get("SLURM_NODELIST"):
        info["slurm_job_nodelist"] = os.environ["SLURM_NODELIST"]
    if info:
        info["source"] = "environment"
        return info
    for path in _cgroup_paths().values():
        match = re.search(r"/job_(\d+)(?:/|$)", path)
        if match:
            return {"slurm_job_id": match.group(1), "source": "cgroup (SLURM_* not in the environment)"}
    return None


# ------------------------------------------------------------------ GPUs


def local_rank() -> int:
    for name in ("DLBENCH_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def parse_nvidia_smi_q(text: str) -> dict:
    """`nvidia-smi -q` as nested dicts (one key per 'Name : value' line, sections by indentation)."""
    root: dict = {}
    stack: list[tuple[int, dict]] = [(-1, root)]
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("="):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        line = raw.strip()
        if " : " in line or line.endswith(" :"):
            key, _, value = line.partition(" :")
            parent[key.strip()] = value.strip() or None
        else:  # a section: "GPU 00000000:07:00.0", "Clocks", ...
            section: dict = {}
            parent[line] = section
            stack.append((indent, section))
    return _drop_volatile(root)


def _drop_volatile(tree: dict) -> dict:
    return {k: _drop_volatile(v) if isinstance(v, dict) else v for k, v in tree.items() if k not in VOLATILE_SECTIONS}


def gpu_info(details: bool | None = None) -> dict | None:
    """GPUs as nvidia-smi sees them, or None without nvidia-smi (or without a driver).

    `details` (default: on local rank 0 only) adds `nvidia-smi -q` and `nvidia-smi topo -m`,
    which take longer and are the same for every rank of a node.
    """
    if shutil.which("nvidia-smi") is None:
        return None
    if details is None:
        details = local_rank() == 0
    fields = GPU_QUERY.split(",")
    rows = _run(["nvidia-smi", f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"])
    devices = []
    if rows is not None:
        for row in rows.splitlines():
            values = [v.strip() for v in row.split(",")]
            if len(values) == len(fields):
                devices.append(dict(zip(fields, values, strict=True)))
        gpus = [f"{d['name']}, {d['driver_version']}, {d['memory.total']} MiB" for d in devices]
    else:  # an older driver that lacks a field: the short query
        basic = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
        if basic is None:
            return None
        gpus = basic.splitlines()
    info = {
        "gpus": gpus,
        "devices": devices,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "details_on": "this rank" if details else "local rank 0 of this node",
    }
    if details:
        query = _run(["nvidia-smi", "-q"], timeout=30)
        parsed = parse_nvidia_smi_q(query) if query else {}
        info["driver_version"] = parsed.get("Driver Version")
        info["cuda_driver_version"] = parsed.get("CUDA Version")
        info["nvidia_smi_q"] = parsed or None
        info["topology"] = _run(["nvidia-smi", "topo", "-m"])
    return info


# ------------------------------------------------------------------ container, git


def container_info() -> dict | None:
    """The image this process runs in, or None outside a container: as the launcher verified
    it (run.container), else as Apptainer/Singularity name it (Snakemake's --sdm apptainer)."""
    if os.environ.get("DLBENCH_CONTAINER_RUNTIME"):
        return launched_container_info()
    path = os.environ.get("APPTAINER_CONTAINER") or os.environ.get("SINGULARITY_CONTAINER")
    if not path:
        return None
    sha256, source = _image_sha256(path)
    return {
        "path": path,
        "sha256": sha256,
        "sha256_source": source,
        "labels": _read_json(IMAGE_LABELS),
        "build_info": _read_json(IMAGE_BUILD_INFO),
    }


def launched_container_info() -> dict:
    """The image the launcher verified against its lock and started this rank in (by digest),
    and the env lock the image holds, hashed here, inside it."""
    digest = os.environ.get("DLBENCH_IMAGE_DIGEST") or ""
    locks = sorted(IMAGE_BUILD_INFO.parent.glob("envs/*.txt"))
    return {
        "runtime": os.environ["DLBENCH_CONTAINER_RUNTIME"],
        "path": os.environ.get("DLBENCH_IMAGE"),
        "digest": digest or None,
        "sha256": digest.removeprefix("sha256:") or None,
        "sha256_source": "verified against the image lock by the launcher before the ranks started",
        "image_lock": os.environ.get("DLBENCH_IMAGE_LOCK"),
        "image_lock_sha256": os.environ.get("DLBENCH_IMAGE_LOCK_SHA256"),
        "env_lock_in_image": str(locks[0]) if locks else None,
        "env_lock_in_image_sha256": sha256_file(locks[0]) if locks else None,
        "build_info": _read_json(IMAGE_BUILD_INFO),
    }


def _image_sha256(path: str) -> tuple[str | None, str]:
    try:
        stat = os.stat(path)
    except OSError:
        stat = None  # the image file itself is usually not visible inside the container
    record_path = os.environ.get("DLBENCH_IMAGE_RECORD")
    if record_path:
        record = _read_json(record_path)
        if record is None:
            return None, f"record {record_path} unreadable"
        if os.path.realpath(path) != record.get("image") and path != record.get("image"):
            return None, f"record {record_path} is for {record.get('image')}, not this image"
        if stat is not None and (stat.st_size, stat.st_mtime_ns) != (record.get("size"), record.get("mtime_ns")):
            return None, f"image changed since {record_path} was written"
        return record.get("sha256"), f"verified against the lock before the job ({record_path})"
    sidecar = _read(path + ".sha256")
    if sidecar and re.match(r"^[0-9a-f]{64}\b", sidecar.strip()):
        return sidecar.split()[0], f"sidecar file {path}.sha256 (not re-checked)"
    if os.environ.get("DLBENCH_HASH_IMAGE") == "1" and stat is not None:
        return sha256_file(path), "computed by this process"
    return None, "not computed (no DLBENCH_IMAGE_RECORD or sidecar; DLBENCH_HASH_IMAGE=1 hashes the image)"


def git_state() -> dict:
    """The dlbench checkout's commit and dirty flag; inside an image, the build's (BUILD_INFO.json)."""
    commit = _run(["git", "rev-parse", "HEAD"])
    if commit is not None:
        dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"])
        return {"commit": commit, "dirty": bool(dirty) if dirty is not None else None, "source": "checkout"}
    built = _read_json(REPO_ROOT / "BUILD_INFO.json") or _read_json(IMAGE_BUILD_INFO)
    if built and built.get("git_commit"):
        return {"commit": built["git_commit"], "dirty": built.get("git_dirty"), "source": "image build"}
    return {"commit": None, "dirty": None, "source": None}


# ------------------------------------------------------------------ all of it


def site_environment() -> dict:
    """A site's own Python (run.python): its interpreter and the sha256 of its installed
    distributions (sorted `name==version` lines), which stand in for the lock it does not have."""
    from importlib import metadata

    found = {f"{(d.metadata['Name'] or '?').lower()}=={d.version}" for d in metadata.distributions()}
    listing = "\n".join(sorted(found)) + "\n"
    return {
        "kind": "site",
        "python": sys.executable,
        "prefix": sys.prefix,
        "distributions_sha256": hashlib.sha256(listing.encode()).hexdigest(),
        "distributions": sorted(found),
    }


def collect(env_lock: str | None = None, site: bool = False, slurm_request: dict | None = None) -> dict:
    """What this process runs on; cheap enough to call once per rank. `site`: the ranks run
    in a site's own Python, with no lock (recorded as `site_environment`). `slurm_request`:
    the site knobs the run asked Slurm for (LaunchRequest.slurm_request()), beside `slurm`,
    what Slurm says it applied."""
    lock = Path(env_lock) if env_lock else None
    container = container_info()
    return {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "os_release": os_release(),
        "kernel": platform.release(),
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_allowed": cpus_allowed(),
        "memory_gb": memory_total_gb(),
        "memory_limit_gb": memory_limit_gb(),
        "gpu": gpu_info(),
        "slurm": slurm_info(),
        "slurm_request": slurm_request,
        "env_lock": lock.name if lock else None,
        "env_lock_sha256": sha256_file(lock) if lock and lock.exists() else None,
        "site_environment": site_environment() if site else None,
        "container_image": container["path"] if container else None,
        "container": container,
        "git": git_state(),
        "config_sha256": os.environ.get("DLBENCH_CONFIG_SHA256"),
    }
