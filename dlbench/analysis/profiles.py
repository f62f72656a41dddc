"""A profiled run's top operations by self time, read from its Chrome/Perfetto trace.

torch.profiler's `export_chrome_trace` (`trace.json.gz`) and jax.profiler's `*.trace.json.gz`
(both open in Perfetto, chrome://tracing and TensorBoard) are Chrome trace events; an
operation is a complete event ("ph": "X"), its self time its duration less that of the events
nested in it on the same thread; where the trace holds GPU kernels, only they are ranked.
Summed by name over the profiled steps and divided by them: the milliseconds per step an
operation takes itself. Runs on what the profiled run left in its
directory only; the tables never read it (docs/report.md, Profiles).
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pandas as pd

from dlbench.analysis.columns import col
from dlbench.coords import CELL_FIELDS
from dlbench.provenance import sha256_file
from dlbench.steplog import rank_log_name, read_steplog

# The trace files a profiler leaves below a run directory (the first that exists is read).
TRACE_PATTERNS = (
    "trace.json.gz",
    "trace.json",
    "**/*.trace.json.gz",
    "**/*.pt.trace.json",
    "**/perfetto_trace.json.gz",
)
TOP = 10
PROFILES_FILE = "profiles.csv"  # beside cells.csv
# Events that are no operation: the profiler's own spans, Python frames (jax's "$file:line"),
# step markers, a host thread waiting for the device. They still nest (their children's time
# is not theirs); they are not ranked.
NOT_OPERATIONS = {"Trace", "python_function", "user_annotation", "fwdbwd", "ac2g"}
NOT_OPERATION_PREFIXES = ("$", "ProfilerStep", "PyTorch Profiler")
WAITING = "wait for completion"


def trace_file(directory: str | Path) -> Path | None:
    """The Chrome trace a profiler left below `directory` (None: none it writes)."""
    root = Path(directory)
    for pattern in TRACE_PATTERNS:
        found = sorted(root.glob(pattern))
        if found:
            return found[0]
    return None


def load_events(path: str | Path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def self_times_us(events: list[dict]) -> dict[str, float]:
    """Each operation name's summed self time (µs) over complete events, thread by thread."""
    by_thread: dict[tuple, list[dict]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and "dur" in e and "ts" in e:
            by_thread[(e.get("pid"), e.get("tid"))].append(e)
    totals: dict[str, float] = defaultdict(float)
    for thread in by_thread.values():
        # Parents before children: earlier start first, the longer of two that start together.
        thread.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
        open_events: list[list] = []  # [end, name, self time left]
        for e in thread:
            start, dur = float(e["ts"]), float(e["dur"])
            while open_events and open_events[-1][0] <= start:
                _close(open_events.pop(), totals)
            if open_events:
                open_events[-1][2] -= dur
            open_events.append([start + dur, _operation(e), dur])
        while open_events:
            _close(open_events.pop(), totals)
    return dict(totals)


def _close(event: list, totals: dict[str, float]) -> None:
    if event[1] is not None:
        totals[event[1]] += max(0.0, event[2])


def _operation(event: dict) -> str | None:
    name = event["name"]
    if event.get("cat") in NOT_OPERATIONS or name.startswith(NOT_OPERATION_PREFIXES) or WAITING in name:
        return None
    return name


def device_kernels(events: list[dict]) -> list[dict]:
    """The trace's GPU kernels: torch.profiler's `kernel` events, or the complete events on a
    process jax.profiler names for a GPU (/device:GPU:0). Empty for a CPU run."""
    gpus = {
        e.get("pid")
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name" and "GPU" in str((e.get("args") or {}).get("name"))
    }
    return [
        e
        for e in events
        if e.get("ph") == "X" and "dur" in e and "ts" in e and (e.get("cat") == "kernel" or e.get("pid") in gpus)
    ]


def top_operations(path: str | Path, steps: int, top: int = TOP) -> list[dict]:
    """The `top` operations by self time per step (ms), with their share of all self time. On
    a GPU the device's kernels alone: the host's own time there is mostly launching them and
    waiting for them (cuLaunchKernel, cudaDeviceSynchronize), which says nothing of the step."""
    events = load_events(path)
    totals = self_times_us(device_kernels(events) or events)
    whole = sum(totals.values()) or 1.0
    ranked = sorted(totals.items(), key=lambda item: (-item[1], item[0]))[:top]
    return [
        {"rank": i + 1, "operation": name, "self_ms_per_step": us / 1000 / max(1, steps), "share": us / whole}
        for i, (name, us) in enumerate(ranked)
    ]


def cell_rows(run_dir: str | Path, cell: dict) -> list[dict]:
    """A profiled run's rows of profiles.csv: its top operations (rank 0's trace), or one row
    saying why there are none (no profiler, a failed run, a trace in a format not read)."""
    log = read_steplog(Path(run_dir) / rank_log_name(0))
    profile = (log.footer or {}).get("profile") or {}
    base = {**cell, "profiler": profile.get("profiler") or "", "trace": ""}
    if log.status != "ok":
        return [{**base, col.reason: f"the profiled run ended {log.status}"}]
    if not profile.get("profiler"):
        return [{**base, col.reason: profile.get("reason", "the run recorded no profile")}]
    trace = trace_file(Path(run_dir) / profile["directory"])
    if trace is None:
        return [{**base, col.reason: f"{profile['profiler']} wrote no Chrome trace (its trace opens in TensorBoard)"}]
    base["trace"] = str(trace.relative_to(Path(run_dir)))
    return [{**base, **op, col.reason: ""} for op in top_operations(trace, profile["steps"])]


COLUMNS = [*CELL_FIELDS, "profiler", "trace", "rank", "operation", "self_ms_per_step", "share", col.reason]


def listed_files(profiled: list, root: str | Path = ".") -> dict[str, str]:
    """Every file the profiled runs left (logs and traces), with its sha256: the audit lists
    them; no table is derived from them but profiles.csv."""
    found = {}
    for coords in profiled:
        run_dir = Path(root) / coords.run_dir
        for path in sorted(p for p in run_dir.rglob("*") if p.is_file()):
            found[str(path.relative_to(root))] = sha256_file(path)
    return found


def table(profiled: list, root: str | Path = ".") -> pd.DataFrame:
    """profiles.csv: every profiled run's rows (`profiled`: the grid's RunCoords of repeat 0)."""
    rows = []
    for coords in profiled:
        cell = {k: v for k, v in coords.as_dict().items() if k != col.repeat}
        rows += cell_rows(Path(root) / coords.run_dir, cell)
    return pd.DataFrame(rows, columns=COLUMNS)
