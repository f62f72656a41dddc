"""Placement: whether a cell's repeats split by where Slurm placed them.

Every run's nodes are in runs.csv (`nodes`: the step-log headers' node names, one per rank,
deduplicated; slurm.json keeps the allocation too). A cell is flagged when
- its repeats ran on different numbers of nodes (`layout`: the classic case, tasks of one
  scale landing on one node for some repeats and on two for others, halving bandwidth), or
- its repeats ran on different node sets and the throughputs split by them (`node`: every
  repeat on one set slower than every repeat on another, by more than SPLIT).
Repeats on different nodes with the same speed are what spreading them is for
(dlbench.planning.placement): not flagged.
"""

from __future__ import annotations

import pandas as pd

from dlbench.analysis import stats
from dlbench.analysis.columns import col
from dlbench.coords import CELL_FIELDS

SPLIT = 0.05  # node sets' throughputs apart by more than this (and not overlapping): flagged


def _node_sets(group: pd.DataFrame) -> dict[str, list[float]]:
    sets: dict[str, list[float]] = {}
    for nodes, throughput in zip(group[col.nodes].astype(str), group[col.throughput], strict=True):
        sets.setdefault(nodes, []).append(float(throughput))
    return sets


def _split_by_node(sets: dict[str, list[float]]) -> bool:
    """Some node set's repeats all below another's, medians apart by more than SPLIT."""
    for slow in sets.values():
        for fast in sets.values():
            apart = stats.median(fast) > stats.median(slow) * (1 + SPLIT)
            if apart and max(slow) < min(fast):
                return True
    return False


def placement_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per cell whose ok repeats ran on more than one node set: the node sets with
    their repeats' median throughput, and the flag (layout / node / "")."""
    if runs.empty or col.nodes not in runs:
        return pd.DataFrame(columns=[*CELL_FIELDS, "node_sets", "placement"])
    ok = runs[(runs[col.status] == "ok") & runs[col.throughput].map(stats.finite) & runs[col.nodes].notna()]
    rows = []
    for key, group in ok.groupby(CELL_FIELDS, sort=True):
        sets = _node_sets(group)
        if len(sets) < 2:
            continue
        layouts = {len(nodes.split(";")) for nodes in sets}
        flag = "layout" if len(layouts) > 1 else ("node" if _split_by_node(sets) else "")
        rows.append(
            {
                **dict(zip(CELL_FIELDS, key, strict=True)),
                "node_sets": " | ".join(
                    f"{nodes.replace(';', ',')}: {len(v)} × {stats.median(v):.1f}" for nodes, v in sorted(sets.items())
                ),
                "placement": flag,
            }
        )
    return pd.DataFrame(rows, columns=[*CELL_FIELDS, "node_sets", "placement"])
