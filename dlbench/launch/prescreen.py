"""The communication prescreen's rank: one short all-reduce measurement per message size,
started by the launcher like a training run (`--task prescreen`), its raw result one log per
rank (`rank<k>.allreduce.jsonl`, JSON Lines, never overwritten: a header, one record per size
and scope, a footer). The framework's module measures (Capabilities.allreduce); this writes.
Stdlib only. docs/slurm.md, Communication prescreen."""

from __future__ import annotations

import datetime as dt
import json
import os
import traceback
from pathlib import Path

from dlbench import provenance
from dlbench.runners import framework_module
from dlbench.steplog import RawLogWriter

SCHEMA = "dlbench.allreduce/1"
LOG_GLOB = "rank*.allreduce.jsonl"


def log_name(rank: int) -> str:
    return f"rank{rank}.allreduce.jsonl"


def sizes_from_text(text: str) -> list[int]:
    return [int(size) for size in text.split(",") if size]


def run_prescreen_rank(request, dist) -> int:
    """Measure and write this rank's log; 0 (the log says how it went), 1 if it was not written."""
    path = Path(request.run_dir) / log_name(dist.rank)
    header = {
        "type": "header",
        "schema": SCHEMA,
        "scale": request.coords.scale,
        "framework": request.coords.framework,
        "device": request.device,
        "rank": dist.rank,
        "world_size": dist.world_size,
        "local_rank": dist.local_rank,
        "local_world_size": dist.local_world_size,
        "node": dist.node,
        "warmup": request.protocol.warmup_steps,
        "iterations": request.protocol.measured_steps,
        "start_time": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        "provenance": provenance.collect(request.env_lock, slurm_request=request.slurm_request()),
    }
    footer = {"type": "footer", "status": "ok", "error": None}
    try:
        measured = framework_module(request.coords.framework).allreduce_times(
            dist,
            request.device,
            sizes_from_text(request.sizes),
            request.protocol.warmup_steps,
            request.protocol.measured_steps,
            request.threads // max(1, dist.local_world_size),
        )
        header["backend"] = measured["backend"]
        records = [{"type": "size", **record} for record in measured["records"]]
    except Exception as exc:  # a result, not a crash: the table shows why
        traceback.print_exc()
        records, footer = [], {"type": "footer", "status": "failed", "error": f"{type(exc).__name__}: {exc}"}
    # Written once measured (the header names the backend the measurement chose).
    try:
        log = RawLogWriter(path, header)
        log.write_records(records)
        log.finish(footer)
    except OSError as exc:  # an existing log (never overwritten), a full disk
        print(f"dlbench: cannot write {path}: {exc}", flush=True)
        return 1
    return 0


def read_log(path: str | os.PathLike) -> dict:
    """One rank's log: {"header", "sizes", "footer", "problem"} (never raises on bad content)."""
    found: dict = {"header": None, "sizes": [], "footer": None, "problem": ""}
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        records = [json.loads(line) for line in lines]
    except (OSError, ValueError) as exc:
        return {**found, "problem": f"{path}: unreadable ({exc})"}
    for record in records:
        kind = record.get("type") if isinstance(record, dict) else None
        if kind == "header" and record.get("schema") == SCHEMA:
            found["header"] = record
        elif kind == "size":
            found["sizes"].append(record)
        elif kind == "footer":
            found["footer"] = record
    if found["header"] is None or found["footer"] is None:
        found["problem"] = f"{path}: no {SCHEMA} header or no footer (the rank was killed?)"
    return found
