"""The measurement checks' findings: runs whose window is not steady (dlbench.analysis.stability),
frameworks whose throughput drifts with run order (dlbench.analysis.drift), cells whose repeats
split by node (dlbench.analysis.placement). Each sentence names what it found, numbers linked to cells."""

from __future__ import annotations

import pandas as pd

from dlbench import labels
from dlbench.analysis.columns import col
from dlbench.analysis.drift import drift_table
from dlbench.analysis.placement import placement_table
from dlbench.findings.vocabulary import MAX_LISTED, Finding, Number, cell_key, count


def _listed(names: list[str]) -> str:
    more = f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else ""
    return "; ".join(names[:MAX_LISTED]) + more


def run_name(run) -> str:
    return (
        f"{labels.framework_of(run)} {labels.model_title(run[col.model])} at {run[col.scale]}, repeat {run[col.repeat]}"
    )


def stability_findings(runs: pd.DataFrame) -> list[Finding]:
    if runs.empty or col.stability not in runs:
        return []
    judged = runs[runs[col.stability].map(labels.text).isin(["steady", "trend", "bimodal"])]
    flagged = judged[judged[col.stability].isin(["trend", "bimodal"])]
    if judged.empty or flagged.empty:
        return []
    names = [f"{run_name(r)} ({labels.STABILITY_TEXT[r[col.stability]]})" for _, r in flagged.iterrows()]
    return [
        Finding(
            col.stability,
            None,
            (
                count(len(flagged), [cell_key(r) for _, r in flagged.iterrows()]),
                " of ",
                count(len(judged), [cell_key(r) for _, r in judged.iterrows()]),
                " runs with enough measured steps are not steady within their window (a trend or two modes: "
                f"see Measurement checks): {_listed(names)}.",
            ),
        )
    ]


def drift_findings(runs: pd.DataFrame) -> list[Finding]:
    table = drift_table(runs)
    if table.empty:
        return []
    out = []
    for _, row in table[table["drift"] == "drift"].iterrows():
        mine = runs[(runs[col.framework] == row[col.framework]) & (runs[col.status] == "ok")]
        cells = tuple(dict.fromkeys(cell_key(r) for _, r in mine.iterrows()))
        text = f"{row['order_change']:+.1%} [95% CI {row['order_change_low']:+.1%} to {row['order_change_high']:+.1%}]"
        change = Number(float(row["order_change"]), text, "drift", cells)
        out.append(
            Finding(
                "drift",
                None,
                (
                    f"{labels.framework_of(row)}'s throughput drifts with the order the runs started in: ",
                    change,
                    f" relative to each cell's median from its first to its last of {row['runs']} runs "
                    f"({row['time_change']:+.1%} along the start times); its cells' numbers depend on when they ran.",
                ),
            )
        )
    return out


def placement_findings(runs: pd.DataFrame) -> list[Finding]:
    table = placement_table(runs)
    flagged = table[table["placement"] != ""]
    if flagged.empty:
        return []
    names = [
        f"{labels.framework_of(r)} {labels.model_title(r[col.model])} at {r[col.scale]} "
        f"({labels.PLACEMENT_TEXT[r['placement']]}: "
        f"{r['node_sets']})"
        for _, r in flagged.iterrows()
    ]
    cells = [cell_key(r) for _, r in flagged.iterrows()]
    return [
        Finding(
            "placement",
            None,
            (
                count(len(flagged), cells),
                f" {'cell' if len(flagged) == 1 else 'cells'} with repeats split by node (nodes: repeats × median "
                f"throughput): {_listed(names)}.",
            ),
        )
    ]


def check_findings(runs: pd.DataFrame) -> list[Finding]:
    return [*stability_findings(runs), *drift_findings(runs), *placement_findings(runs)]
