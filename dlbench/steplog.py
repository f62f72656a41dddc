"""The step log: the only contract between runners and everything after them.

Versioned JSON Lines, one file per rank (`rank<k>.steps.jsonl`):

  line 1     {"type": "header", "schema": "dlbench.steplog/1", ...}   run coordinates, protocol, framework, device
  lines 2..  {"type": "step", "i": 0, "phase": "warmup", "t_start": .., "t_end": .., "samples": 8, "loss": 6.9}
  last line  {"type": "footer", "status": "ok" | "oom" | "failed" | "timeout" | "cancelled", "error": null}

The JSON schema is `workflow/schemas/steplog.schema.json`; `read_steplog` is the one
reader. Stdlib only, so that it imports in every framework environment.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA = "dlbench.steplog/1"
STATUSES = ("ok", "oom", "failed", "timeout", "cancelled")
PHASES = ("warmup", "measure")


def rank_log_name(rank: int) -> str:
    return f"rank{rank}.steps.jsonl"


class StepLogWriter:
    """Writes one rank's step log; refuses to overwrite an existing log.

    The header is written and flushed at once (a killed run still leaves evidence);
    step records are kept in memory during the timed loop and written with the
    footer, so no file I/O happens between timestamps.
    """

    def __init__(self, path: str | os.PathLike, header: dict):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # "x": never overwrite a raw log, whatever happens upstream.
        self._file = open(self.path, "x", encoding="utf-8")
        self._write({"type": "header", "schema": SCHEMA, **header})
        self._file.flush()
        self._closed = False

    def _write(self, record: dict) -> None:
        self._file.write(json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n")

    def write_steps(self, steps: list[dict]) -> None:
        for step in steps:
            self._write({"type": "step", **step})
        self._file.flush()

    def close(self, status: str, error: str | None = None, **extra) -> None:
        if self._closed:
            return
        if status not in STATUSES:
            raise ValueError(f"unknown step-log status {status!r}")
        self._write({"type": "footer", "status": status, "error": error, **extra})
        self._file.close()
        self._closed = True
        # Raw logs are evidence: make them read-only once complete.
        os.chmod(self.path, 0o444)


@dataclass
class StepLog:
    """One parsed rank log. `problems` non-empty means the run must be excluded."""

    path: str
    header: dict | None = None
    steps: list[dict] = field(default_factory=list)
    footer: dict | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.problems

    @property
    def status(self) -> str:
        return self.footer["status"] if self.footer else "killed"

    def measured_steps(self) -> list[dict]:
        return [s for s in self.steps if s["phase"] == "measure"]


_NUMBER = (int, float)
_STEP_KEYS = {"i": (int,), "phase": (str,), "t_start": _NUMBER, "t_end": _NUMBER, "samples": (int,)}


def _check_step(record: dict, lineno: int) -> str | None:
    for key, kinds in _STEP_KEYS.items():
        if type(record.get(key)) not in kinds:  # exact types: a bool is not a step index
            return f"line {lineno}: step record field {key!r} missing or not {kinds[0].__name__}"
    if record["phase"] not in PHASES:
        return f"line {lineno}: unknown phase {record['phase']!r}"
    if record["t_end"] < record["t_start"]:
        return f"line {lineno}: step {record['i']} ends before it starts"
    return None


def read_steplog(path: str | os.PathLike) -> StepLog:
    """Parse and validate one rank's step log; never raises on bad content."""
    log = StepLog(path=str(path))
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        log.problems.append(f"cannot read: {exc.strerror}")
        return log
    text = raw.decode("utf-8", errors="replace")
    lines = text.split("\n")
    ends_with_newline = text.endswith("\n")
    if ends_with_newline:
        lines.pop()
    seen_indices: set[int] = set()
    for lineno, line in enumerate(lines, start=1):
        last = lineno == len(lines)
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if last and not ends_with_newline:
                log.problems.append(f"truncated last line (line {lineno})")
            else:
                log.problems.append(f"invalid JSON on line {lineno}")
            continue
        if not isinstance(record, dict):
            log.problems.append(f"line {lineno} is not a JSON object")
            continue
        kind = record.get("type")
        if lineno == 1:
            if kind != "header":
                log.problems.append("first line is not a header record")
                return log
            if record.get("schema") != SCHEMA:
                log.problems.append(f"unknown schema version {record.get('schema')!r} (expected {SCHEMA})")
                return log
            log.header = record
        elif kind == "step":
            problem = _check_step(record, lineno)
            if problem:
                log.problems.append(problem)
            elif record["i"] in seen_indices:
                log.problems.append(f"duplicate step index {record['i']} (line {lineno})")
            else:
                seen_indices.add(record["i"])
                log.steps.append(record)
        elif kind == "footer":
            if log.footer is not None:
                log.problems.append(f"second footer on line {lineno}")
            elif record.get("status") not in STATUSES:
                log.problems.append(f"unknown footer status {record.get('status')!r}")
            else:
                log.footer = record
        else:
            log.problems.append(f"line {lineno}: unknown record type {kind!r}")
    if log.header is None and not log.problems:
        log.problems.append("empty log: no header")
    if log.header is not None and log.footer is None:
        log.problems.append("missing footer: the run was killed before it finished")
    return log
