"""The report's measurement checks section: within-run stability, drift over run order,
placement (docs/report.md, Measurement checks). Data from runs.csv only."""

from __future__ import annotations

import pandas as pd

from dlbench import labels
from dlbench.analysis.columns import col
from dlbench.analysis.drift import drift_table, in_run_order
from dlbench.analysis.placement import placement_table
from dlbench.analysis.stats import finite
from dlbench.findings.checks import run_name
from dlbench.plots import checks as check_figures
from dlbench.plots import figures as figs

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
    figure = figs.png_data_uri(check_figures.step_histograms, drawn) if rows else None
    counts = {labels.STABILITY_TEXT[v]: int((judged[col.stability] == v).sum()) for v in ("steady", "trend", "bimodal")}
    return {
        "judged": len(judged),
        "runs": len(runs),
        "counts": counts,
        "rows": rows,
        "figure": figure,
        "drawn": len(drawn),
    }


def drift_part(runs: pd.DataFrame) -> dict:
    table = drift_table(runs)
    rows = [
        {
            col.framework: labels.framework_label(r[col.framework]),
            "runs": int(r["runs"]),
            "order": _percent(r, "order"),
            "time": _percent(r, "time"),
            "verdict": {"drift": "DRIFT", "none": "no drift"}.get(r["drift"], "too few runs"),
        }
        for _, r in table.iterrows()
    ]
    ordered = in_run_order(runs)
    spread = len(ordered) > 1 and ordered["elapsed_s"].nunique() > 1
    figure = figs.png_data_uri(check_figures.drift_figure, ordered) if spread else None
    return {"rows": rows, "figure": figure}


def placement_part(runs: pd.DataFrame) -> list[dict]:
    return [
        {
            "cell": f"{labels.framework_of(r)} {labels.model_title(r[col.model])} at {r[col.scale]} "
            f"({labels.setup(r[col.batch], r[col.precision], r[col.data])})",
            "node_sets": r["node_sets"],
            "verdict": labels.PLACEMENT_TEXT.get(r["placement"], "same speed on each"),
        }
        for _, r in placement_table(runs).iterrows()
    ]


def section(runs: pd.DataFrame) -> dict | None:
    """The section's data; None when no run has a number."""
    if runs.empty or not (runs[col.status] == "ok").any():
        return None
    return {col.stability: stability_part(runs), "drift": drift_part(runs), "placement": placement_part(runs)}
