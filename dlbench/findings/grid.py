"""Findings over the whole grid: which cells have no number or a noisy one, how the measured
cells compare with published references, and all findings in order (the comparing ones from
findings/comparisons.py). Every sentence is built from the vocabulary's `Finding` and `Number`
(findings/vocabulary.py), so each number links to its cells.
"""

from __future__ import annotations

import math

import pandas as pd

from dlbench import labels
from dlbench.analysis import stats
from dlbench.analysis.columns import col
from dlbench.analysis.stats import finite
from dlbench.findings.comparisons import comparing
from dlbench.findings.vocabulary import MAX_LISTED, Finding, Number, cell_key, count, join, verb
from dlbench.labels import model_title, unit


def noise(cells: pd.DataFrame, threshold: float) -> list[Finding]:
    """How many cells with at least two numbers have a CV across repeats above the threshold."""
    if cells.empty or col.cv not in cells:
        return []
    checked = cells[cells[col.cv].map(finite) & (cells[col.n].fillna(0) >= 2)]
    if checked.empty:
        return []
    noisy = checked[checked[col.cv] > threshold].sort_values(col.cv, ascending=False)
    everyone = [cell_key(r) for _, r in checked.iterrows()]
    if noisy.empty:
        return [
            Finding(
                "noise",
                None,
                (
                    "None of the ",
                    count(len(checked), everyone),
                    f" cells with two or more repeats has a coefficient of variation above {threshold:g}.",
                ),
            )
        ]
    worst = noisy.iloc[0]
    cv = Number(float(worst[col.cv]), f"{worst[col.cv]:.2f}", col.cv, (cell_key(worst),))
    return [
        Finding(
            "noise",
            None,
            (
                count(len(noisy), [cell_key(r) for _, r in noisy.iterrows()]),
                " of ",
                count(len(checked), everyone),
                f" cells with two or more repeats {verb(len(noisy), 'has', 'have')} a coefficient of variation "
                f"above {threshold:g} (their numbers are uncertain); the largest is ",
                cv,
                f" ({labels.framework_of(worst)} {model_title(worst[col.model])} at {worst[col.scale]}).",
            ),
        )
    ]


def status(cells: pd.DataFrame) -> list[Finding]:
    """Cells without a number (by status) and cells where only some repeats produced one."""
    if cells.empty:
        return []
    out = []
    missing = cells[~cells[col.throughput].map(finite)]
    if not missing.empty:
        listed = [
            f"{labels.framework_of(r)} {model_title(r[col.model])} at {r[col.scale]} "
            f"({labels.status_label(str(r[col.status]))})"
            for _, r in missing.head(MAX_LISTED).iterrows()
        ]
        more = f" and {len(missing) - MAX_LISTED} more" if len(missing) > MAX_LISTED else ""
        out.append(
            Finding(
                col.status,
                None,
                (
                    count(len(missing), [cell_key(r) for _, r in missing.iterrows()]),
                    " of ",
                    count(len(cells), [cell_key(r) for _, r in cells.iterrows()]),
                    f" cells {verb(len(missing), 'has', 'have')} no number: {'; '.join(listed)}{more}.",
                ),
            )
        )
    partial = cells[cells[col.status] == "partial"]
    if not partial.empty:
        out.append(
            Finding(
                col.status,
                None,
                (
                    count(len(partial), [cell_key(r) for _, r in partial.iterrows()]),
                    verb(
                        len(partial),
                        " cell has a number from only some of its repeats (marked *).",
                        " cells have a number from only some of their repeats (marked *).",
                    ),
                ),
            )
        )
    return out


def reference_verdicts(references: pd.DataFrame | None, tolerance: float) -> list[Finding]:
    """Per kind (published, baseline): how many comparisons are within the tolerance (the ratio's
    whole 95% CI inside it), inconclusive, slower or faster, and the furthest one. From
    references.csv (dlbench.analysis.references): one row per measured cell and reference it
    matched, with `measured`, `reference`, `ratio` and `verdict`."""
    if references is None or references.empty:
        return []
    out = []
    refs = references[references["ratio"].map(finite)]
    for kind, rows in refs.groupby("kind", sort=True):
        tally = []
        for verdict in (labels.WITHIN, labels.INCONCLUSIVE, labels.SLOWER, labels.FASTER):
            chosen = rows[rows["verdict"] == verdict]
            if not chosen.empty:
                tally.append([count(len(chosen), [cell_key(r) for _, r in chosen.iterrows()]), f" {verdict}"])
        far = rows.loc[rows["ratio"].map(lambda r: abs(math.log(r)) if r > 0 else math.inf).idxmax()]
        hardware = "" if pd.isna(far.get("hardware")) else str(far.get("hardware") or "")
        what = "published numbers" if kind == "published" else f"the {kind} ({far['source']})"
        parts: list[str | Number] = [
            f"Of the {len(rows)} comparisons with {what}, tolerance ±{tolerance:.0%}: ",
            *join(tally),
            f". Furthest: {labels.framework_of(far)} {model_title(far[col.model])} at {far[col.scale]} "
            f"(batch {far[col.batch]}/device), ",
            Number(float(far["measured"]), f"{far['measured']:.1f}", col.throughput, (cell_key(far),)),
            f" {unit(far[col.model])}, is ",
            Number(float(far["ratio"]), f"{far['ratio']:.2f}×", "reference_ratio", (cell_key(far),)),
            f" the reference {far['reference']:.1f}"
            + (f" ({far['source']}, {hardware})" if kind == "published" and hardware else "")
            + ".",
        ]
        out.append(Finding("reference", None, tuple(parts)))
    return out


def findings(
    cells: pd.DataFrame,
    noisy_cv: float = 0.1,
    runs: pd.DataFrame | None = None,
    tolerance: float = stats.SAME_TOLERANCE,
) -> list[Finding]:
    """Every finding: the whole grid's first, then per model the comparing ones (rankings,
    scaling, variants), whose intervals come from the cells' repeats in `runs` (runs.csv;
    without it every comparison says it is uncertain); two cells are level only when their
    ratio's whole 95% CI lies within 1 ± `tolerance`."""
    if cells.empty:
        return []
    return [*status(cells), *noise(cells, noisy_cv), *comparing(cells, runs, noisy_cv, tolerance)]
