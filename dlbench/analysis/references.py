"""Measured cells against reference values: published numbers and a previous run (baseline).

A reference matches a cell when model, precision, data, per-device batch and device count
agree (and, for published numbers, the configured hardware class appears in the source's
hardware column). Each match gets measured ÷ reference with a 95% CI and a verdict,
ReFrame-style but claiming no more than the interval shows: `within` only when the whole CI
lies inside 1 ± tolerance, `faster` or `slower` when it lies wholly beyond, else
`inconclusive` (the CI crosses the band, or there is none), and why.

The CI: a published number has none of its own and is taken as exact, so the ratio's CI is
the measured cell's (cells.csv `ci95_low`/`ci95_high`) ÷ it; a baseline cell's CI, where it has
one, is combined with the measured cell's in quadrature on the log scale (independent errors).
"""

from __future__ import annotations

import math

import pandas as pd

from dlbench import labels
from dlbench.analysis import stats
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
    "ratio_low",
    "ratio_high",
    "verdict",
    "why",
]


def load_published(path: str) -> pd.DataFrame:
    refs = pd.read_csv(path, dtype=str, keep_default_na=False)
    refs[col.model] = refs[col.model].map(lambda m: MODEL_ALIASES.get(m, m))
    refs[col.precision] = refs[col.precision].map(lambda p: PRECISION_ALIASES.get(p, p))
    refs[col.data] = refs[col.data].str.split(" ").str[0]  # "synthetic (fake-location=gpu)" → synthetic
    refs[col.throughput] = pd.to_numeric(refs[col.throughput], errors="coerce")
    refs["gpus"] = pd.to_numeric(refs["gpus"], errors="coerce")
    return refs


def verdict(ratio: float, tolerance: float, ci: tuple[float, float] = (math.nan, math.nan)) -> str:
    """within / faster / slower / inconclusive from the ratio's 95% CI against 1 ± tolerance."""
    if ratio != ratio:
        return "no number"
    position = stats.band_position(ci, stats.ratio_band(tolerance))
    return {labels.SAME: labels.WITHIN, labels.HIGHER: labels.FASTER, labels.LOWER: labels.SLOWER}.get(
        position, labels.INCONCLUSIVE
    )


def why(ratio: float, tolerance: float, ci: tuple[float, float], repeats: tuple[int, ...]) -> str:
    """Why a comparison's verdict: its CI against the band, or, where inconclusive, what would
    decide it. `repeats`: the repeats behind the CI (the measured cell's; and the baseline's)."""
    if ratio != ratio:
        return ""
    position = stats.band_position(ci, stats.ratio_band(tolerance))
    if position == labels.FEW:
        return (
            f"no 95% CI (repeats: {' and '.join(map(str, repeats))}): the point estimate {ratio:.2f}× alone "
            f"cannot be decided against {labels.band(tolerance)}"
        )
    if position == labels.INCONCLUSIVE:
        return labels.crosses(tolerance, repeats, stats.decide_factor(ratio, ci, stats.ratio_band(tolerance)))
    return f"95% CI {'within' if position == labels.SAME else 'beyond'} {labels.band(tolerance)}"


def _ratio_ci(cell, reference: float, reference_ci: tuple[float, float] = (math.nan, math.nan)):
    """measured ÷ reference's 95% CI: the cell's own over an exact reference, or combined in
    quadrature on the log scale with the reference's CI where it has one."""
    low, high = cell.get(col.ci95_low), cell.get(col.ci95_high)
    if not (stats.finite(low) and stats.finite(high) and low > 0 and reference > 0):
        return math.nan, math.nan
    if not (stats.finite(reference_ci[0]) and stats.finite(reference_ci[1]) and reference_ci[0] > 0):
        return low / reference, high / reference
    centre = math.log(cell[col.throughput] / reference)
    half = math.hypot(math.log(high / low) / 2, math.log(reference_ci[1] / reference_ci[0]) / 2)
    return math.exp(centre - half), math.exp(centre + half)


def _judged(ratio: float, ci: tuple[float, float], repeats: tuple[int, ...], tolerance: float) -> dict:
    return {
        "ratio": ratio,
        "ratio_low": ci[0],
        "ratio_high": ci[1],
        "verdict": verdict(ratio, tolerance, ci),
        "why": why(ratio, tolerance, ci, repeats),
    }


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
            ci = _ratio_ci(cell, ref[col.throughput])
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
                    **_judged(ratio, ci, (_repeats(cell.get(col.n)),), tolerance),
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS)


def compare_baseline(cells: pd.DataFrame, baseline: pd.DataFrame, label: str, tolerance: float) -> pd.DataFrame:
    """Same cell (all coordinates) in a previous run's cells.csv."""
    if cells.empty or baseline.empty:
        return pd.DataFrame(columns=COLUMNS)
    keys = [f for f in CELL_FIELDS]
    base = baseline.reindex(columns=[*keys, col.throughput, col.ci95_low, col.ci95_high, col.n]).rename(
        columns={col.throughput: "reference", col.ci95_low: "reference_low", col.ci95_high: "reference_high"}
        | {col.n: "reference_n"}
    )
    merged = cells.merge(base.astype({col.batch: str}), on=keys, how="inner")
    merged = merged[merged["reference"].notna()]
    if merged.empty:
        return pd.DataFrame(columns=COLUMNS)
    merged["kind"], merged["source"], merged["hardware"] = "baseline", label, ""
    merged["reference_framework"], merged["reference_strategy"] = merged[col.framework], merged[col.strategy]
    merged["measured"] = merged[col.throughput]
    judged = [_baseline_judged(row, tolerance) for _, row in merged.iterrows()]
    merged = merged.drop(columns=["ratio"], errors="ignore").reset_index(drop=True)
    return pd.concat([merged, pd.DataFrame(judged)], axis=1)[COLUMNS]


def _baseline_judged(row, tolerance: float) -> dict:
    reference_ci = (row["reference_low"], row["reference_high"])
    ci = _ratio_ci(row, row["reference"], reference_ci)
    with_ci = stats.finite(reference_ci[0]) and stats.finite(reference_ci[1])
    repeats = (_repeats(row[col.n]), _repeats(row["reference_n"])) if with_ci else (_repeats(row[col.n]),)
    return _judged(row["measured"] / row["reference"], ci, repeats, tolerance)


def _repeats(n) -> int:
    """A cell's repeats with a number (cells.csv `n`); one where the table has none."""
    return int(n) if stats.finite(n) else 1


def compare(cells: pd.DataFrame, settings: dict, published_path: str) -> pd.DataFrame:
    parts = [compare_published(cells, load_published(published_path), settings["hardware"], settings["tolerance"])]
    if settings.get("baseline"):
        baseline = read_cells(settings["baseline"])  # a baseline run's cells.csv
        parts.append(compare_baseline(cells, baseline, settings["baseline"], settings["tolerance"]))
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)
