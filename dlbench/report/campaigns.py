"""The report's campaigns section: published campaigns regenerated from their numbers (tables
and scaling figure through the same code as measured cells) and this run's cells beside them,
matched on every coordinate, each unmatched cell with its reason (dlbench.campaigns)."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pandas as pd

from dlbench import labels
from dlbench.analysis.columns import col
from dlbench.analysis.stats import finite
from dlbench.campaigns import Campaign, history, load
from dlbench.campaigns import compare as cmp
from dlbench.campaigns.published import MISSING, find, import_published
from dlbench.coords import CELL_FIELDS
from dlbench.plots import figures as figs
from dlbench.plots.history import history_figure
from dlbench.plots.layout import png_data_uri
from dlbench.report.cells import throughput_tables

# Published campaigns shown whole (tables and scaling figure); the others are listed.
SHOWN = ("seed000-nvidia_dgx_1",)
UNMATCHED_SHOWN = 12


def generated_text(environment: dict | None) -> str:
    """The report's date, never the wall clock (a report regenerates byte for byte):
    SOURCE_DATE_EPOCH if set, else when the campaign's last run started (step-log headers)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch:
        return dt.datetime.fromtimestamp(int(epoch), dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    started = dict((environment or {}).get("facts") or []).get("Runs started", "")
    if started:
        return f"from the runs started {started}"
    return "from the tables (no run dates recorded)"


def _figure_cells(cells: pd.DataFrame) -> pd.DataFrame:
    """The scaling figure's panels: synthetic data at the most common batch (seed 000: 64)."""
    synthetic = cells[cells[col.data] == "synthetic"]
    chosen = synthetic if not synthetic.empty else cells
    counts = chosen[col.batch].value_counts()
    batch = max(counts.index, key=lambda b: (counts[b], int(b) if str(b).isdigit() else 0))
    return chosen[chosen[col.batch] == batch]


def _protocol_text(protocol: dict) -> str:
    parts = [f"{protocol.get('statistic')} of {protocol.get('repeats')} run(s)"]
    if protocol.get("warmup_steps"):
        parts.append(f"{protocol['warmup_steps']} warm-up steps, {protocol.get('measured_steps')} measured")
    return "; ".join(parts)


def _matches(published: Campaign, measured: Campaign, tolerance: float) -> dict:
    result = cmp.compare(published, measured, tolerance)
    rows = [
        {
            "cell": f"{labels.framework_of(r)} {labels.model_title(r[col.model])} {r[col.precision]} {r[col.data]}"
            f" bs{r[col.batch]} {r[col.scale]} {r[col.strategy]}",
            "published": f"{r['reference']:.1f}",
            "measured": f"{r['candidate']:.1f}",
            "ratio": f"{r['ratio']:.2f}×"
            + (f" [{r[col.ci95_low]:.2f}, {r[col.ci95_high]:.2f}]" if finite(r[col.ci95_low]) else ""),
            "verdict": r["verdict"] + (f": {r['why']}" if r["verdict"] == labels.INCONCLUSIVE else ""),
        }
        for _, r in result.cells.iterrows()
    ]
    mine = [u for u in result.unmatched if "no reference cell" in u[col.reason] or "has no number" in u[col.reason]]
    return {
        "rows": rows,
        "unmatched": mine[:UNMATCHED_SHOWN],
        "unmatched_more": max(0, len(mine) - UNMATCHED_SHOWN),
        "differences": [d for d in result.differences if d["field"].startswith(("protocol", col.image_size))],
    }


def _shown(campaign: Campaign, measured: Campaign | None, tolerance: float) -> dict:
    tables = throughput_tables(campaign.cells)
    for table in tables:  # the measured tables own the cell anchors
        for row in table["rows"]:
            for entry in row["entries"]:
                if entry is not None:
                    entry["id"] = None
    return {
        "id": campaign.id,
        "source": campaign.manifest["source"],
        "hardware": campaign.manifest["hardware"]["gpu"],
        "protocol": _protocol_text(campaign.manifest["protocol"]),
        "tables": tables,
        "figure": png_data_uri(figs.speedup_figure, _figure_cells(campaign.cells)),
        "figure_setup": labels.setup(*_figure_cells(campaign.cells).iloc[0][[col.batch, col.precision, col.data]]),
        "matches": _matches(campaign, measured, tolerance) if measured is not None else None,
    }


def _history(measured: Campaign | None, earlier: list[str]) -> dict | None:
    """Change points per cell across the configured earlier campaigns and this run
    (`references.history`); None when none is configured."""
    if not earlier or measured is None:
        return None
    campaigns = [load(path) for path in earlier] + [measured]
    if len(campaigns) < 3:
        return {"needs": f"a history needs 3 or more campaigns; references.history names {len(earlier)}"}
    found = history.detect(campaigns)
    rows = [
        {
            "cell": " ".join(str(c[f]) for f in CELL_FIELDS),
            "between": f"{c['before']} → {c['after']}",
            "ratio": f"×{c['ratio']:.2f}",
            "provenance": c["provenance"] or "no provenance change recorded",
        }
        for _, c in found.changes.iterrows()
    ]
    figure = png_data_uri(history_figure, found)
    return {"needs": "", "campaigns": found.campaigns, "rows": rows, "figure": figure}


def _measured(cells: pd.DataFrame, runs: pd.DataFrame, protocol: dict, manifest_path: Path | None) -> Campaign | None:
    if cells.empty:
        return None
    if manifest_path is not None and manifest_path.exists():
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    else:  # no manifest beside the tables: "this run", after every dated campaign
        manifest = {"id": "this run", "kind": "measured", "date": "~", "source": "this report's cells"}
    return Campaign({**manifest, "protocol": protocol}, cells, runs)


def section(
    cells: pd.DataFrame,
    runs: pd.DataFrame,
    protocol: dict,
    published_path: str | Path | None,
    settings: dict | None = None,
    manifest_path: Path | None = None,
) -> dict | None:
    """None (no section) without a published CSV. `settings`: the config's `references`."""
    if published_path is None or not Path(published_path).exists():
        return None
    settings = settings or {}
    tolerance = float(settings.get("tolerance", 0.1))
    campaigns = import_published(str(published_path))
    measured = _measured(cells, runs, protocol, manifest_path)
    shown = [_shown(find(campaigns, prefix), measured, tolerance) for prefix in SHOWN]
    listed = [
        {
            "id": c.id,
            "source": c.manifest["source"],
            "hardware": c.manifest["hardware"]["gpu"],
            "cells": len(c.cells),
            "matched": len(cmp.compare(c, measured, tolerance).cells) if measured is not None else 0,
        }
        for c in campaigns
    ]
    return {
        "shown": shown,
        "listed": listed,
        "missing": list(MISSING.values()),
        "tolerance": tolerance,
        "history": _history(measured, list(settings.get("history") or [])),
    }
