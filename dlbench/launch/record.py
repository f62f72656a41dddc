"""`launch.json`: the launcher's record of one run, the file Snakemake tracks. Stdlib only.

Rank exit codes, the step logs expected and missing, wall time, the launcher, the image the
ranks ran in (`container`), and a verdict the aggregation reads instead of asking again:
`verdict` when the launcher refused to start the ranks (an image that is not the pinned one),
and (srun) `slurm_verdict`, Slurm's status and reason for a job it ended or OOM-killed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from dlbench.files import set_aside, write_atomically
from dlbench.launch import prescreen
from dlbench.launch.request import LaunchRequest
from dlbench.launch.slurm.record import attempt_number
from dlbench.runners import run_layout
from dlbench.steplog import rank_log_name

RECORD_NAME = "launch.json"


def write_launch_record(
    request: LaunchRequest,
    exit_codes: list,
    started: float,
    slurm_verdict: dict | None = None,
    container: dict | None = None,
    refused: str = "",
) -> None:
    """One exit code per task started; the first `step_logs` tasks of the run's layout write
    step logs. `refused`: why no task was started (a FAILED cell with that reason)."""
    run_dir = Path(request.run_dir)
    layout = run_layout(request.coords)
    logs = layout.step_logs
    name = prescreen.log_name if request.task == "prescreen" else rank_log_name
    missing = [r for r in range(logs) if not (run_dir / name(r)).exists()]
    if missing:
        print(f"[dlbench] ranks {missing} left no step log in {run_dir}", file=sys.stderr)
    record = {
        "world_size": layout.tasks,
        "step_logs": logs,
        "rank_exit_codes": exit_codes,
        "ranks_without_log": missing,
        "wall_seconds": round(time.monotonic() - started, 3),
        "launcher": request.launcher,
    }
    if request.launcher == "srun":
        record["slurm_verdict"] = slurm_verdict
    if container:
        record["container"] = container
    if refused:
        record["verdict"] = {"status": "failed", "reason": refused}
    elif not slurm_verdict and (died := rank_deaths(exit_codes)):
        if crashed_under_cap(request.memory_cap_mb, exit_codes):
            cap = request.memory_cap_mb
            died += f" (under the {cap} MB address-space cap: most likely an allocation refused in native code)"
        record["verdict"] = {"status": "killed", "reason": died}
    _write_record(run_dir / RECORD_NAME, json.dumps(record, indent=1) + "\n")


def rank_death(code: int, rank: int) -> str:
    """'rank 1 ended by SIGKILL' / 'rank 0 exited with code 1'."""
    if code < 0:
        try:
            return f"rank {rank} ended by {signal.Signals(-code).name}"
        except ValueError:
            return f"rank {rank} ended by signal {-code}"
    return f"rank {rank} exited with code {code}"


def rank_deaths(exit_codes: list) -> str:
    """What ended the ranks that did not exit 0 (ranks leave their status in their step log
    and exit 0), e.g. 'rank 1 ended by SIGKILL; the launcher stopped rank 0'; '' if none."""
    died = [rank_death(code, rank) for rank, code in enumerate(exit_codes) if code not in (None, 0)]
    if not died:
        return ""
    stopped = [str(rank) for rank, code in enumerate(exit_codes) if code is None]
    return "; ".join(died + ([f"the launcher stopped rank {', '.join(stopped)}"] if stopped else []))


def crashed_under_cap(memory_cap_mb: int, exit_codes: list) -> bool:
    """A rank under the address-space cap ended by a signal (not a scheduler's SIGKILL): native
    code that does not check a refused allocation crashes instead of raising (oneDNN's
    convolution backward, seen here)."""
    return bool(memory_cap_mb) and any(code is not None and code < 0 and code != -signal.SIGKILL for code in exit_codes)


def set_aside_earlier_attempt(run_dir: Path) -> Path | None:
    """An earlier attempt's rank files (an interrupted run: no launch.json) moved whole to
    `attempt<k>/`, so that a new attempt never overwrites a raw log; None if there were none."""
    files = sorted(path for path in run_dir.glob("rank*") if path.is_file())
    return set_aside(run_dir, files, attempt_number(run_dir)) if files else None


def _write_record(target: Path, text: str) -> None:
    """The whole record or none: Snakemake takes an existing launch.json as a finished run."""
    try:
        write_atomically(target, text)
    except OSError as exc:
        sys.exit(f"dlbench: cannot write {target}: {exc.strerror} (the run's step logs are kept)")


def slurm_verdict(run_dir: str | os.PathLike) -> tuple[str | None, str]:
    """(dlbench status, reason) that the launcher (a refused image) or Slurm gave the run, or
    (None, '') when neither has anything to add (no record, or a run that ended normally)."""
    try:
        record = json.loads((Path(run_dir) / RECORD_NAME).read_text())
    except (OSError, ValueError):
        return None, ""
    if record.get("verdict"):
        return record["verdict"].get("status"), record["verdict"].get("reason") or ""
    if record.get("launcher") == "srun" and "slurm_verdict" not in record:
        # Written before launch.json carried the verdict: slurm.json still has it.
        from dlbench.launch.slurm import outcome

        return outcome(run_dir)
    verdict = record.get("slurm_verdict") or {}
    return verdict.get("status"), verdict.get("reason") or ""
