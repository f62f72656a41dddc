"""Measured cells against reference values: published numbers and a previous run (baseline).

A reference matches a cell when model, precision, data, per-device batch and device count
agree (and, for published numbers, the configured hardware class appears in the source's
hardware column). Each match gets a verdict, ReFrame-style: `within` the tolerance,
`faster` or `slower`.
"""

from __future__ import annotations

import pandas as pd

from dlbench.analysis.columns import col, read_cells
from dlbench.coords import CELL_FIELDS

# Names the published sources use for our models and precisions.
MODEL_ALIASES = {"inception3": "inception_v3", "inceptionv3": "inception_v3", "bert": "bert_base"}
PRECISION_ALIASES = {"fp16": "amp", "bf16": "amp"}  # bf16: the LLM sources (dlbench's LLM amp is bf16)
COLUMNS = [
    *CELL_FIELDS,
    col.devices,
    "kind",
    "source",
    "hardware",
    "reference_framework",
    "reference_strategy",
    "reference",
    "measured",
    "ratio",
    "verdict",
]


def load_published(path: str) -> pd.DataFrame:
    refs = pd.read_csv(path, dtype=str, keep_default_na=False)
    refs[col.model] = refs[col.model].map(lambda m: MODEL_ALIASES.get(m, m))
    refs[col.precision] = refs[col.precision].map(lambda p: PRECISION_ALIASES.get(p, p))
    refs[col.data] = refs[col.data].str.split(" ").str[0]  # "synthetic (fake-location=gpu)" → synthetic
    refs[col.throughput] = pd.to_numeric(refs[col.throughput], errors="coerce")
    refs["gpus"] = pd.to_numeric(refs["gpus"], errors="coerce")
    return refs


def verdict(ratio: float, tolerance: float) -> str:
    if ratio != ratio:
        return "no number"
    if abs(ratio - 1.0) <= tolerance:
        return "within"
    return "faster" if ratio > 1.0 else "slower"


def compare_published(cells: pd.DataFrame, refs: pd.DataFrame, hardware: str, tolerance: float) -> pd.DataFrame:
    if not hardware or cells.empty:
        return pd.DataFrame(columns=COLUMNS)
    refs = refs[refs["hardware"].str.contains(hardware, case=False, regex=False)]
    rows = []
    for _, cell in cells[cells[col.status].isin(["ok", "partial"])].iterrows():
        match = refs[
            (refs[col.model] == cell[col.model])
            & (refs[col.precision] == cell[col.precision])
            & (refs[col.data] == cell[col.data])
            & (refs["batch_per_device"] == str(cell[col.batch]))
            & (refs["gpus"] == cell[col.devices])
        ]
        for _, ref in match.iterrows():
            ratio = cell[col.throughput] / ref[col.throughput]
            rows.append(
                {
                    **{f: cell[f] for f in CELL_FIELDS},
                    col.devices: cell[col.devices],
                    "kind": "published",
                    "source": ref["source"],
                    "hardware": ref["hardware"],
                    "reference_framework": ref[col.framework],
                    "reference_strategy": ref[col.strategy],
                    "reference": ref[col.throughput],
                    "measured": cell[col.throughput],
                    "ratio": ratio,
                    "verdict": verdict(ratio, tolerance),
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS)


def compare_baseline(cells: pd.DataFrame, baseline: pd.DataFrame, label: str, tolerance: float) -> pd.DataFrame:
    """Same cell (all coordinates) in a previous run's cells.csv."""
    if cells.empty or baseline.empty:
        return pd.DataFrame(columns=COLUMNS)
    keys = [f for f in CELL_FIELDS]
    base = baseline[[*keys, col.throughput]].rename(columns={col.throughput: "reference"})
    merged = cells.merge(base.astype({col.batch: str}), on=keys, how="inner")
    merged = merged[merged["reference"].notna()]
    merged["kind"], merged["source"], merged["hardware"] = "baseline", label, ""
    merged["reference_framework"], merged["reference_strategy"] = merged[col.framework], merged[col.strategy]
    merged["measured"] = merged[col.throughput]
    merged["ratio"] = merged["measured"] / merged["reference"]
    merged["verdict"] = [verdict(r, tolerance) for r in merged["ratio"]]
    return merged[COLUMNS]


def compare(cells: pd.DataFrame, settings: dict, published_path: str) -> pd.DataFrame:
    parts = [compare_published(cells, load_published(published_path), settings["hardware"], settings["tolerance"])]
    if settings.get("baseline"):
        baseline = read_cells(settings["baseline"])  # a baseline run's cells.csv
        parts.append(compare_baseline(cells, baseline, settings["baseline"], settings["tolerance"]))
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)
