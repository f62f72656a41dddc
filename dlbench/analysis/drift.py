"""Drift over a campaign: whether throughput rises or falls with the order the runs started
in (the machine warming, throttling, a co-tenant arriving), per framework.

Each ok run's throughput is taken relative to its own cell's median, so that cells of
different speeds share one axis; the Theil-Sen slope of that ratio against the run order
(and against the start time) says by how much it changes over the campaign, with a 95% CI.
Runs interleaved in a seeded order (`run.order`, dlbench/planning/run_order.py) make a
drift show here instead of hiding inside one cell's repeats.
"""

from __future__ import annotations

import pandas as pd

from dlbench.analysis import stats
from dlbench.analysis.columns import col
from dlbench.coords import CELL_FIELDS

MIN_RUNS = 6  # fewer ok runs with a start time in a framework: no verdict
DRIFT_CHANGE = 0.05  # flagged: the whole CI beyond ±5 % change over the campaign


def in_run_order(runs: pd.DataFrame) -> pd.DataFrame:
    """Ok runs with a start time, in start order: `order` (0, 1, ...), `elapsed_s` since
    the first start, and `relative` (throughput ÷ its cell's median)."""
    if runs.empty or col.start_time not in runs:
        return runs.iloc[0:0].assign(order=[], elapsed_s=[], relative=[])
    ok = runs[(runs[col.status] == "ok") & runs[col.throughput].map(stats.finite) & runs[col.start_time].notna()]
    ok = ok[ok[col.start_time].astype(str) != ""]
    started = pd.to_datetime(ok[col.start_time], utc=True, format="ISO8601")
    ok = ok.assign(started=started).sort_values(["started", *CELL_FIELDS, col.repeat], kind="stable")
    median = ok.groupby(CELL_FIELDS)[col.throughput].transform(col.median)
    return ok.assign(
        order=range(len(ok)),
        elapsed_s=(ok["started"] - ok["started"].min()).dt.total_seconds(),
        relative=ok[col.throughput] / median,
    ).drop(columns=["started"])


def _flagged(trend: dict) -> bool:
    return trend["change_low"] > DRIFT_CHANGE or trend["change_high"] < -DRIFT_CHANGE


def drift_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per framework: runs, change of relative throughput over the run order and over the
    start times (with 95% CIs), and whether it drifts."""
    ordered = in_run_order(runs)
    rows = []
    for framework, group in ordered.groupby(col.framework, sort=True):
        row = {col.framework: framework, "runs": len(group), "drift": ""}
        # Runs that all started at once (one timestamp) have no order to judge.
        if len(group) >= MIN_RUNS and group["relative"].nunique() > 1 and group["elapsed_s"].nunique() > 1:
            by_order = stats.window_trend(group["relative"], group["order"])
            by_time = stats.window_trend(group["relative"], group["elapsed_s"])
            row.update({f"order_{k}": by_order[k] for k in ("change", "change_low", "change_high")})
            row.update({f"time_{k}": by_time[k] for k in ("change", "change_low", "change_high")})
            row["drift"] = "drift" if _flagged(by_order) or _flagged(by_time) else "none"
        rows.append(row)
    return pd.DataFrame(rows)
