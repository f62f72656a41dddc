"""The report's page data: test method, per-model sections, data comparison, published vs measured."""

from __future__ import annotations

import pandas as pd

from dlbench import labels
from dlbench.analysis import tables
from dlbench.analysis.aggregate import real_data_pairs
from dlbench.analysis.columns import col
from dlbench.analysis.losses import COMPARED, INCONCLUSIVE, SLOWER
from dlbench.analysis.stats import finite
from dlbench.coords import SINGLE_DEVICE
from dlbench.findings import vocabulary as fnd
from dlbench.models import CATALOGUE, kind_of
from dlbench.planning.grid import planned_sizes
from dlbench.plots import figures as figs
from dlbench.plots.curves import loss_figure
from dlbench.plots.layout import batch_order, facets, png_data_uri
from dlbench.plots.memory import has_memory, memory_figure
from dlbench.report.cells import cell_id, finding_html, throughput_tables


def ran_sizes(models: list[str], run: dict, runs: pd.DataFrame | None) -> dict[str, tuple[int, int]]:
    """Per model, the (image size, sequence length) its runs trained at, as runs.csv records them
    from the step-log headers; a model without recorded runs: what the config would give."""
    sizes = {}
    for m in models:
        recorded = runs[runs[col.model] == m] if runs is not None and col.image_size in runs else None
        if recorded is not None and recorded[col.image_size].notna().any():
            first = recorded[recorded[col.image_size].notna()].iloc[0]
            sizes[m] = (_whole(first[col.image_size]), _whole(first.get(col.seq_len)))
        else:
            sizes[m] = planned_sizes(run, m)
    return sizes


def _whole(value) -> int:
    """A size as runs.csv holds it (a float, NaN where the header had none) as a whole number."""
    return int(value) if finite(value) else 0


def _input_sizes(sizes: dict[str, tuple[int, int]]) -> list[str]:
    """Per model, the size it trained at as its kind words it (a model outside the catalogue:
    its image size)."""
    texts = []
    for m, (image_size, seq_len) in sizes.items():
        kind = kind_of(m) if m in CATALOGUE else None
        size = (
            kind.size_text.format(size=kind.size((image_size, seq_len)))
            if kind
            else f"{image_size}×{image_size} px images"
        )
        texts.append(f"{labels.model_title(m)}: {size}")
    return texts


def method(
    protocol: dict, config: dict, cells: pd.DataFrame, noisy_cv: float, runs: pd.DataFrame | None = None
) -> dict:
    """What was measured and how: the method section's facts (sizes: what the runs trained at)."""
    run = config.get("run", {}) or {}
    grid = config.get("grid", {}) or {}
    measured = not cells.empty
    models = list(dict.fromkeys(cells[col.model])) if measured else list(grid.get("models", []))
    sizes = ran_sizes(models, run, runs)
    smaller = any(0 < sizes[m][0] < CATALOGUE[m].get("default_image_size", 0) for m in models if m in CATALOGUE)
    return {
        "units": list(dict.fromkeys(labels.sample_noun(m) for m in models)),
        "frameworks": sorted(set(cells[col.framework])) if measured else list(grid.get("frameworks", [])),
        "models": [labels.model_title(m) for m in models],
        "batches": sorted({str(b) for b in cells[col.batch]}, key=lambda b: (b == "max", b.zfill(8)))
        if measured
        else [],
        "scales": labels.sorted_scales(cells[col.scale]) if measured else [],
        col.data: [labels.DATA_TEXT.get(d, d) for d in dict.fromkeys(cells[col.data])] if measured else [],
        col.precision: _precisions(cells, config) if measured else [],
        "strategies": [
            (s, labels.strategy_text(s, cells[cells[col.strategy] == s][col.framework]))
            for s in (sorted(set(cells[col.strategy])) if measured else [])
        ],
        "sizes": _input_sizes(sizes),
        "image_sizes": {sizes[m][0] for m in models if m in CATALOGUE and kind_of(m).size_field == col.image_size},
        "smaller_than_published": smaller,
        "device": run.get("device", "cpu"),
        "threads": run.get("threads"),
        "time_limit_s": run.get("time_limit_s"),
        # framework_options set in the config (the rest at their declared defaults)
        "framework_options": [
            (fw, ", ".join(f"{k} = {v}" for k, v in sorted(settings.items())))
            for fw, settings in sorted((config.get("framework_options") or {}).items())
            if settings
        ],
        "llm_flops": _llm_flops(sizes, cells),
        "noisy_cv": noisy_cv,
        col.statistic: str(protocol.get("statistic", "")).replace("_", " "),
    }


def _precisions(cells: pd.DataFrame, config: dict) -> list[str]:
    """Each precision the cells ran in, in words; one that a framework emulated says so."""
    emulated = tables.emulated(cells, config)
    out = []
    for p in dict.fromkeys(cells[col.precision]):
        by = [labels.framework_label(fw) for fw, q in sorted(emulated) if q == p]
        emulation = f": {', '.join(by)} {labels.EMULATED_TEXT}" if by else ""
        out.append(f"{p} ({labels.PRECISION_TEXT.get(p, p)}){emulation}")
    return out


def _llm_flops(sizes: dict[str, tuple[int, int]], cells: pd.DataFrame) -> str | None:
    """How the TFLOP/s and MFU of a kind with a FLOPs note (the LLMs, docs/frameworks/llm.md)
    are counted: the formula, each model's FLOPs per sample at the size it ran, and the peak MFU
    divides by (or why none)."""
    ran = [(m, planned) for m, planned in sizes.items() if m in CATALOGUE and kind_of(m).flops_note]
    ran = [(m, kind_of(m).size(planned)) for m, planned in ran if kind_of(m).size(planned)]
    if not ran:
        return None
    kind = kind_of(ran[0][0])
    unit = kind.sample_unit.removesuffix("s")
    per_sample = "; ".join(
        f"{labels.model_title(m)} at {size} tokens: {kind_of(m).train_flops(m, CATALOGUE[m], size) / 1e9:.3g} "
        f"GFLOP/{unit}"
        for m, size in ran
    )
    mine = cells[cells[col.model].isin([m for m, _ in ran])] if not cells.empty else cells
    bases = sorted({str(b) for b in mine.get(col.peak_basis, pd.Series(dtype=str)).dropna() if str(b)})
    peak = (
        "MFU = achieved TFLOP/s ÷ " + "; ".join(bases)
        if bases
        else "No dense peak is known for this device, so no MFU is given (TFLOP/s only)"
    )
    return f"training FLOPs per {unit} = {kind.flops_note}: {per_sample}. {peak}"


def headline_cells(cells: pd.DataFrame) -> pd.DataFrame:
    """Per model, the one figure panel (batch, data, precision) with the most cells that have a
    number (ties: synthetic data, then the larger batch): the summary's view of the grid."""
    chosen = []
    for _, mine in cells[cells[col.throughput].map(finite)].groupby(col.model, sort=False):
        keys = mine.groupby([col.batch, col.data, col.precision]).size().reset_index(name=col.n)
        keys = keys.assign(synthetic=keys[col.data] == "synthetic", order=keys[col.batch].map(batch_order))
        best = keys.sort_values([col.n, "synthetic", "order"], ascending=False).iloc[0]
        picked = (cells[col.model] == mine[col.model].iloc[0]) & (cells[col.batch] == best[col.batch])
        chosen.append(
            cells[picked & (cells[col.data] == best[col.data]) & (cells[col.precision] == best[col.precision])]
        )
    return pd.concat(chosen) if chosen else cells.iloc[0:0]


def summary_figure(cells: pd.DataFrame) -> str | None:
    """The grid's main question at a glance: throughput by framework and scale, one panel per
    model at its headline setup (headline_cells), 95% CIs as error bars (None: no number yet)."""
    if cells.empty or not cells[col.throughput].map(finite).any():
        return None
    return png_data_uri(figs.throughput_figure, headline_cells(cells))


def _parameters(runs: pd.DataFrame, model: str) -> list[str]:
    """`25.6 M (PyTorch, TensorFlow)`: trainable parameters as the frameworks counted them."""
    params: dict[str, list[str]] = {}
    if not runs.empty and col.trainable_params in runs:
        for fw, g in runs[(runs[col.model] == model) & runs[col.trainable_params].map(finite)].groupby(col.framework):
            params.setdefault(f"{g[col.trainable_params].iloc[0] / 1e6:.1f} M", []).append(labels.framework_label(fw))
    return [f"{p} ({', '.join(fws)})" for p, fws in params.items()]


def _catalogue_order(model: str) -> int:
    return list(CATALOGUE).index(model) if model in CATALOGUE else 99


def model_sections(
    cells: pd.DataFrame,
    runs: pd.DataFrame,
    found: list[fnd.Finding],
    curves: pd.DataFrame | None = None,
    emulated: frozenset = frozenset(),
) -> list[dict]:
    """Per model: facts, findings (by topic), tables, and one figure of each kind drawn from its
    cells only, faceted by batch, data and precision (docs/report.md: how the report scales);
    its loss curves (losses.csv) and the convergence check between frameworks."""
    sections = []
    all_tables = throughput_tables(cells, emulated)
    for model in sorted(cells[col.model].unique(), key=_catalogue_order):
        mine = cells[cells[col.model] == model]
        has_number = mine[col.throughput].map(finite).any()
        scaled, one_scale = figs.scaled_facets(mine)
        data_rows, data_figure = data_comparison(mine)
        findings = [f for f in found if f.model == model]
        sections.append(
            {
                col.model: model,
                "id": f"model-{model}",
                "title": labels.model_title(model),
                "unit": labels.unit(model),
                "params": _parameters(runs, model),
                "cells": len(mine),
                "cells_with_number": int(mine[col.throughput].map(finite).sum()),
                "findings": [finding_html(f) for f in findings],
                "finding_topics": finding_topics(findings),
                "tables": [t for t in all_tables if t["key"][0] == model],
                "throughput_figure": png_data_uri(figs.throughput_figure, mine) if has_number else None,
                "speedup_figure": png_data_uri(figs.speedup_figure, mine) if scaled else None,
                "throughput_wide": len(facets(mine)) > 1,
                "speedup_wide": len(scaled) > 1,
                "data_wide": mine[[col.batch, col.precision]].drop_duplicates().shape[0] > 1,
                "one_scale": [labels.setup(batch, precision, data) for _, batch, data, precision in one_scale],
                "data_rows": data_rows,
                "sanity_rows": sanity_rows(mine),
                "data_figure": data_figure,
                "scales": labels.sorted_scales(mine[col.scale]),
                **_training(mine, curves, model),
            }
        )
    return sections


def _training(cells: pd.DataFrame, curves: pd.DataFrame | None, model: str) -> dict:
    """A model's memory and loss figures (None: nothing recorded) and its convergence rows."""
    mine = curves[curves[col.model] == model] if curves is not None and not curves.empty else None
    drawn = mine is not None and mine["loss"].map(finite).any()
    return {
        "memory_figure": png_data_uri(memory_figure, cells) if has_memory(cells) else None,
        col.memory_basis: ", ".join(sorted({labels.text(b) for b in cells.get(col.memory_basis, [])} - {""})),
        "loss_figure": png_data_uri(loss_figure, mine) if drawn else None,
        "loss_wide": drawn and len(facets(mine)) > 1,
        "convergence_rows": convergence_rows(cells),
    }


def convergence_rows(cells: pd.DataFrame) -> list[dict]:
    """The cells compared with the others that train the same model alike (dlbench.analysis.losses)."""
    if col.convergence not in cells:
        return []
    judged = cells[cells[col.convergence].map(labels.text).isin(COMPARED)]
    return [
        {
            "cell_id": cell_id(fnd.cell_key(c)),
            col.framework: labels.framework_label(c[col.framework]),
            col.scale: labels.scale_and_strategy(c[col.scale], c[col.strategy]),
            "setup": labels.setup(c[col.batch], c[col.precision], c[col.data]),
            "slower": c[col.convergence] == SLOWER,
            "inconclusive": c[col.convergence] == INCONCLUSIVE,
            col.reason: labels.text(c[col.convergence_reason]),
        }
        for _, c in judged.sort_values([col.data, col.batch, col.devices, col.framework, col.strategy]).iterrows()
    ]


def finding_topics(findings: list[fnd.Finding]) -> list[dict]:
    """The findings by topic, in the order topics first appear: what a collapsed list shows."""
    topics: dict[str, list] = {}
    for f in findings:
        topics.setdefault(f.topic, []).append(finding_html(f))
    return [{"title": labels.finding_topic(t), "items": items} for t, items in topics.items()]


def data_comparison(cells: pd.DataFrame) -> tuple[list[dict], str | None]:
    """Rows and figure of real-data cells beside their synthetic twins (none: no such pair)."""
    pairs = real_data_pairs(cells)
    if pairs.empty:
        return [], None
    rows = [
        {
            col.framework: c[col.framework],
            "framework_label": labels.framework_label(c[col.framework]),
            col.scale: labels.scale_and_strategy(c[col.scale], c[col.strategy]),
            col.batch: c[col.batch],
            col.precision: c[col.precision],
            "synthetic": f"{c['synthetic_throughput']:.1f}",
            "real": f"{c[col.throughput]:.1f}",
            "ratio": f"{c[col.real_vs_synthetic]:.2f}",
            "wait": f"{c[col.data_wait_fraction]:.1%}" if finite(c.get(col.data_wait_fraction)) else "—",
        }
        for _, c in pairs.iterrows()
    ]
    return rows, png_data_uri(figs.data_figure, cells)


def sanity_rows(cells: pd.DataFrame) -> list[dict]:
    """The sanity column: each cell's verdict on its training (dlbench.analysis.sanity), its mean
    first- and last-quarter losses, and why a SUSPECT cell is one."""
    if col.sanity not in cells:
        return []
    judged = cells[cells[col.sanity].map(labels.text) != ""]
    return [
        {
            "cell_id": cell_id(fnd.cell_key(c)),
            col.framework: labels.framework_label(c[col.framework]),
            col.scale: labels.scale_and_strategy(c[col.scale], c[col.strategy]),
            "setup": labels.setup(c[col.batch], c[col.precision], c[col.data]),
            "loss": f"{_number(c.get(col.loss_first_quarter), '.3g')} → {_number(c.get(col.loss_last_quarter), '.3g')}",
            col.sanity: labels.SANITY_TEXT.get(c[col.sanity], c[col.sanity]),
            "suspect": c[col.sanity] == "suspect",
            col.reason: labels.text(c.get(col.sanity_reason)),
        }
        for _, c in judged.sort_values([col.data, col.framework, col.devices, col.strategy]).iterrows()
    ]


def _number(value, spec: str, suffix: str = "") -> str:
    return f"{value:{spec}}{suffix}" if finite(value) else "—"


def _reference_row(r: pd.Series) -> dict:
    return {
        "cell_id": cell_id(fnd.cell_key(r)),
        "cell": f"{labels.framework_of(r)} {labels.model_title(r[col.model])}, "
        f"batch {r[col.batch]}, {r[col.scale]}" + (f" {r[col.strategy]}" if r[col.strategy] != SINGLE_DEVICE else ""),
        "kind": labels.text(r.get("kind")),
        "source": labels.text(r.get("source")),
        "hardware": labels.text(r.get("hardware")),
        "reference_setup": " ".join(
            v for v in (labels.text(r.get("reference_framework")), labels.text(r.get("reference_strategy"))) if v
        ),
        "reference": _number(r.get("reference"), ".1f"),
        "measured": _number(r.get("measured"), ".1f"),
        "ratio": _number(r.get("ratio"), ".2f", "×")
        + labels.interval(r.get("ratio_low", float("nan")), r.get("ratio_high", float("nan"))),
        "verdict": labels.text(r.get("verdict")),
        "why": labels.text(r.get("why")),
    }


def published_vs_measured(references: pd.DataFrame | None, settings: dict, found: list[fnd.Finding]) -> dict | None:
    """The references table (results/tables/references.csv, from dlbench.analysis.references): each
    measured cell beside the published number or baseline it matched, ratio and verdict,
    and a figure of the ratios. None (no section) when there is no such table."""
    if references is None:
        return None
    tolerance = float(settings.get("tolerance", 0.1))
    out = {
        "hardware": settings.get("hardware") or "",
        "baseline": settings.get("baseline") or "",
        "tolerance": tolerance,
        "rows": [],
        "figure": None,
        "findings": [finding_html(f) for f in found if f.topic == "reference"],
    }
    if references.empty:
        return out
    refs = references.sort_values(["kind", col.model, col.devices, col.framework, "source"], kind="stable")
    out["rows"] = [_reference_row(r) for _, r in refs.iterrows()]
    plotted = refs[refs["ratio"].map(finite)]
    if not plotted.empty:
        out["figure"] = png_data_uri(lambda data, png: figs.reference_figure(data, tolerance, png), plotted)
    return out
