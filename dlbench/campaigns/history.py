"""History: change points per cell across three or more campaigns of the same grid, found
with ruptures (PELT, least-squares cost) on the repeats' throughputs in campaign order, and the
provenance change that coincides (what differs between the manifests on either side).

The penalty is BIC's for a mean shift, 2·σ²·ln(n), with σ² the repeats' pooled variance
within campaigns (never below `noise_floor` of the mean: a published series has no repeats);
a change smaller than `min_change` is not reported. A change point inside a campaign's
repeats is moved to the nearest campaign boundary. See docs/campaigns.md.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dlbench.analysis import stats, tables
from dlbench.analysis.columns import col
from dlbench.campaigns.campaign import Campaign
from dlbench.campaigns.compare import differences
from dlbench.coords import CELL_FIELDS
from dlbench.plots.history import history_figure

CHANGE_COLUMNS = [*CELL_FIELDS, "before", "after", "before_value", "after_value", "ratio", "provenance"]


@dataclass
class History:
    campaigns: list[dict]  # id and date, in time order
    series: pd.DataFrame  # cell × campaign: value (mean of repeats), std, n
    changes: pd.DataFrame  # one row per change point (CHANGE_COLUMNS)


def _values(campaign: Campaign) -> dict[tuple, list[float]]:
    repeats = campaign.repeats()
    out = {}
    for _, cell in campaign.cells.iterrows():
        key = tuple(str(cell[f]) for f in CELL_FIELDS)
        out[key] = repeats.get(key) or ([float(cell[col.throughput])] if stats.finite(cell[col.throughput]) else [])
    return {k: v for k, v in out.items() if v}


def _noise_variance(groups: list[list[float]], mean: float, noise_floor: float) -> float:
    within = [(len(g) - 1, stats.std(g) ** 2) for g in groups if len(g) > 1]
    dof = sum(d for d, _ in within)
    pooled = sum(d * v for d, v in within) / dof if dof else 0.0
    return max(pooled, (noise_floor * mean) ** 2)


def change_points(groups: list[list[float]], noise_floor: float = 0.005) -> list[int]:
    """Indices k (1..len(groups)-1) of the groups that start a new level."""
    import ruptures

    signal = np.concatenate([np.asarray(g, dtype=float) for g in groups])
    labels = np.concatenate([np.full(len(g), i) for i, g in enumerate(groups)])
    penalty = 2 * _noise_variance(groups, float(signal.mean()), noise_floor) * math.log(len(signal))
    min_size = 2 if min(len(g) for g in groups) > 1 else 1
    ends = ruptures.Pelt(model="l2", min_size=min_size, jump=1).fit(signal).predict(pen=penalty)[:-1]
    starts = np.cumsum([0] + [len(g) for g in groups])  # index of each group's first value
    found = []
    for end in ends:
        k = int(labels[end])
        if labels[end - 1] == k:  # inside a campaign's repeats: the nearest boundary
            k = k if end - starts[k] <= starts[k + 1] - end else k + 1
        if 0 < k < len(groups) and k not in found:
            found.append(k)
    return sorted(found)


def _provenance(a: Campaign, b: Campaign) -> str:
    diffs = differences(a.manifest, b.manifest)
    return "; ".join(f"{d['field']}: {d['reference'] or '?'} → {d['candidate'] or '?'}" for d in diffs)


def detect(
    campaigns: list[Campaign], min_change: float = 0.02, noise_floor: float = 0.005, min_campaigns: int = 3
) -> History:
    if len(campaigns) < min_campaigns:
        raise ValueError(f"a history needs {min_campaigns} or more campaigns, got {len(campaigns)}")
    ordered = sorted(campaigns, key=lambda c: (str(c.manifest.get("date", "")), c.id))
    values = [_values(c) for c in ordered]
    series, changes = [], []
    for key in sorted(set().union(*values)):
        present = [i for i, v in enumerate(values) if key in v]
        for i in present:
            series.append(
                {
                    **dict(zip(CELL_FIELDS, key, strict=True)),
                    "campaign": ordered[i].id,
                    "order": i,
                    "value": stats.mean(values[i][key]),
                    col.std: stats.std(values[i][key]),
                    col.n: len(values[i][key]),
                }
            )
        if len(present) < min_campaigns:
            continue
        groups = [values[i][key] for i in present]
        bounds = [0, *change_points(groups, noise_floor), len(groups)]
        for left, k, right in zip(bounds, bounds[1:], bounds[2:], strict=False):
            before = stats.mean([x for g in groups[left:k] for x in g])
            after = stats.mean([x for g in groups[k:right] for x in g])
            if abs(after / before - 1) < min_change:
                continue
            a, b = ordered[present[k - 1]], ordered[present[k]]
            changes.append(
                {
                    **dict(zip(CELL_FIELDS, key, strict=True)),
                    "before": a.id,
                    "after": b.id,
                    "before_value": before,
                    "after_value": after,
                    "ratio": after / before,
                    "provenance": _provenance(a, b),
                }
            )
    return History(
        campaigns=[{"id": c.id, "date": str(c.manifest.get("date", ""))} for c in ordered],
        series=pd.DataFrame(series),
        changes=pd.DataFrame(changes, columns=CHANGE_COLUMNS),
    )


def write(history: History, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "changes.csv").write_bytes(tables.csv_bytes(history.changes))
    (directory / "series.csv").write_bytes(tables.csv_bytes(history.series))
    summary = {"campaigns": history.campaigns, "changes": history.changes.to_dict(orient="records")}
    (directory / "changes.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    history_figure(history, directory / "history.png")


def text(history: History) -> str:
    lines = [f"{len(history.campaigns)} campaigns: " + ", ".join(c["id"] for c in history.campaigns)]
    lines.append(f"{len(history.changes)} change point(s)")
    for _, c in history.changes.iterrows():
        lines.append(
            f"  {'/'.join(str(c[f]) for f in CELL_FIELDS)}: {c['before']} → {c['after']} "
            f"×{c['ratio']:.3f} ({c['provenance'] or 'no provenance change recorded'})"
        )
    return "\n".join(lines)
