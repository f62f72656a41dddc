"""The communication prescreen's table: raw all-reduce logs (results/prescreen/<NxP>/) →
one row per shape, scope (all ranks, or one node's ranks) and message size, with nccl-tests'
algbw and busbw; nodes whose own bus bandwidth is below `min_share` of the best node's are
flagged, and so are the multi-node cells that ran on them (docs/slurm.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from dlbench.analysis import stats
from dlbench.analysis.columns import col
from dlbench.coords import CELL_FIELDS, Scale
from dlbench.labels import text
from dlbench.launch.prescreen import LOG_GLOB, read_log

ROOT = "results/prescreen"
COLUMNS = [
    col.scale,
    col.nodes,
    "ranks_per_node",
    "scope",
    "node",
    "ranks",
    "bytes",
    "time_us",
    "algbw_gbps",
    "busbw_gbps",
    "correct",
    "backend",
    col.status,
    col.reason,
    "flag",
]


def measured_shapes(root: str | Path = ".") -> list[Path]:
    """The shapes' directories that hold the launcher's record (a measurement was made)."""
    return sorted(path.parent for path in (Path(root) / ROOT).glob("*/launch.json"))


def table(root: str | Path = ".", min_share: float = 0.8) -> pd.DataFrame | None:
    """The prescreen table of the logs below `root`; None where no prescreen ran."""
    shapes = measured_shapes(root)
    if not shapes:
        return None
    rows = [row for directory in shapes for row in _shape_rows(directory)]
    return _flag(pd.DataFrame(rows, columns=COLUMNS), min_share)


def _shape_rows(directory: Path) -> list[dict]:
    scale = Scale.parse(directory.name)
    shape = {col.scale: directory.name, col.nodes: scale.nodes, "ranks_per_node": scale.devices_per_node}
    logs = [read_log(path) for path in sorted(directory.glob(LOG_GLOB))]
    problems = [log["problem"] for log in logs if log["problem"]]
    problems += [log["footer"]["error"] for log in logs if log["footer"] and log["footer"]["status"] != "ok"]
    if len(logs) < scale.devices:
        problems.append(f"{scale.devices - len(logs)} of {scale.devices} ranks left no log ({_launch_note(directory)})")
    if problems:
        return [{**shape, "scope": "all", col.status: "failed", col.reason: "; ".join(dict.fromkeys(problems))}]
    backend = text(logs[0]["header"].get("backend"))
    measured: dict[tuple, list[dict]] = {}
    for log in logs:
        for record in log["sizes"]:
            node = log["header"]["node"] if record["scope"] == "node" else ""
            measured.setdefault((record["scope"], node, record["bytes"]), []).append(record)
    return [
        {**shape, **_row(scope, node, size, records), "backend": backend, col.status: "ok", col.reason: ""}
        for (scope, node, size), records in sorted(measured.items())
    ]


def _row(scope: str, node: str, size: int, records: list[dict]) -> dict:
    # nccl-tests' default: the operation's time averaged over the ranks that took part.
    seconds = stats.mean([r["seconds"] for r in records])
    ranks = records[0]["ranks"]
    algbw, busbw = stats.allreduce_bandwidth(size, seconds, ranks)
    return {
        "scope": scope,
        "node": node,
        "ranks": ranks,
        "bytes": size,
        "time_us": seconds * 1e6,
        "algbw_gbps": algbw,
        "busbw_gbps": busbw,
        "correct": all(r["correct"] for r in records),
    }


def _launch_note(directory: Path) -> str:
    try:
        record = json.loads((directory / "launch.json").read_text())
    except (OSError, ValueError):
        return "no launch.json"
    return f"rank exit codes {record.get('rank_exit_codes')}"


def _flag(rows: pd.DataFrame, min_share: float) -> pd.DataFrame:
    """Per shape, at its largest size (bandwidth-bound, not latency-bound): each node's busbw
    against the best node's; below `min_share` of it, the node's rows say so."""
    rows["flag"] = ""
    nodes = rows[(rows["scope"] == "node") & (rows[col.status] == "ok")]
    for _, shape in nodes.groupby(col.scale):
        largest = shape[shape["bytes"] == shape["bytes"].max()]
        best = largest["busbw_gbps"].max()
        for index, row in largest.iterrows():
            share = row["busbw_gbps"] / best if best > 0 else float("nan")
            if not share >= min_share:
                rows.loc[index, "flag"] = f"{share:.2f} of the best node ({best:.3g} GB/s), below {min_share:g}"
    return rows


def slow_nodes(prescreen: pd.DataFrame) -> dict[str, str]:
    """Flagged node → why (its shape and share)."""
    flagged = prescreen[prescreen["flag"].astype(str) != ""]
    return {row["node"]: f"{row['node']}: {row[col.scale]} prescreen, {row['flag']}" for _, row in flagged.iterrows()}


def flag_cells(cells: pd.DataFrame, runs: pd.DataFrame, prescreen: pd.DataFrame) -> pd.DataFrame:
    """cells.csv with `prescreen`: for a multi-node cell whose runs used a flagged node, why;
    '' otherwise. Flagged cells keep their numbers: the flag says what to distrust."""
    slow = slow_nodes(prescreen)
    cells = cells.copy()
    cells[col.prescreen] = ""
    if cells.empty or not slow or col.nodes not in runs:
        return cells
    keys = [c for c in CELL_FIELDS if c in cells.columns and c in runs.columns]
    for index, cell in cells.iterrows():
        if Scale.parse(cell[col.scale]).nodes < 2:
            continue
        mine = runs[(runs[keys].astype(str) == cell[keys].astype(str)).all(axis=1)]
        used = {node for value in mine[col.nodes] for node in text(value).split(";") if node}
        why = [slow[node] for node in sorted(used & set(slow))]
        cells.loc[index, col.prescreen] = "; ".join(why)
    return cells
