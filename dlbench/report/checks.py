"""The report's measurement checks section: within-run stability, drift over run order,
placement (docs/report.md, Measurement checks). Data from runs.csv only."""

from __future__ import annotations

import pandas as pd

from dlbench import labels
from dlbench.analysis import stats
from dlbench.analysis.columns import col
from dlbench.analysis.drift import DRIFT_CHANGE, drift_table, in_run_order
from dlbench.analysis.placement import placement_table
from dlbench.analysis.stats import finite
from dlbench.findings.checks import run_name
from dlbench.plots import checks as check_figures
from dlbench.plots.layout import png_data_uri

HISTOGRAMS = 6  # flagged runs drawn, those whose step time moved most (the table lists every one)


def _ms(value) -> str:
    return f"{value * 1e3:.4g} ms" if finite(value) else "—"


def _percent(row, prefix: str) -> str:
    if not finite(row.get(f"{prefix}_change")):
        return "—"
    return f"{row[f'{prefix}_change']:+.1%} [{row[f'{prefix}_change_low']:+.1%} to {row[f'{prefix}_change_high']:+.1%}]"


def stability_part(runs: pd.DataFrame) -> dict:
    """Counts by verdict, every flagged run in the table, and histograms of the HISTOGRAMS runs
    whose step time moved most (the table holds them all)."""
    if col.stability not in runs:
        return {"judged": 0, "runs": len(runs), "counts": {}, "rows": [], "figure": None, "drawn": 0}
    judged = runs[runs[col.stability].map(labels.text).isin(["steady", "trend", "bimodal"])]
    flagged = judged[judged[col.stability].isin(["trend", "bimodal"])]
    moved = (flagged[col.step_last_third_s] / flagged[col.step_first_third_s] - 1).abs()
    flagged = flagged.assign(moved=moved).sort_values("moved", ascending=False, kind="stable")
    rows = [
        {
            "run": run_name(r),
            "verdict": labels.STABILITY_TEXT[r[col.stability]],
            "first": _ms(r[col.step_first_third_s]),
            "last": _ms(r[col.step_last_third_s]),
            col.reason: labels.text(r[col.stability_reason]),
        }
        for _, r in flagged.iterrows()
    ]
    drawn = flagged.head(HISTOGRAMS)
    figure = png_data_uri(check_figures.step_histograms, drawn) if rows else None
    counts = {labels.STABILITY_TEXT[v]: int((judged[col.stability] == v).sum()) for v in ("steady", "trend", "bimodal")}
    return {
        "judged": len(judged),
        "runs": len(runs),
        "counts": counts,
        "rows": rows,
        "figure": figure,
        "drawn": len(drawn),
    }


def drift_verdict(row) -> str:
    """DRIFT (a whole CI beyond the band); "no drift" only when both changes' whole CIs lie within
    ±DRIFT_CHANGE; otherwise inconclusive, with the runs it would take to decide it."""
    if row["drift"] not in labels.DRIFT_TEXT:
        return "too few runs"
    band = (-DRIFT_CHANGE, DRIFT_CHANGE)
    trends = [(row[f"{p}_change"], (row[f"{p}_change_low"], row[f"{p}_change_high"])) for p in ("order", "time")]
    crossing = [t for t in trends if stats.band_position(t[1], band) != labels.SAME]
    if row["drift"] == "drift" or not crossing:
        return labels.DRIFT_TEXT[row["drift"]]
    factors = [stats.decide_factor(change, ci, band) for change, ci in crossing]
    factor = max(factors) if all(finite(f) for f in factors) else float("nan")
    return f"{labels.INCONCLUSIVE}: {labels.crosses(DRIFT_CHANGE, (int(row['runs']),), factor, unit='runs')}"


def drift_part(runs: pd.DataFrame) -> dict:
    table = drift_table(runs)
    rows = [
        {
            col.framework: labels.framework_label(r[col.framework]),
            "runs": int(r["runs"]),
            "order": _percent(r, "order"),
            "time": _percent(r, "time"),
            "verdict": drift_verdict(r),
        }
        for _, r in table.iterrows()
    ]
    ordered = in_run_order(runs)
    spread = len(ordered) > 1 and ordered["elapsed_s"].nunique() > 1
    figure = png_data_uri(check_figures.drift_figure, ordered) if spread else None
    return {"rows": rows, "figure": figure}


def placement_part(runs: pd.DataFrame) -> list[dict]:
    return [
        {
            "cell": f"{labels.framework_of(r)} {labels.model_title(r[col.model])} at {r[col.scale]} "
            f"({labels.setup(r[col.batch], r[col.precision], r[col.data])})",
            "node_sets": r["node_sets"],
            "verdict": labels.PLACEMENT_TEXT.get(r["placement"], labels.NOT_SPLIT),
        }
        for _, r in placement_table(runs).iterrows()
    ]


def section(runs: pd.DataFrame) -> dict | None:
    """The section's data; None when no run has a number."""
    if runs.empty or not (runs[col.status] == "ok").any():
        return None
    return {col.stability: stability_part(runs), "drift": drift_part(runs), "placement": placement_part(runs)}
