"""After Slurm ended a run: its final state, what the next attempt does, and Slurm's verdict.

A run that Slurm ends as a whole (scancel, time limit, node failure) fails its Snakemake
job: the launcher dies with it and cannot write launch.json. `previous_attempt()` decides
what the next attempt does with what the dead one left: Snakemake's retry of the same
invocation moves the evidence to `attempt<k>/` and runs again; a later invocation
(train.smk's record_ended_run) records the run as Slurm ended it (no rerun), so
`snakemake --profile slurm` run a second time completes the grid and the report.
`outcome()` is Slurm's verdict, which the launcher writes into launch.json. Stdlib only.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from dlbench.files import set_aside
from dlbench.launch.slurm.environment import job_id_from_environment, settles_earlier_attempt
from dlbench.launch.slurm.record import RECORD, attempt_number, read_record, write_record
from dlbench.launch.slurm.srun import query

# Slurm job states → dlbench statuses (worst first as in dlbench.analysis.aggregate.FAILURE_ORDER).
SLURM_STATUS = {
    "OUT_OF_MEMORY": "oom",
    "TIMEOUT": "timeout",
    "DEADLINE": "timeout",
    "CANCELLED": "cancelled",
    "PREEMPTED": "cancelled",
    "NODE_FAIL": "failed",
    "BOOT_FAIL": "failed",
    "FAILED": "failed",
}
ACTIVE_STATES = {
    "PENDING",
    "RUNNING",
    "CONFIGURING",
    "COMPLETING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
    "STOPPED",
    "SUSPENDED",
}
# How long a new attempt waits for an earlier job that Slurm still lists as active.
ACTIVE_WAIT_S = 60


def slurm_status(state: str | None) -> str | None:
    """A Slurm job/step state ('CANCELLED by 0', 'OUT_OF_MEMORY', ...) → dlbench status."""
    if not state:
        return None
    return SLURM_STATUS.get(state.split()[0].rstrip("+"))


def _sacct_records(job_id: str, instances: bool = False) -> list[dict]:
    """sacct's lines for the job (accounting), oldest first; with `instances`, one per run of
    a requeued job (`-D`: a node failure requeues a batch job under the same id)."""
    cmd = ["sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", "JobIDRaw,State,ExitCode,Elapsed,Reason"]
    out = query([*cmd, "-D"] if instances else cmd) or ""
    records = []
    for line in out.splitlines():
        fields = line.split("|") + [None, None]
        if fields[0] == str(job_id) and fields[2] is not None:
            records.append(
                {
                    "state": fields[1],
                    "exit_code": fields[2],
                    "elapsed": fields[3],
                    "reason": fields[4],
                    "source": "sacct",
                }
            )
    return records


def job_state(job_id: str) -> dict:
    """Slurm's account of a job: sacct (accounting) if it answers, else squeue (jobs stay
    there MinJobAge seconds after they end). {"state": None} when neither knows it."""
    records = _sacct_records(job_id)
    if records:
        return records[-1]
    out = query(["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%i|%T|%r"])
    if out:
        for line in out.splitlines():
            fields = line.split("|")
            if fields and fields[0] == str(job_id) and len(fields) >= 2:
                return {"state": fields[1], "reason": fields[2] if len(fields) > 2 else None, "source": "squeue"}
    return {"state": None, "source": None}


def _active(state: dict) -> bool:
    return (state.get("state") or "").split(" ")[0] in ACTIVE_STATES


def _job_id_from_rank_logs(run_dir: Path) -> str | None:
    for path in sorted(run_dir.glob("rank*.steps.jsonl")):
        try:
            with open(path, encoding="utf-8") as f:
                header = json.loads(f.readline())
        except (OSError, ValueError):
            continue
        slurm = (header.get("provenance") or {}).get("slurm") or {}
        if slurm.get("slurm_job_id"):
            return str(slurm["slurm_job_id"])
    return None


def _evidence(run_dir: Path) -> list[Path]:
    return [
        *sorted(run_dir.glob("rank*.steps.jsonl")),
        *sorted(run_dir.glob("rank*.exitcode")),
        *([run_dir / RECORD] if (run_dir / RECORD).exists() else []),
    ]


def unsettled(run_dir: str | os.PathLike) -> bool:
    """A run that an earlier attempt started (slurm.json or rank logs) and that has no
    launch.json: Slurm ended its job before the launcher could write it."""
    run_dir = Path(run_dir)
    return not (run_dir / "launch.json").exists() and bool(_evidence(run_dir))


def _final_state(run_dir: Path, job_id: str | None) -> dict:
    """The earlier job's state once Slurm no longer lists it as active (accounting can lag
    behind the controller); exits with a message if it is still active after ACTIVE_WAIT_S."""
    own_job = job_id is not None and job_id == job_id_from_environment()
    if own_job:
        return _earlier_instance(job_id)
    state = job_state(job_id) if job_id else {"state": None, "source": None}
    deadline = time.monotonic() + ACTIVE_WAIT_S
    while _active(state) and time.monotonic() < deadline:
        time.sleep(5)
        state = job_state(job_id)
    if _active(state):
        sys.exit(
            f"dlbench: {run_dir}: the earlier attempt, Slurm job {job_id}, is still {state['state']}; "
            "wait for it to end (or scancel it), then run again"
        )
    return state


def _earlier_instance(job_id: str) -> dict:
    """How the earlier run of this very job ended: Slurm requeued it (JobRequeue, after
    NODE_FAIL, preemption or `scontrol requeue`) and runs the same batch script again."""
    ended = [r for r in _sacct_records(job_id, instances=True) if not _active(r)]
    if ended:
        return {**ended[-1], "requeued": True}
    return {
        "state": "REQUEUED",
        "reason": "no accounting (sacct) for the earlier run",
        "source": None,
        "requeued": True,
    }


def _move_aside(run_dir: Path, record: dict) -> None:
    """Snakemake's retry: the earlier attempt's files go to `attempt<k>/`."""
    write_record(run_dir, record)
    target = set_aside(run_dir, _evidence(run_dir), int(record.get("attempt") or attempt_number(run_dir)))
    final = record.get("job_final") or {}
    how = f"Slurm job {record.get('job_id')} ended {final.get('state')}" + (
        ", requeued" if final.get("requeued") else ""
    )
    print(f"[dlbench] retry ({how}): the earlier attempt's files are in {target}", file=sys.stderr)


def previous_attempt(run_dir: str | os.PathLike, world: int, settle: bool | None = None) -> list[int | None] | None:
    """What to do with what an earlier attempt of this run left (launch.json missing).

    Returns None: start the run (nothing there, or Snakemake's retry — `settle` false — and
    the earlier attempt's files have been moved to `attempt<k>/`). Returns rank exit codes:
    do not run again, the run is recorded as Slurm ended it (the caller writes launch.json).
    Exits with a message if the earlier job is still active.
    """
    run_dir = Path(run_dir)
    settle = settles_earlier_attempt() if settle is None else settle
    if not _evidence(run_dir):
        return None
    record = read_record(run_dir) or {}
    job_id = record.get("job_id") or _job_id_from_rank_logs(run_dir)
    state = _final_state(run_dir, job_id)
    record.setdefault("job_id", job_id)
    if not settle:
        record["job_final"] = state
        _move_aside(run_dir, record)
        return None
    record.update(state="settled", job_final=state, settled=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    write_record(run_dir, record)
    print(
        f"[dlbench] {run_dir}: recorded as Slurm ended it (job {job_id}: {state.get('state')}); "
        "move the directory away to run this cell again",
        file=sys.stderr,
    )
    codes = record.get("rank_exit_codes")
    return codes if isinstance(codes, list) and len(codes) == world else [None] * world


def outcome(run_dir: str | os.PathLike) -> tuple[str | None, str]:
    """Slurm's word on a run whose rank logs do not say 'ok': (dlbench status, reason), or
    (None, '') when Slurm has nothing to add (no slurm.json, or the job ended normally)."""
    record = read_record(run_dir)
    if not record:
        return None, ""
    job = f"Slurm job {record.get('job_id', '?')}"
    final = record.get("job_final") or {}
    status = slurm_status(final.get("state"))
    if status:
        reason = final.get("reason")
        detail = f" ({reason})" if reason and reason not in ("None", "(null)") else ""
        return status, f"{job}: {final['state']}{detail}"
    if record.get("oom_kill"):
        return "oom", f"{job}: a rank was killed by the out-of-memory handler"
    return None, ""
