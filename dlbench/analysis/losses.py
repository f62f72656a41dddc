"""Loss curves and the convergence check between frameworks (docs/sanity.md, "Across
frameworks"): each run's loss per step against the samples (tokens for an LLM) seen, kept as
losses.csv; and, for cells that train the same model on the same data, batch, precision and
scale, whether one framework's loss over the last quarter of the measured window stands
measurably above the best one's at matched steps. A faster framework that learns slower is
not faster: the verdict goes into cells.csv and the report, never averaged away."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dlbench import labels
from dlbench.analysis import stats
from dlbench.analysis.columns import col
from dlbench.coords import CELL_FIELDS, RUN_FIELDS

LOSSES_FILE = "losses.csv"
CURVE_COLUMN = "loss_curve"  # runs_table's per-run series, moved out to losses.csv by the derivation
CURVE_FIELDS = ["step", "phase", "samples_seen", "loss"]
# What makes two cells comparable: all coordinates but who trained and how it was split.
MATCH_FIELDS = [f for f in CELL_FIELDS if f not in (col.framework, col.strategy)]
# The verdicts of convergence(): the group's lowest loss; the gap's whole CI within the tolerance
# of it, above, below; or crossing the tolerance.
BEST, LEVEL, SLOWER, FASTER, INCONCLUSIVE = labels.BEST, labels.LEVEL, labels.SLOWER, labels.FASTER, labels.INCONCLUSIVE
COMPARED = (LEVEL, SLOWER, FASTER, INCONCLUSIVE)
CONVERGENCE_COLUMNS = [col.convergence, col.convergence_reason, col.loss_gap, col.loss_gap_low, col.loss_gap_high]


def run_curve(logs) -> list[tuple]:
    """(step, phase, samples seen after it, mean loss over the ranks) per step of one run's rank logs."""
    curve, seen = [], 0
    for records in zip(*(log.steps for log in logs), strict=False):
        seen += sum(r["samples"] for r in records)
        finite = [r["loss"] for r in records if r.get("loss") is not None and math.isfinite(r["loss"])]
        curve.append((records[0]["i"], records[0]["phase"], seen, float(np.mean(finite)) if finite else math.nan))
    return curve


def curve_table(runs: pd.DataFrame) -> pd.DataFrame:
    """losses.csv: one row per step of every run that has a curve (runs_table's CURVE_COLUMN)."""
    rows = []
    if CURVE_COLUMN in runs:
        for run in runs[runs[CURVE_COLUMN].map(lambda c: isinstance(c, list) and len(c) > 0)].itertuples():
            coords = [getattr(run, f) for f in RUN_FIELDS]
            rows.extend([*coords, *point] for point in getattr(run, CURVE_COLUMN))
    return pd.DataFrame(rows, columns=[*RUN_FIELDS, *CURVE_FIELDS])


def last_quarter(curves: pd.DataFrame) -> pd.DataFrame:
    """Per run, its measured steps' last quarter (at least one step), numbered from 0 so that
    runs of one comparable group match step for step."""
    measured = curves[curves["phase"] == "measure"].sort_values([*RUN_FIELDS, "step"])
    parts = []
    for _, run in measured.groupby(RUN_FIELDS, sort=False):
        tail = run.iloc[len(run) - max(1, len(run) // 4) :]
        parts.append(tail.assign(at=range(len(tail))))
    return pd.concat(parts) if parts else measured.assign(at=[])


def convergence(cells: pd.DataFrame, curves: pd.DataFrame, tolerance: float) -> pd.DataFrame:
    """cells with CONVERGENCE_COLUMNS: per comparable group of two or more cells with curves, each
    cell's last-quarter loss against the lowest one's. loss_gap: mean of (this − best) over
    matched (repeat, step) pairs as a share of the best's loss at its first step (where training
    started: a memorised synthetic batch's loss nears 0, so its own level is no scale), with a
    bootstrap 95 % CI; 'level' only when the whole CI lies within ±`tolerance`, 'slower' when it
    lies wholly above, 'faster' wholly below (the best's loss is the lowest over all its steps,
    not necessarily at the matched ones), else 'inconclusive', saying how many repeats it
    would take to decide it (stats.decide_factor); the best is 'best'."""
    cells = cells.assign(**{c: "" for c in CONVERGENCE_COLUMNS[:2]}, **{c: math.nan for c in CONVERGENCE_COLUMNS[2:]})
    tails = last_quarter(curves)
    if tails.empty or cells.empty:
        return cells
    first = curves[curves["step"] == 0].groupby([*MATCH_FIELDS, col.framework, col.strategy])["loss"].mean()
    for key, group in tails.groupby(MATCH_FIELDS, sort=True):
        per_cell = {c: g for c, g in group.groupby([col.framework, col.strategy], sort=True)}
        if len(per_cell) < 2:
            continue
        best = min(per_cell, key=lambda c: per_cell[c]["loss"].mean())
        scale = float(first.get((*key, *best), math.nan))
        for cell, losses in per_cell.items():
            row = _cell_row(cells, dict(zip(MATCH_FIELDS, key, strict=True)), cell)
            cells.loc[row, CONVERGENCE_COLUMNS] = _verdict(cell, best, losses, per_cell[best], scale, tolerance)
    return cells


def _cell_row(cells: pd.DataFrame, match: dict, cell: tuple) -> pd.Series:
    row = (cells[col.framework] == cell[0]) & (cells[col.strategy] == cell[1])
    for field, value in match.items():
        row &= cells[field].astype(str) == str(value)
    return row


def _verdict(cell, best, losses: pd.DataFrame, best_losses: pd.DataFrame, scale: float, tolerance: float) -> list:
    best_mean = float(best_losses["loss"].mean())
    if cell == best:
        return [BEST, f"lowest last-quarter loss of its group ({best_mean:.4g})", 0.0, 0.0, 0.0]
    paired = losses.merge(best_losses, on=[col.repeat, "at"], suffixes=("", "_best"))
    paired = paired.assign(gap=(paired["loss"] - paired["loss_best"]) / abs(scale)).dropna(subset=["gap"])
    gaps = paired["gap"].to_numpy()
    if not gaps.size:
        return ["", "no repeat and step to match with the best", math.nan, math.nan, math.nan]
    gap = float(gaps.mean())
    low, high = stats.bootstrap_ci(col.mean, gaps)
    band = (-tolerance, tolerance)
    position = stats.band_position((low, high), band)
    verdict = {labels.SAME: LEVEL, labels.HIGHER: SLOWER, labels.LOWER: FASTER}.get(position, INCONCLUSIVE)
    other = f"{labels.framework_label(best[0])} ({best[1]})"
    reason = (
        f"{labels.CONVERGENCE_TEXT[verdict]} {other}: last-quarter loss {losses['loss'].mean():.4g} vs "
        f"{best_mean:.4g}, a gap of {gap:+.1%}{_gap_interval(low, high)} of its first-step loss {scale:.4g} "
        f"over {gaps.size} matched steps (tolerance {tolerance:.0%})"
    )
    if verdict == INCONCLUSIVE:
        reason += f": {_undecided(gap, (low, high), band, paired[col.repeat].nunique(), tolerance)}"
    return [verdict, reason, gap, low, high]


def _gap_interval(low: float, high: float) -> str:
    return f" [{low:+.1%}, {high:+.1%}]" if stats.finite(low) else ""


def _undecided(gap: float, ci: tuple[float, float], band: tuple[float, float], repeats: int, tolerance: float) -> str:
    """Why an inconclusive gap is: one matched step gives no CI; otherwise the CI crosses the band,
    and the repeats it would take to decide it (the matched steps grow with the repeats)."""
    if not stats.finite(ci[0]):
        return "one matched step gives no 95% CI: it cannot be decided until more repeats give one"
    return labels.crosses(tolerance, (repeats,), stats.decide_factor(gap, ci, band))
