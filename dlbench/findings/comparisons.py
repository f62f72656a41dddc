"""The comparing findings, each with how sure it is: frameworks ranked per model and scale,
scaling (speedup, efficiency) and variants (real vs synthetic data, amp vs fp32).

Every ratio carries its 95% bootstrap CI, computed from the repeats of the two cells it
compares (runs.csv: `stats.ratio_ci`), and a claim is made only where the interval supports
it (`stats.ratio_verdict`): the two are "level" only when the whole interval lies within the
tolerance band; an interval that crosses it is "inconclusive", with the repeats it would
take to decide it; otherwise "uncertain" and why. See docs/report.md (Findings).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from dlbench import labels
from dlbench.analysis import stats
from dlbench.analysis.columns import col
from dlbench.coords import CELL_FIELDS, CellKey
from dlbench.findings.vocabulary import (
    Finding,
    Number,
    cell_key,
    context,
    groups,
    series_labels,
    throughput,
    with_numbers,
)
from dlbench.labels import devices, model_title, unit

# Variants compared against a baseline value of the same coordinate, with the sentence's wording.
VARIANTS = {
    col.data: ("real", "synthetic", "With real data", "its synthetic-data throughput"),
    col.precision: ("amp", "fp32", "With mixed precision (amp)", "its fp32 throughput"),
}


def repeats_by_cell(runs: pd.DataFrame | None) -> dict[CellKey, np.ndarray]:
    """Each cell's repeat throughputs (runs that ended ok), from runs.csv."""
    if runs is None or runs.empty or col.throughput not in runs:
        return {}
    ok = runs[(runs[col.status] == "ok") & runs[col.throughput].map(stats.finite)]
    return {
        CellKey(*(str(v) for v in key)): group[col.throughput].to_numpy(dtype=float)
        for key, group in ok.groupby(CELL_FIELDS, sort=False)
    }


class Judged(NamedTuple):
    """A ratio as a sentence's Number, and what it may claim (stats.ratio_verdict)."""

    number: Number
    verdict: str
    counts: tuple[int, int]  # repeats of the two cells
    tolerance: float
    factor: float  # stats.decide_factor: × the repeats an inconclusive one would take to decide

    def why(self, what: str) -> str:
        return labels.uncertain(self.verdict, self.counts, what, self.tolerance, self.factor)


class Comparer:
    """Ratios of cells with their interval and verdict, from the cells' repeats; `tolerance`: the
    band around 1 whose whole width a ratio's CI must lie in for the two to be level."""

    def __init__(self, repeats: dict[CellKey, np.ndarray], statistic: str, noisy_cv: float, tolerance: float):
        self.repeats, self.statistic, self.noisy_cv, self.tolerance = repeats, statistic, noisy_cv, tolerance

    def _values(self, row) -> np.ndarray:
        return self.repeats.get(cell_key(row), np.array([]))

    def ratio(self, a, b, quantity: str = "ratio", scale: float = 1.0, spec: str = ".2f", suffix: str = "×") -> Judged:
        """a ÷ b × scale with its CI and verdict. `scale`: 1/devices turns a speedup into a
        scaling efficiency (the verdict is the unscaled throughput ratio's)."""
        value = float(a[col.throughput]) / float(b[col.throughput]) * scale
        low, high = (x * scale for x in stats.ratio_ci(self.statistic, self._values(b), self._values(a)))
        counts = (len(self._values(a)), len(self._values(b)))
        noisy = any(stats.finite(r.get(col.cv)) and float(r[col.cv]) > self.noisy_cv for r in (a, b))
        ci = (low / scale, high / scale)
        verdict = stats.ratio_verdict(ci, counts, noisy, self.tolerance)
        factor = stats.decide_factor(value / scale, ci, stats.ratio_band(self.tolerance))
        text = f"{value:{spec}}{suffix}{labels.interval(low, high, spec)}"
        number = Number(value, text, quantity, (cell_key(a), cell_key(b)), low, high)
        return Judged(number, verdict, counts, self.tolerance, factor)


def _qualified(judged: Judged, what: str) -> str:
    why = judged.why(what)
    return f": {why}" if why else ""


def ranking(cells: pd.DataFrame, compare: Comparer) -> list[Finding]:
    """Per model, group and scale with several frameworks: frameworks from the fastest down,
    each step with its ratio, interval and whether the data tell the two apart."""
    out = []
    for model, key, rows, several in groups(with_numbers(cells)):
        for scale in labels.sorted_scales(rows[col.scale].unique()):
            at = rows[rows[col.scale] == scale].sort_values([col.throughput, col.framework], ascending=[False, True])
            if at[col.framework].nunique() < 2:
                continue
            names = series_labels(at)
            ranked = [r for _, r in at.iterrows()]
            first = names[(ranked[0][col.framework], ranked[0][col.strategy])]
            parts: list[str | Number] = [
                f"At {scale}, {context(model, key, several)} throughput by framework: {first} ",
                throughput(ranked[0]),
                f" {unit(model)}",
            ]
            for upper, lower in zip(ranked, ranked[1:], strict=False):
                up, low = (
                    names[(upper[col.framework], upper[col.strategy])],
                    names[(lower[col.framework], lower[col.strategy])],
                )
                judged = compare.ratio(upper, lower)
                parts += [f"; then {low} ", throughput(lower), f", {up} faster by ", judged.number]
                parts.append(_qualified(judged, f"{up} and {low}"))
            out.append(Finding("compare", model, (*parts, ".")))
    return out


def _baseline(cells: pd.DataFrame, row) -> pd.Series | None:
    same = cells
    for f in (col.framework, col.model, col.precision, col.data, col.batch):
        same = same[same[f].astype(str) == str(row[f])]
    single = same[same[col.scale].map(devices) == 1]
    return single.iloc[0] if not single.empty else None


def _one_scale(name: str, row, base, compare: Comparer) -> list[str | Number]:
    speedup = compare.ratio(row, base, col.speedup)
    eff = compare.ratio(row, base, col.efficiency, 1 / devices(row[col.scale]), suffix="").number
    parts = [f"{name} speedup at {row[col.scale]} is ", speedup.number, " over one device (scaling efficiency "]
    parts += [eff, ")"]
    if speedup.verdict == labels.LOWER:
        return [*parts, ": it is slower than on one device"]
    return [*parts, _qualified(speedup, f"{row[col.scale]} and one device")]


def _two_scales(name: str, first, last, base, compare: Comparer) -> list[str | Number]:
    a = compare.ratio(first, base, col.efficiency, 1 / devices(first[col.scale]), suffix="").number
    b = compare.ratio(last, base, col.efficiency, 1 / devices(last[col.scale]), suffix="").number
    speedup = compare.ratio(last, base, col.speedup).number
    # The efficiencies' ratio: last ÷ first throughput, scaled by the device counts.
    efficiencies = compare.ratio(last, first, scale=devices(first[col.scale]) / devices(last[col.scale]))
    tail = [f"; speedup at {last[col.scale]}: ", speedup]
    if efficiencies.verdict in (labels.HIGHER, labels.LOWER):
        trend = "falls from" if efficiencies.verdict == labels.LOWER else "rises from"
        return [
            f"{name} scaling efficiency {trend} ",
            a,
            f" ({first[col.scale]}) to ",
            b,
            f" ({last[col.scale]})",
            *tail,
        ]
    why = efficiencies.why(f"the efficiencies at {first[col.scale]} and {last[col.scale]}")
    return [
        f"{name} scaling efficiency is ",
        a,
        f" at {first[col.scale]} and ",
        b,
        f" at {last[col.scale]}: {why}",
        *tail,
    ]


def scaling(cells: pd.DataFrame, compare: Comparer) -> list[Finding]:
    """Per framework and strategy: the speedup at the one multi-device scale measured, or
    scaling efficiency from the smallest to the largest, each with its interval."""
    out = []
    measured = with_numbers(cells)
    for model, key, rows, several in groups(measured):
        multi = rows[(rows[col.scale].map(devices) > 1) & rows[col.efficiency].map(stats.finite)]
        names = series_labels(multi) if not multi.empty else {}
        for (fw, strategy), series in multi.groupby([col.framework, col.strategy], sort=True):
            base = _baseline(measured, series.iloc[0])
            if base is None:
                continue
            series = series.assign(d=series[col.scale].map(devices)).sort_values(["d", col.scale])
            name = f"{names[(fw, strategy)]}'s {context(model, key, several)}"
            first, last = series.iloc[0], series.iloc[-1]
            if len(series) == 1:
                parts = _one_scale(name, first, base, compare)
            else:
                parts = _two_scales(name, first, last, base, compare)
            out.append(Finding("scaling", model, (*parts, ".")))
    return out


def variants(cells: pd.DataFrame, compare: Comparer) -> list[Finding]:
    """Real vs synthetic data and amp vs fp32, where both cells have a number, at the
    smallest and the largest scale measured both ways, with the ratio's interval."""
    out = []
    measured = with_numbers(cells)
    for column, (variant, baseline, opening, of_what) in VARIANTS.items():
        others = [f for f in CELL_FIELDS if f not in (column, col.scale)]
        base_rows = measured[measured[column] == baseline]
        for _, row in measured[measured[column] == variant].iterrows():
            twin = base_rows
            for f in [*others, col.scale]:
                twin = twin[twin[f] == row[f]]
            if twin.empty or not _at_ends(measured, row, column, variant, baseline, others):
                continue
            base = twin.iloc[0]
            judged = compare.ratio(row, base)
            what = f"{variant} and {baseline}" if column == col.precision else f"{variant} and {baseline} data"
            out.append(
                Finding(
                    "variant",
                    row[col.model],
                    (
                        f"{opening}, {labels.framework_of(row)}'s {model_title(row[col.model])} throughput "
                        f"at {row[col.scale]} "
                        f"(batch {row[col.batch]}/device) is ",
                        judged.number,
                        f" {of_what} (",
                        throughput(row),
                        " vs ",
                        throughput(base),
                        f" {unit(row[col.model])}){_qualified(judged, what)}.",
                    ),
                )
            )
    return out


def _at_ends(measured, row, column, variant, baseline, others) -> bool:
    """Whether the row's scale is the smallest or the largest measured both ways."""
    both = measured
    for f in others:
        both = both[both[f] == row[f]]
    scales = set(both[both[column] == variant][col.scale]) & set(both[both[column] == baseline][col.scale])
    ordered = sorted(scales, key=lambda s: (devices(s), s))
    return row[col.scale] in (ordered[0], ordered[-1]) if ordered else False


def comparing(
    cells: pd.DataFrame, runs: pd.DataFrame | None, noisy_cv: float, tolerance: float = stats.SAME_TOLERANCE
) -> list[Finding]:
    """Every comparing finding: rankings, scaling, variants; two cells are level only when their
    ratio's whole 95% CI lies within 1 ± `tolerance`."""
    statistic = str(cells[col.statistic].dropna().iloc[0]) if cells[col.statistic].notna().any() else col.mean
    compare = Comparer(repeats_by_cell(runs), statistic, noisy_cv, tolerance)
    return [*ranking(cells, compare), *scaling(cells, compare), *variants(cells, compare)]
