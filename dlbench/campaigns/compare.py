"""Compare two campaigns: are they comparable (protocol, image size, software, hardware from
their manifests), and per matched cell, is the candidate faster, slower, the same or too
noisy to tell -- the ratio with a bootstrap CI over repeats, the Mann-Whitney U test where both
sides have runs, and a verdict (dlbench.analysis.stats). Unmatched cells carry the reason.

Cells match on every coordinate (framework, model, precision, data, batch, scale, strategy);
a 1-device cell's strategy is not compared (one device has no parallel strategy).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from dlbench import labels
from dlbench.analysis import stats, tables
from dlbench.analysis.columns import col
from dlbench.campaigns.campaign import PROTOCOL_KEYS, Campaign
from dlbench.coords import CELL_FIELDS, SINGLE_DEVICE, TRAINING_DEFAULTS, training_suffix

# Differences that make a ratio meaningless (another workload), as against the ones a
# comparison is made to find (another driver, image, framework version or machine).
BLOCKING = ("protocol.warmup_steps", "protocol.measured_steps", "protocol.statistic", col.image_size)
COLUMNS = [
    *CELL_FIELDS,
    "reference",
    "candidate",
    "ratio",
    col.ci95_low,
    col.ci95_high,
    "n_reference",
    "n_candidate",
    "mannwhitney_u",
    "p_value",
    "effect_size",
    "verdict",
    "why",
]
VERDICTS = (labels.FASTER, labels.SLOWER, labels.SAME, labels.INCONCLUSIVE)


@dataclass
class Comparison:
    reference: str
    candidate: str
    tolerance: float
    differences: list[dict] = field(default_factory=list)
    cells: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=COLUMNS))
    unmatched: list[dict] = field(default_factory=list)

    @property
    def comparable(self) -> bool:
        return not any(d["blocking"] for d in self.differences)

    @property
    def regressions(self) -> pd.DataFrame:
        return self.cells[self.cells["verdict"] == labels.SLOWER]

    def summary(self) -> dict:
        counts = self.cells["verdict"].value_counts().to_dict()
        return {
            "reference": self.reference,
            "candidate": self.candidate,
            "tolerance": self.tolerance,
            "comparable": self.comparable,
            "differences": self.differences,
            "verdicts": {v: int(counts.get(v, 0)) for v in VERDICTS},
            "matched_cells": len(self.cells),
            "unmatched_cells": self.unmatched,
            "regression": bool(len(self.regressions)),
        }


def _flat(manifest: dict) -> dict[str, str]:
    out = {f"protocol.{k}": manifest.get("protocol", {}).get(k) for k in PROTOCOL_KEYS}
    out[col.image_size] = manifest.get("image_size")
    for section in ("software", "hardware"):
        for key, value in (manifest.get(section) or {}).items():
            if isinstance(value, dict):
                out.update({f"{section}.{key}.{k}": v for k, v in value.items()})
            else:
                out[f"{section}.{key}"] = ", ".join(map(str, value)) if isinstance(value, list) else value
    return {k: "" if v is None else str(v) for k, v in out.items()}


def differences(a: dict, b: dict) -> list[dict]:
    """What differs between two manifests; a value one side did not record is a difference
    only for the blocking keys (then: unknown, not blocking)."""
    fa, fb = _flat(a), _flat(b)
    out = []
    for key in sorted(set(fa) | set(fb)):
        va, vb = fa.get(key, ""), fb.get(key, "")
        if va == vb or (key not in BLOCKING and not (va and vb)):
            continue
        known = bool(va and vb)
        out.append({"field": key, "reference": va, "candidate": vb, "blocking": key in BLOCKING and known})
    return out


def _key(cell: pd.Series) -> tuple:
    values = {f: str(cell[f]) for f in CELL_FIELDS}
    if int(cell[col.devices]) == 1:
        values[col.strategy] = SINGLE_DEVICE
    return tuple(values[f] for f in CELL_FIELDS)


def _keyed(cells: pd.DataFrame) -> dict[tuple, pd.Series]:
    return {_key(c): c for _, c in cells.iterrows()}


def key_text(key: tuple) -> str:
    """A cell's key as its run directory writes it: `pytorch/resnet50/.../ddp`, `...fsdp+ac_full`."""
    values = dict(zip(CELL_FIELDS, key, strict=True))
    shown = "/".join(values[f] for f in CELL_FIELDS if f not in TRAINING_DEFAULTS)
    return shown + training_suffix(
        values[col.activation_checkpointing],
        int(values[col.grad_accum]),
        values[col.pp_schedule],
        int(values[col.pp_microbatches]),
    )


def unmatched_reason(key: tuple, others: list[tuple], side: str) -> str:
    """`no <side> cell; nearest differs in strategy (a vs b)`: the coordinates that differ
    from the closest cell on the other side."""
    if not others:
        return f"the {side} campaign has no cells"
    nearest = min(others, key=lambda o: (sum(x != y for x, y in zip(key, o, strict=True)), o))
    diffs = [f"{f} ({x} vs {y})" for f, x, y in zip(CELL_FIELDS, key, nearest, strict=True) if x != y]
    return f"no {side} cell with these coordinates; nearest differs in " + ", ".join(diffs)


def _repeats(campaign: Campaign, cells: dict[tuple, pd.Series]) -> dict[tuple, list[float]]:
    """Per matched key, the repeats' throughputs, or the published statistic alone."""
    runs = {}
    by_run = campaign.repeats()
    for key, cell in cells.items():
        original = tuple(str(cell[f]) for f in CELL_FIELDS)
        runs[key] = by_run.get(original) or (
            [float(cell[col.throughput])] if stats.finite(cell[col.throughput]) else []
        )
    return runs


def compare(
    reference: Campaign,
    candidate: Campaign,
    tolerance: float = stats.SAME_TOLERANCE,
    min_repeats: int = stats.MIN_REPEATS,
) -> Comparison:
    result = Comparison(reference.id, candidate.id, tolerance, differences(reference.manifest, candidate.manifest))
    a, b = _keyed(reference.cells), _keyed(candidate.cells)
    ra, rb = _repeats(reference, a), _repeats(candidate, b)
    statistic = str(reference.cells[col.statistic].dropna().iloc[0]) if col.statistic in reference.cells else col.mean
    statistic = statistic if statistic in stats.STATISTICS else col.mean
    rows = []
    for key in sorted(set(a) & set(b)):
        if not (ra[key] and rb[key]):
            result.unmatched.append({"cell": key_text(key), col.reason: "a side has no number (failed or N/A cell)"})
            continue
        rows.append(_cell_row(key, a[key], b[key], ra[key], rb[key], statistic, tolerance, min_repeats))
    for key in sorted(set(a) - set(b)):
        result.unmatched.append({"cell": key_text(key), col.reason: unmatched_reason(key, sorted(b), "candidate")})
    for key in sorted(set(b) - set(a)):
        result.unmatched.append({"cell": key_text(key), col.reason: unmatched_reason(key, sorted(a), "reference")})
    result.cells = pd.DataFrame(rows, columns=COLUMNS)
    return result


def _cell_row(key, cell_a, cell_b, runs_a, runs_b, statistic, tolerance, min_repeats) -> dict:
    value_a, value_b = float(cell_a[col.throughput]), float(cell_b[col.throughput])
    ci = stats.ratio_ci(statistic, runs_a, runs_b)
    test = stats.mann_whitney(runs_a, runs_b)
    repeats = (len(runs_a), len(runs_b))
    ratio = value_b / value_a
    verdict, why = stats.comparison_verdict(ci, tolerance, repeats, test, min_repeats=min_repeats, estimate=ratio)
    return {
        **dict(zip(CELL_FIELDS, key, strict=True)),
        "reference": value_a,
        "candidate": value_b,
        "ratio": ratio,
        col.ci95_low: ci[0],
        col.ci95_high: ci[1],
        "n_reference": repeats[0],
        "n_candidate": repeats[1],
        "mannwhitney_u": test["u"],
        "p_value": test["p"],
        "effect_size": test["effect"],
        "verdict": verdict,
        "why": why,
    }


def write(result: Comparison, directory: str | Path) -> dict[str, Path]:
    """comparison.json (the summary) and comparison.csv (one row per matched cell)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {"summary": directory / "comparison.json", "cells": directory / "comparison.csv"}
    paths["summary"].write_text(json.dumps(result.summary(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    paths["cells"].write_bytes(tables.csv_bytes(result.cells))
    return paths


def text(result: Comparison) -> str:
    """The comparison for a person, a few lines."""
    s = result.summary()
    lines = [f"{s['candidate']} against {s['reference']} (tolerance ±{s['tolerance']:.0%})"]
    lines.append("comparable" if s["comparable"] else "NOT comparable: another workload")
    for d in s["differences"]:
        mark = "blocks" if d["blocking"] else "differs"
        lines.append(f"  {mark}: {d['field']}: {d['reference'] or '?'} → {d['candidate'] or '?'}")
    lines.append(", ".join(f"{n} {v}" for v, n in s["verdicts"].items()) + f"; {len(s['unmatched_cells'])} unmatched")
    decided = result.cells["verdict"].isin([labels.FASTER, labels.SLOWER])
    crossing = (result.cells["verdict"] == labels.INCONCLUSIVE) & result.cells[col.ci95_low].map(stats.finite)
    for _, c in result.cells[decided | crossing].iterrows():
        lines.append(
            f"  {c['verdict']}: {'/'.join(str(c[f]) for f in CELL_FIELDS)} ×{c['ratio']:.3f} "
            f"[{c[col.ci95_low]:.3f}, {c[col.ci95_high]:.3f}] p={c['p_value']:.3g}"
            + (f": {c['why']}" if c["verdict"] == labels.INCONCLUSIVE else "")
        )
    return "\n".join(lines)
