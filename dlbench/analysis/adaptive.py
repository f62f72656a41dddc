"""Adaptive repeats (`protocol.repeats: auto`): a cell runs `min_repeats`, then one more at a
time while the 95% CI half-width of its statistic is above `target` × the statistic, up to
`max_repeats`. Each decision is a small JSON file (the `repeat_decision` checkpoint,
workflow/rules/repeats.smk), and the cell's last one says why it stopped (cells.csv:
`repeats_stop`). Fixed repeats never read any of this. docs/report.md, Adaptive repeats.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from dlbench import labels
from dlbench.analysis import stats
from dlbench.analysis.columns import col
from dlbench.coords import CELL_FIELDS, CellKey, RunCoords

DECISION_TEMPLATE = (
    "results/repeats/{framework}/{model}/{precision}/{data}/bs{batch}/{scale}/{strategy}{training}/after{n}.json"
)


def decision_path(cell: CellKey, n: int) -> str:
    return DECISION_TEMPLATE.format(**cell.wildcards(), n=n)


def decide(runs: pd.DataFrame, protocol: dict) -> dict:
    """The decision after a cell's runs (their runs.csv rows): more, and why (or why not)."""
    settings, n = protocol["adaptive"], len(runs)
    failed = sorted(set(runs[col.status]) - {"ok"})
    values = runs.loc[runs[col.status] == "ok", col.throughput].dropna()
    enough, half = stats.enough_repeats(
        protocol["statistic"], values, settings["target"], settings["min_repeats"], settings["max_repeats"]
    )
    if failed:
        more, reason = False, labels.repeats_failed(n, failed)
    elif enough:
        more = False
        reason = labels.repeats_target(n, half, settings["target"])
        if not (stats.finite(half) and half <= settings["target"]):
            reason = labels.repeats_maximum(n, half, settings["target"])
    else:
        more, reason = True, labels.repeats_more(n, half, settings["target"])
    return {"repeats": n, "more": more, "half_width": half, "reason": reason}  # not a column: a decision


def read(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())


def last_decision(cell: CellKey, minimum: int, root: str | Path = ".") -> dict | None:
    """The cell's decisions followed from the minimum: the one that stopped (None: not yet)."""
    n = minimum
    while (path := Path(root) / decision_path(cell, n)).exists():
        decision = read(path)
        if not decision["more"]:
            return decision
        n += 1
    return None


def decided_runs(runs: list[RunCoords], protocol: dict, root: str | Path = ".") -> list[RunCoords]:
    """The planned runs plus the repeats the decisions on disk asked for (fixed repeats: as given)."""
    if protocol.get("repeats") != "auto":
        return runs
    minimum, out = protocol["adaptive"]["min_repeats"], list(runs)
    for cell in dict.fromkeys(run.cell for run in runs):
        decision = last_decision(cell, minimum, root)
        extra = range(minimum + 1, (decision["repeats"] if decision else minimum) + 1)
        out += [RunCoords(**cell.as_dict(), repeat=r) for r in extra]
    return out


def stop_reasons(cells: pd.DataFrame, protocol: dict, root: str | Path = ".") -> pd.DataFrame:
    """cells.csv with `repeats_stop`: why each cell stopped adding repeats (adaptive only)."""
    if protocol.get("repeats") != "auto" or cells.empty:
        return cells
    minimum = protocol["adaptive"]["min_repeats"]

    def reason(row) -> str:
        if row.get(col.status) == "unavailable":
            return ""
        decision = last_decision(CellKey(**{f: row[f] for f in CELL_FIELDS}), minimum, root)
        return decision["reason"] if decision else ""

    return cells.assign(repeats_stop=[reason(row) for _, row in cells.iterrows()])
