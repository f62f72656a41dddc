"""Pipeline-parallel runs' bubbles and peaks per stage, from their step logs: each rank's
measured bubble (the step records' `bubble`: the share of the schedule's time its stages did
not compute, mean over the measured steps), the pipeline's (its least idle rank's, the stage
that sets the pace), the schedule's theory from the header (dlbench.pipelining) and each
rank's peak memory. Empty for every other run. cells.md's table of them: tables.pipeline_lines."""

from __future__ import annotations

import math

import pandas as pd

from dlbench.analysis import stats
from dlbench.analysis.columns import col
from dlbench.analysis.memory import rank_peak

GIB = 2**30
COLUMNS = (col.bubble_fraction, col.bubble_theory)


def _rank_bubble(log) -> float:
    values = [s["bubble"] for s in log.measured_steps() if "bubble" in s]
    return stats.mean(values)


def run_pipeline(logs) -> dict:
    """A run's pipeline columns; NaN and empty text for a run without a pipeline."""
    pipeline = ((logs[0].header or {}).get("framework", {}).get("parallel_layout") or {}).get("pipeline")
    if not pipeline:
        return {
            col.bubble_fraction: math.nan,
            col.bubble_theory: math.nan,
            col.stage_bubbles: "",
            col.stage_peaks_gib: "",
        }
    bubbles = [_rank_bubble(log) for log in logs]
    known = [b for b in bubbles if not math.isnan(b)]
    return {
        col.bubble_fraction: min(known) if known else math.nan,
        col.bubble_theory: float(pipeline["theoretical_bubble"]),
        col.stage_bubbles: ";".join(f"{b:.3f}" for b in bubbles),
        col.stage_peaks_gib: ";".join(f"{rank_peak(log)[0] / GIB:.3f}" for log in logs),
    }


def cell_pipeline(group: pd.DataFrame) -> dict:
    """A cell's: the means over its runs that finished, and its first finished repeat's per rank."""
    if col.bubble_fraction not in group:
        return {**dict.fromkeys(COLUMNS, math.nan), col.stage_bubbles: "", col.stage_peaks_gib: ""}
    ok = group[group[col.status] == "ok"].sort_values(col.repeat)
    means = {c: float(ok[c].dropna().mean()) if ok[c].notna().any() else math.nan for c in COLUMNS}
    per_rank = {
        c: next((text for text in ok[c].fillna("") if text), "") for c in (col.stage_bubbles, col.stage_peaks_gib)
    }
    return means | per_rank
