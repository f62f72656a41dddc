"""Machine-captured provenance for the step-log header. Stdlib only."""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _run(cmd: list[str], timeout: float = 10) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory_total_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return None


def git_state() -> dict:
    commit = _run(["git", "rev-parse", "HEAD"])
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"])
    return {"commit": commit, "dirty": bool(dirty) if dirty is not None else None}


def gpu_info() -> dict | None:
    query = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    if query is None:
        return None
    return {"gpus": query.splitlines(), "topology": _run(["nvidia-smi", "topo", "-m"])}


def collect(env_lock: str | None = None) -> dict:
    """What this process runs on; cheap enough to call once per rank."""
    slurm = {
        k.lower(): os.environ[k]
        for k in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_CLUSTER_NAME")
        if k in os.environ
    }
    return {
        "os": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_gb": memory_total_gb(),
        "gpu": gpu_info(),
        "slurm": slurm or None,
        "env_lock": Path(env_lock).name if env_lock else None,
        "env_lock_sha256": sha256_file(env_lock) if env_lock and Path(env_lock).exists() else None,
        "container_image": os.environ.get("APPTAINER_CONTAINER") or os.environ.get("SINGULARITY_CONTAINER"),
        "git": git_state(),
    }
