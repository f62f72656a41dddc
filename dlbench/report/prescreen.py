"""The report's communication prescreen section (docs/slurm.md), from
prescreen.csv (beside cells.csv) to the data of its section, or nothing where no prescreen ran."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dlbench import labels
from dlbench.analysis.columns import col
from dlbench.analysis.derive import PRESCREEN_FILE
from dlbench.analysis.stats import finite
from dlbench.findings import vocabulary as fnd


def size_text(size) -> str:
    size = int(size)
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def _number(value) -> str:
    return f"{value:.3g}" if finite(value) else "—"


def _row(r: pd.Series) -> dict:
    who = "all" if r["scope"] == "all" else f"node {r['node']}"
    if r[col.status] != "ok":
        return {
            col.scale: r[col.scale],
            "shape": "",
            "who": who,
            "size": "",
            "time": "",
            "algbw": "",
            "busbw": "",
            "flag": f"FAILED: {r[col.reason]}",
        }
    return {
        col.scale: r[col.scale],
        "shape": f"{int(r[col.nodes])} × {int(r['ranks_per_node'])}",
        "who": f"{who} ({int(r['ranks'])})",
        "size": size_text(r["bytes"]),
        "time": f"{r['time_us']:.1f}" if finite(r["time_us"]) else "—",
        "algbw": _number(r["algbw_gbps"]),
        "busbw": _number(r["busbw_gbps"]),
        "flag": (r["flag"] if isinstance(r["flag"], str) else "")
        + ("" if r["correct"] in (True, "True") else " wrong sum"),
    }


def section(tables_dir: str | Path, cells: pd.DataFrame, min_share: float) -> dict | None:
    """The section's data (templates/sections/prescreen.html.j2) from `tables_dir`/prescreen.csv,
    None where there is none."""
    path = Path(tables_dir) / PRESCREEN_FILE
    if not path.exists():
        return None
    table = pd.read_csv(path, keep_default_na=False, na_values=[""])
    table["flag"] = table["flag"].fillna("")
    flagged = cells[cells[col.prescreen].fillna("") != ""] if col.prescreen in cells else cells.iloc[0:0]
    return dict(
        backends=", ".join(sorted(set(table["backend"].dropna().astype(str)))) or "no backend recorded",
        min_share=min_share,
        rows=[_row(r) for _, r in table.iterrows()],
        cells=[f"{labels.cell_label(fnd.cell_key(c))}: {c[col.prescreen]}" for _, c in flagged.iterrows()],
    )
