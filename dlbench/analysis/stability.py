"""Within-run stability: whether a run's measured window still trends (warm-up too short,
throttling) or is bimodal (two speeds: a co-tenant, frequency steps), from its per-step times.

A run's step time at step i is the slowest rank's (durations only: clocks of different
processes are never compared). Thresholds and why: docs/report.md (Within-run stability).
Its columns in runs.csv: `stability` (steady / trend / bimodal, "" with too few steps),
`stability_reason`, the first- and last-third median step times, and, for a flagged run
only, its step times (`step_times_s`: the report draws their histogram from runs.csv).
"""

from __future__ import annotations

import math

import numpy as np

from dlbench import labels
from dlbench.analysis import stats
from dlbench.analysis.columns import col

MIN_STEPS = 8  # fewer measured steps: no verdict (a third of the window is under 3 steps)
TREND_CHANGE = 0.05  # a trend is flagged when its slope changes the step time by more than this
MIN_PEAK_RATIO = 0.2  # the smaller mode's peak density, at least this share of the larger's
MAX_VALLEY = 0.7  # the density between the modes, at most this share of the smaller peak
MIN_SHARE = 0.1  # each mode holds at least this share of the steps (fewer: outliers, not a mode)

STEADY, TREND, BIMODAL = "steady", "trend", "bimodal"


def step_times(measured: list[list[dict]]) -> np.ndarray:
    """Per measured step, the slowest rank's duration (ranks cut to the shortest)."""
    n = min(len(steps) for steps in measured)
    durations = np.array([[s["t_end"] - s["t_start"] for s in steps[:n]] for steps in measured], dtype=float)
    return durations.max(axis=0)


def verdict(times) -> tuple[str, str, dict]:
    """(steady / trend / bimodal / "", reason, evidence) for one run's step times."""
    times = np.asarray(times, dtype=float)
    if times.size < MIN_STEPS:
        return "", labels.stability_too_few(times.size, MIN_STEPS), {}
    trend = stats.window_trend(times)
    evidence = {"first": trend["first"], "last": trend["last"]}
    slope_excludes_zero = trend["slope_low"] > 0 or trend["slope_high"] < 0
    moved = abs(trend["last"] / trend["first"] - 1) if trend["first"] else 0.0
    if slope_excludes_zero and abs(trend["change"]) > TREND_CHANGE and moved > TREND_CHANGE:
        return TREND, labels.stability_trend(trend["first"], trend["last"], trend["change"], times.size), evidence
    modes = stats.two_modes(times)
    if modes["ratio"] >= MIN_PEAK_RATIO and modes["valley"] <= MAX_VALLEY and modes["share"] >= MIN_SHARE:
        return BIMODAL, labels.stability_bimodal(modes["split"], modes["share"], times.size), evidence
    return STEADY, "", evidence


def run_columns(measured: list[list[dict]]) -> dict:
    """The run's stability columns of runs.csv."""
    times = step_times(measured)
    flag, reason, evidence = verdict(times)
    flagged = flag in (TREND, BIMODAL)
    return {
        col.stability: flag,
        col.stability_reason: reason,
        col.step_first_third_s: evidence.get("first", math.nan),
        col.step_last_third_s: evidence.get("last", math.nan),
        col.step_times_s: ";".join(f"{t:.6g}" for t in times) if flagged else "",
    }


def parse_step_times(text) -> np.ndarray:
    """runs.csv's `step_times_s` back to numbers (empty: not flagged)."""
    if not isinstance(text, str) or not text:
        return np.array([])
    return np.array([float(t) for t in text.split(";")])
