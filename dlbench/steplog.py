"""The step log: the only contract between runners and everything after them.

Versioned JSON Lines, one file per rank (`rank<k>.steps.jsonl`):

  line 1     {"type": "header", "schema": "dlbench.steplog/2", ...}   a `Header`: coordinates, protocol, device
  lines 2..  {"type": "step", "i": 0, "phase": "warmup", "t_start": .., "t_end": .., "samples": 8, "loss": 6.9}
  last line  {"type": "footer", "status": "ok" | "oom" | "failed" | "timeout" | "cancelled", "error": null}

The JSON schema is dlbench.schemas' `steplog`; `StepLogWriter` is the one writer
and `read_steplog` the one reader. The writer is stdlib only (it runs in every framework
environment); the reader validates header and footer against the schema file (with a
compiled validator, imported lazily: the analysis environment has it) and checks step
records by hand, which keeps reading 10,000 logs fast.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from dlbench.schemas import load_schema

SCHEMA = "dlbench.steplog/2"
# Versions the reader takes: /2 added the header's `sync` and the footer's `energy` (absent
# from a /1 log: per-step sync, energy not measured).
READABLE_SCHEMAS = ("dlbench.steplog/1", SCHEMA)
STATUSES = ("ok", "oom", "failed", "timeout", "cancelled")
PHASES = ("warmup", "measure")


def rank_log_name(rank: int) -> str:
    return f"rank{rank}.steps.jsonl"


@dataclass
class Header:
    """The first record of a rank's log, in the order its fields are written (the worker
    fills it from its `RunSpec`; the schema file says which fields a reader requires)."""

    run: dict  # RunCoords.as_dict()
    protocol: dict  # preset, warmup_steps, measured_steps, statistic
    batch: int  # per device
    image_size: int | None
    seq_len: int | None
    threads: int
    device: str
    local_devices: int
    compile: bool
    allocator: dict  # the malloc the rank mapped: {"name", "library"} (dlbench.launch.allocator)
    rank: int
    world_size: int
    local_rank: int
    node: str
    host: str
    pid: int
    start_time: str  # UTC, ISO 8601
    clock: str  # the clock t_start/t_end are read from (device events: per-step times)
    sync: str  # "step": sync() after every step; "window": only at the window's ends
    python: str
    dlbench_version: str
    framework: dict  # name, version, device, parameters, FLOPs (Runner.describe())
    provenance: dict  # machine, Slurm job, environment lock hash, git commit

    def record(self) -> dict:
        return {"type": "header", "schema": SCHEMA, **dataclasses.asdict(self)}


class StepLogWriteError(OSError):
    """A step log that could not be written (disk full, quota, I/O error); names the file."""


class RawLogWriter:
    """One raw JSON Lines log (a rank's evidence): opened with "x", so an existing log is
    never overwritten; the header written and flushed at once (a killed process still leaves
    it); records; a footer; then read-only. An OSError other than an existing log becomes a
    StepLogWriteError naming the file. The step log's writer, and the prescreen's."""

    noun = "log"  # in the error's text

    def __init__(self, path: str | os.PathLike, header: dict):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self._io(lambda: open(self.path, "x", encoding="utf-8"))
        self._write(header)
        self._io(self._file.flush)
        self._closed = False

    def _io(self, action):
        """`action()`; an OSError other than an existing log becomes a StepLogWriteError."""
        try:
            return action()
        except FileExistsError:
            raise
        except OSError as exc:
            raise StepLogWriteError(exc.errno, f"cannot write {self.noun} {self.path}: {exc.strerror}") from exc

    def _write(self, record: dict) -> None:
        line = json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n"
        self._io(lambda: self._file.write(line))

    def write_records(self, records) -> None:
        for record in records:
            self._write(record)
        self._io(self._file.flush)

    def finish(self, footer: dict) -> None:
        """Write the footer and close; the log is read-only from then on."""
        if self._closed:
            return
        self._closed = True
        try:
            self._write(footer)
            self._io(self._file.close)
        finally:
            with contextlib.suppress(OSError):  # a failed flush leaves the file open
                self._file.close()
        os.chmod(self.path, 0o444)


class StepLogWriter(RawLogWriter):
    """Writes one rank's step log; refuses to overwrite an existing log.

    Step records are kept in memory during the timed loop and written with the footer, so
    no file I/O happens between timestamps. `header`: a `Header`, or a mapping of header
    fields (tests write partial headers).
    """

    noun = "step log"

    def __init__(self, path: str | os.PathLike, header: Header | dict):
        record = header.record() if isinstance(header, Header) else {"type": "header", "schema": SCHEMA, **header}
        super().__init__(path, record)

    def write_steps(self, steps: list[dict]) -> None:
        self.write_records({"type": "step", **step} for step in steps)

    def close(self, status: str, error: str | None = None, **extra) -> None:
        if status not in STATUSES:
            raise ValueError(f"unknown step-log status {status!r}")
        self.finish({"type": "footer", "status": status, "error": error, **extra})


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


# ---------------------------------------------------------------- reading


@functools.cache
def _record_validators() -> dict:
    """Per record type, the schema file's branch for it, compiled once per process.

    fastjsonschema (locked in the analysis environment) compiles the schema to Python:
    ~13 µs per header and footer, where jsonschema takes ~250 µs -- 2.5 s more for 10,000 logs.
    """
    import fastjsonschema

    schema = load_schema("steplog")
    return {branch["properties"]["type"]["const"]: fastjsonschema.compile(branch) for branch in schema["oneOf"]}


def schema_problem(record: dict, lineno: int) -> str | None:
    """The first way a header or footer record breaks the schema, naming its field; None if it does not."""
    import fastjsonschema

    kind = record["type"]
    try:
        _record_validators()[kind](record)
    except fastjsonschema.JsonSchemaValueException as exc:
        name = ".".join(str(p) for p in exc.path[1:]) or "(record)"
        return f"line {lineno}: {kind} field {name!r} {exc.message.removeprefix(exc.name + ' ')}"
    return None


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


def _header_problem(record: dict) -> str | None:
    if record.get("type") != "header":
        return "first line is not a header record"
    if record.get("schema") not in READABLE_SCHEMAS:
        return f"unknown schema version {record.get('schema')!r} (expected {' or '.join(READABLE_SCHEMAS)})"
    return schema_problem(record, 1)


def _footer_problem(log: StepLog, record: dict, lineno: int) -> str | None:
    if log.footer is not None:
        return f"second footer on line {lineno}"
    if record.get("status") not in STATUSES:
        return f"unknown footer status {record.get('status')!r}"
    return schema_problem(record, lineno)


def _parse_line(line: str, lineno: int, truncated: bool) -> tuple[dict | None, str | None]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        if truncated:
            return None, f"truncated last line (line {lineno}): writing stopped mid-record (disk full, or killed)"
        return None, f"invalid JSON on line {lineno}"
    if not isinstance(record, dict):
        return None, f"line {lineno} is not a JSON object"
    return record, None


def read_header(path: str | os.PathLike) -> dict | None:
    """The header of a rank's log if its first line is a valid one (the log's other lines unread)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            line = f.readline()
    except OSError:
        return None
    record, _ = _parse_line(line.removesuffix("\n"), 1, False)
    return record if record is not None and _header_problem(record) is None else None


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
        record, problem = _parse_line(line, lineno, lineno == len(lines) and not ends_with_newline)
        if record is None:
            log.problems.append(problem)
            continue
        kind = record.get("type")
        if lineno == 1:
            problem = _header_problem(record)
            if problem:
                log.problems.append(problem)
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
            problem = _footer_problem(log, record, lineno)
            if problem:
                log.problems.append(problem)
            else:
                log.footer = record
        else:
            log.problems.append(f"line {lineno}: unknown record type {kind!r}")
    if log.header is None and not log.problems:
        log.problems.append("empty log: no header")
    if log.header is not None and log.footer is None:
        log.problems.append("missing footer: the run was killed before it finished")
    return log
