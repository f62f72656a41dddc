"""The findings' vocabulary: a `Finding` and its `Number`s, and the helpers every kind of finding
shares (which cells have numbers, groups, context, joining parts of sentences).

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
from dlbench.analysis.columns import col
from dlbench.analysis.stats import finite
from dlbench.coords import CELL_FIELDS, CellKey
from dlbench.labels import model_title

GROUP = [col.model, col.batch, col.precision, col.data]  # one throughput table / figure panel
MAX_LISTED = 5  # cells named in one sentence before "and N more"


@dataclass(frozen=True)
class Number:
    """One number in a sentence: its value, how it is printed, and the cells it comes from."""

    value: float
    text: str
    quantity: str  # throughput | ratio | speedup | efficiency | cv | count | reference_ratio (cell ÷ its reference)
    cells: tuple[CellKey, ...]
    low: float = math.nan  # the 95% CI of a ratio, speedup or efficiency (dlbench.findings.comparisons)
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
    return Number(float(row[col.throughput]), f"{row[col.throughput]:.1f}", col.throughput, cells or (cell_key(row),))


def count(n: int, cells: list[CellKey]) -> Number:
    return Number(float(n), str(n), "count", tuple(cells))


def verb(n: int, singular: str, plural: str) -> str:
    return singular if n == 1 else plural


def with_numbers(cells: pd.DataFrame) -> pd.DataFrame:
    """Cells with a finite throughput (ok, or partial: some repeats produced a number)."""
    if cells.empty:
        return cells
    return cells[cells[col.throughput].map(finite)]


def context(model: str, key: tuple, several_groups: bool) -> str:
    """`ResNet-50` or, when a model has several tables, `ResNet-50 (batch 8/device, fp32, synthetic data)`."""
    if not several_groups:
        return model_title(model)
    _, batch, precision, data = key
    return f"{model_title(model)} ({labels.setup(batch, precision, data)})"


def series_labels(rows: pd.DataFrame) -> dict[tuple[str, str], str]:
    """`PyTorch`, or `PyTorch (ddp)` where a framework has several strategies here."""
    per_fw = rows.groupby(col.framework)[col.strategy].nunique()
    return {
        (fw, st): labels.framework_label(fw) if per_fw[fw] == 1 else labels.series_label(fw, st)
        for fw, st in zip(rows[col.framework], rows[col.strategy], strict=True)
    }


def join(items: list[list[str | Number]]) -> list[str | Number]:
    out: list[str | Number] = []
    for i, item in enumerate(items):
        if i:
            out.append(" and " if i == len(items) - 1 else ", ")
        out.extend(item)
    return out


def groups(cells: pd.DataFrame):
    """(model, group key, rows, several groups for this model) in table order."""
    per_model = cells.groupby(col.model)[GROUP[1:]].apply(lambda g: len(g.drop_duplicates()))
    for key, rows in cells.groupby(GROUP, sort=True):
        yield key[0], key, rows, per_model[key[0]] > 1


# ---------------------------------------------------------------- the sentences
