"""Findings: short factual sentences computed from cells.csv, every number traceable to its cells.

A `Finding` is a sentence made of text and `Number`s; each `Number` keeps the `CellKey`s
it was computed from (a ratio: both cells; an efficiency: the cell and its 1-device
baseline), so the report can link every number to the table cell it came from and a
test can check each sentence against a hand-made cells table. No canned prose: a
sentence exists only when the cells it needs have numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from dlbench import labels
from dlbench.coords import CELL_FIELDS, CellKey
from dlbench.labels import model_title, unit
from dlbench.stats import finite

GROUP = ["model", "batch", "precision", "data"]  # one throughput table / figure panel
MAX_LISTED = 5  # cells named in one sentence before "and N more"


@dataclass(frozen=True)
class Number:
    """One number in a sentence: its value, how it is printed, and the cells it comes from."""

    value: float
    text: str
    quantity: str  # throughput | ratio | speedup | efficiency | cv | count | reference_ratio (cell ÷ its reference)
    cells: tuple[CellKey, ...]
    low: float = math.nan  # the 95% CI of a ratio, speedup or efficiency (dlbench.comparisons)
    high: float = math.nan


@dataclass(frozen=True)
class Finding:
    topic: str  # compare | scaling | variant | noise | status | reference
    model: str | None  # None: about the whole grid
    parts: tuple[str | Number, ...]

    @property
    def text(self) -> str:
        return "".join(p.text if isinstance(p, Number) else p for p in self.parts)

    @property
    def numbers(self) -> list[Number]:
        return [p for p in self.parts if isinstance(p, Number)]

    @property
    def cells(self) -> list[CellKey]:
        seen: dict[CellKey, None] = {}
        for number in self.numbers:
            seen.update(dict.fromkeys(number.cells))
        return list(seen)


# ---------------------------------------------------------------- helpers


def cell_key(row: pd.Series | dict) -> CellKey:
    return CellKey(**{f: str(row[f]) for f in CELL_FIELDS})


def throughput(row, cells: tuple[CellKey, ...] | None = None) -> Number:
    return Number(float(row["throughput"]), f"{row['throughput']:.1f}", "throughput", cells or (cell_key(row),))


def count(n: int, cells: list[CellKey]) -> Number:
    return Number(float(n), str(n), "count", tuple(cells))


def _verb(n: int, singular: str, plural: str) -> str:
    return singular if n == 1 else plural


def _with_numbers(cells: pd.DataFrame) -> pd.DataFrame:
    """Cells with a finite throughput (ok, or partial: some repeats produced a number)."""
    if cells.empty:
        return cells
    return cells[cells["throughput"].map(finite)]


def _context(model: str, key: tuple, several_groups: bool) -> str:
    """`ResNet-50` or, when a model has several tables, `ResNet-50 (batch 8/device, fp32, synthetic data)`."""
    if not several_groups:
        return model_title(model)
    _, batch, precision, data = key
    return f"{model_title(model)} ({labels.setup(batch, precision, data)})"


def _series_labels(rows: pd.DataFrame) -> dict[tuple[str, str], str]:
    """framework, or `framework (strategy)` where a framework has several strategies here."""
    per_fw = rows.groupby("framework")["strategy"].nunique()
    return {
        (fw, st): fw if per_fw[fw] == 1 else labels.series_label(fw, st)
        for fw, st in zip(rows["framework"], rows["strategy"], strict=True)
    }


def _join(items: list[list[str | Number]]) -> list[str | Number]:
    out: list[str | Number] = []
    for i, item in enumerate(items):
        if i:
            out.append(" and " if i == len(items) - 1 else ", ")
        out.extend(item)
    return out


def _groups(cells: pd.DataFrame):
    """(model, group key, rows, several groups for this model) in table order."""
    per_model = cells.groupby("model")[GROUP[1:]].apply(lambda g: len(g.drop_duplicates()))
    for key, rows in cells.groupby(GROUP, sort=True):
        yield key[0], key, rows, per_model[key[0]] > 1


# ---------------------------------------------------------------- the sentences


def noise(cells: pd.DataFrame, threshold: float) -> list[Finding]:
    """How many cells with at least two numbers have a CV across repeats above the threshold."""
    if cells.empty or "cv" not in cells:
        return []
    checked = cells[cells["cv"].map(finite) & (cells["n"].fillna(0) >= 2)]
    if checked.empty:
        return []
    noisy = checked[checked["cv"] > threshold].sort_values("cv", ascending=False)
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
    cv = Number(float(worst["cv"]), f"{worst['cv']:.2f}", "cv", (cell_key(worst),))
    return [
        Finding(
            "noise",
            None,
            (
                count(len(noisy), [cell_key(r) for _, r in noisy.iterrows()]),
                " of ",
                count(len(checked), everyone),
                f" cells with two or more repeats {_verb(len(noisy), 'has', 'have')} a coefficient of variation "
                f"above {threshold:g} (their numbers are uncertain); the largest is ",
                cv,
                f" ({worst['framework']} {model_title(worst['model'])} at {worst['scale']}).",
            ),
        )
    ]


def status(cells: pd.DataFrame) -> list[Finding]:
    """Cells without a number (by status) and cells where only some repeats produced one."""
    if cells.empty:
        return []
    out = []
    missing = cells[~cells["throughput"].map(finite)]
    if not missing.empty:
        listed = [
            f"{r['framework']} {model_title(r['model'])} at {r['scale']} ({labels.status_label(str(r['status']))})"
            for _, r in missing.head(MAX_LISTED).iterrows()
        ]
        more = f" and {len(missing) - MAX_LISTED} more" if len(missing) > MAX_LISTED else ""
        out.append(
            Finding(
                "status",
                None,
                (
                    count(len(missing), [cell_key(r) for _, r in missing.iterrows()]),
                    " of ",
                    count(len(cells), [cell_key(r) for _, r in cells.iterrows()]),
                    f" cells {_verb(len(missing), 'has', 'have')} no number: {'; '.join(listed)}{more}.",
                ),
            )
        )
    partial = cells[cells["status"] == "partial"]
    if not partial.empty:
        out.append(
            Finding(
                "status",
                None,
                (
                    count(len(partial), [cell_key(r) for _, r in partial.iterrows()]),
                    _verb(
                        len(partial),
                        " cell has a number from only some of its repeats (marked *).",
                        " cells have a number from only some of their repeats (marked *).",
                    ),
                ),
            )
        )
    return out


def reference_verdicts(references: pd.DataFrame | None, tolerance: float) -> list[Finding]:
    """Per kind (published, baseline): how many comparisons fall within the tolerance, are
    slower or faster, and the furthest one. From references.csv (dlbench.references): one
    row per measured cell and reference it matched, with `measured`, `reference`, `ratio`."""
    if references is None or references.empty:
        return []
    out = []
    refs = references[references["ratio"].map(finite)].assign(batch=lambda r: r["batch"].astype(str))
    for kind, rows in refs.groupby("kind", sort=True):
        tally = []
        for verdict in ("within", "slower", "faster"):
            chosen = rows[rows["verdict"] == verdict]
            if not chosen.empty:
                tally.append([count(len(chosen), [cell_key(r) for _, r in chosen.iterrows()]), f" {verdict}"])
        far = rows.loc[rows["ratio"].map(lambda r: abs(math.log(r)) if r > 0 else math.inf).idxmax()]
        hardware = "" if pd.isna(far.get("hardware")) else str(far.get("hardware") or "")
        what = "published numbers" if kind == "published" else f"the {kind} ({far['source']})"
        parts: list[str | Number] = [
            f"Of the {len(rows)} comparisons with {what}, tolerance ±{tolerance:.0%}: ",
            *_join(tally),
            f". Furthest: {far['framework']} {model_title(far['model'])} at {far['scale']} "
            f"(batch {far['batch']}/device), ",
            Number(float(far["measured"]), f"{far['measured']:.1f}", "throughput", (cell_key(far),)),
            f" {unit(far['model'])}, is ",
            Number(float(far["ratio"]), f"{far['ratio']:.2f}×", "reference_ratio", (cell_key(far),)),
            f" the reference {far['reference']:.1f}"
            + (f" ({far['source']}, {hardware})" if kind == "published" and hardware else "")
            + ".",
        ]
        out.append(Finding("reference", None, tuple(parts)))
    return out


def findings(cells: pd.DataFrame, noisy_cv: float = 0.1, runs: pd.DataFrame | None = None) -> list[Finding]:
    """Every finding: the whole grid's first, then per model the comparing ones (rankings,
    scaling, variants), whose intervals come from the cells' repeats in `runs` (runs.csv;
    without it every comparison says it is uncertain)."""
    from dlbench.comparisons import comparing  # it builds on this module's Number and Finding

    if cells.empty:
        return []
    cells = cells.assign(batch=cells["batch"].astype(str))
    return [*status(cells), *noise(cells, noisy_cv), *comparing(cells, runs, noisy_cv)]
