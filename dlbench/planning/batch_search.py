"""`batch: max`: find the largest per-device batch that trains without running out of memory.

Doubling from 1 until a probe runs out of memory, then bisecting between the last batch
that trained and the first that did not. Each probe is a short real run (1 warm-up + 1
measured step) in its own process, through the same launcher as the benchmark runs, so an
out-of-memory probe cannot poison the next one. Stdlib only.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from dlbench.coords import SINGLE_DEVICE, RunCoords
from dlbench.launch.record import RECORD_NAME, crashed_under_cap
from dlbench.launch.request import LaunchRequest
from dlbench.protocol import RunProtocol
from dlbench.steplog import rank_log_name, read_steplog

# A probe whose rank died by a signal under the address-space cap: near the edge a CPU run's
# native code may crash on a refused allocation instead of raising (launch/record.crashed_under_cap).
CRASHED_UNDER_CAP = "crashed under the memory cap"


class SearchError(RuntimeError):
    pass


def search(probe: Callable[[int], str], limit: int = 4096) -> tuple[int, list[dict]]:
    """Largest batch b <= limit with probe(b) == "ok", assuming monotonic memory use.

    probe returns a footer status; "oom" (or CRASHED_UNDER_CAP) means too large, anything else
    but "ok" is an error.
    """
    history: list[dict] = []

    def ok(batch: int) -> bool:
        status = probe(batch)
        history.append({"batch": batch, "status": status})
        if status not in ("ok", "oom", CRASHED_UNDER_CAP):
            raise SearchError(f"probe at batch {batch} ended with status {status!r}, not ok/oom")
        return status == "ok"

    if not ok(1):
        raise SearchError("batch 1 does not fit in memory")
    good, bad = 1, None
    while bad is None:
        candidate = min(good * 2, limit)
        if candidate == good:
            return good, history  # reached the limit without running out of memory
        if ok(candidate):
            good = candidate
        else:
            bad = candidate
    while bad - good > 1:
        middle = (good + bad) // 2
        if ok(middle):
            good = middle
        else:
            bad = middle
    return good, history


def probe_request(
    framework: str,
    model: str,
    precision: str,
    device: str,
    *,
    preset: str,
    statistic: str,
    image_size: int,
    seq_len: int,
    threads: int,
    memory_cap_mb: int,
) -> LaunchRequest:
    """The launch of a probe run (its batch and run directory are set per probe): one
    device, synthetic data, 1 warm-up + 1 measured step, the grid's protocol preset."""
    coords = RunCoords(framework, model, precision, "synthetic", "1", "1x1", SINGLE_DEVICE, 1)
    return LaunchRequest(
        coords=coords,
        protocol=RunProtocol(preset, warmup_steps=1, measured_steps=1, statistic=statistic),
        run_dir="",
        image_size=image_size,
        seq_len=seq_len,
        threads=threads,
        device=device,
        memory_cap_mb=memory_cap_mb,
        progress_every=0,
    )


def launcher_probe(python: str, repo: str, request: LaunchRequest) -> Callable[[int], str]:
    """A probe running one short real run of `python -m dlbench.launch` at a given batch."""

    def probe(batch: int) -> str:
        with tempfile.TemporaryDirectory(prefix="dlbench-batch-") as tmp:
            run_dir = Path(tmp) / "run"
            launch = replace(request, coords=request.coords.with_(batch=str(batch)), run_dir=str(run_dir))
            subprocess.run(
                [python, "-m", "dlbench.launch", *launch.to_argv()],
                cwd=repo,
                env={"PYTHONPATH": repo, "PATH": "/usr/bin:/bin", **_passed_on()},
                check=False,
                capture_output=True,
                timeout=1800,
            )
            return _probe_status(run_dir, launch.memory_cap_mb)

    return probe


def _probe_status(run_dir: Path, memory_cap_mb: int) -> str:
    """The probe's footer status; CRASHED_UNDER_CAP where a capped rank died by a signal."""
    log = run_dir / rank_log_name(0)
    status = read_steplog(log).status if log.exists() else "missing"
    record = run_dir / RECORD_NAME
    if status in ("killed", "missing") and memory_cap_mb and record.exists():
        codes = json.loads(record.read_text()).get("rank_exit_codes") or []
        return CRASHED_UNDER_CAP if crashed_under_cap(memory_cap_mb, codes) else status
    return status


def _passed_on() -> dict:
    """What a probe keeps of the search's environment: the GPUs its Slurm job was given
    (CUDA_VISIBLE_DEVICES), the plug-in path that names its framework, and OpenMP's wait
    policy, which the runs inherit too."""
    names = ("CUDA_VISIBLE_DEVICES", "DLBENCH_FRAMEWORK_PATH", "OMP_WAIT_POLICY")
    return {name: os.environ[name] for name in names if name in os.environ}
