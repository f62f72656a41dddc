"""`slurm.json`: dlbench's record of a run's Slurm job, beside the rank logs. Stdlib only.

Written before srun starts (so a job that Slurm kills as a whole still leaves its job id),
completed with per-rank exit codes and OOM kills when srun returns (`srun.launch`), and with
the job's final state when a later invocation settles a run that Slurm ended (`attempts`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dlbench.files import write_atomically

RECORD = "slurm.json"
# Each rank's shell leaves its exit status here (srun_command); the launcher collects them.
EXIT_CODE_FILE = "rank{rank}.exitcode"


def read_record(run_dir: str | os.PathLike) -> dict | None:
    path = Path(run_dir) / RECORD
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_record(run_dir: str | os.PathLike, record: dict) -> None:
    write_atomically(Path(run_dir) / RECORD, json.dumps(record, indent=1) + "\n")


def attempt_number(run_dir: str | os.PathLike) -> int:
    """This attempt's number: one more than the earlier attempts moved to `attempt<k>/`."""
    return 1 + sum(1 for path in Path(run_dir).glob("attempt[0-9]*") if path.is_dir())
