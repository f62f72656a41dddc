"""Tables for people: cells.csv → Markdown (one table per model/batch/precision/data)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dlbench import labels
from dlbench.analysis import adaptive, efficiency, losses, sanity
from dlbench.analysis.aggregate import cells_table, real_data_pairs, runs_table
from dlbench.analysis.columns import col
from dlbench.planning.grid import Grid
from dlbench.planning.schema import settings
from dlbench.runners import capabilities, framework_names


def build(experiment: Grid, root: str | Path = ".", **options) -> tuple[pd.DataFrame, pd.DataFrame]:
    """runs.csv's and cells.csv's tables; `options`: build_with_curves' (which adds losses.csv's)."""
    runs, cells, _ = build_with_curves(experiment, root, **options)
    return runs, cells


def build_with_curves(
    experiment: Grid,
    root: str | Path = ".",
    noisy_cv: float = 0.1,
    flops: dict[str, float] | None = None,
    peak_tflops: float = 0.0,
    convergence_tolerance: float | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    planned = adaptive.decided_runs(experiment.runs, experiment.protocol, root)
    runs = runs_table(planned, root, loss_tolerance=sanity.loss_tolerance(experiment.protocol))
    curves = losses.curve_table(runs)
    runs = runs.drop(columns=[losses.CURVE_COLUMN], errors="ignore")
    cells = cells_table(runs, experiment.protocol["statistic"], experiment.unavailable, noisy_cv)
    cells = adaptive.stop_reasons(cells, experiment.protocol, root)
    if convergence_tolerance is None:  # the config schema's default
        convergence_tolerance = settings({}, "analysis")["convergence_tolerance"]
    return runs, losses.convergence(add_flops(cells, flops or {}, peak_tflops), curves, convergence_tolerance), curves


def add_flops(cells: pd.DataFrame, flops: dict[str, float], peak_tflops: float) -> pd.DataFrame:
    """Achieved TFLOP/s = throughput × training FLOPs per sample; MFU against the
    per-device peak named in `peak_basis` (empty when no peak is known, e.g. on a CPU)."""
    if cells.empty:
        return cells
    per_sample = cells[col.model].map(flops).astype(float)
    cells[col.train_gflops_per_sample] = per_sample / 1e9
    cells[col.tflops] = cells[col.throughput] * per_sample / 1e12
    # The per-device peak: run.peak_tflops, else the GPU's dense peak for the precision (dlbench.analysis.efficiency).
    cells[col.peak_tflops], cells[col.peak_basis] = efficiency.mfu_basis(cells, peak_tflops)
    cells[col.mfu] = cells[col.tflops] / (cells[col.peak_tflops] * cells[col.devices])
    return cells


def csv_bytes(table: pd.DataFrame) -> bytes:
    """The one way tables are written, so that the audit can compare bytes."""
    return table.to_csv(index=False, lineterminator="\n").encode()


def emulated(cells: pd.DataFrame, config: dict) -> frozenset:
    """The (framework, precision) pairs of `cells` that ran in their framework's emulation: the
    config's framework_options asked for it (Capabilities.emulated_precisions; what the runs
    recorded, since a run measured otherwise is refused, dlbench.planning.measured)."""
    if cells.empty:
        return frozenset()
    options = config.get("framework_options") or {}
    known = set(framework_names())
    pairs = set(zip(cells[col.framework], cells[col.precision], strict=True))
    return frozenset((fw, p) for fw, p in pairs if fw in known and capabilities(fw).emulates(p, options.get(fw)))


def cell_text(cell: pd.Series, emulated_pairs: frozenset = frozenset()) -> str:
    """A cell as a person reads it: `123.4 ± 5.6` (marks: `*` partial, `~` noisy, `SUSPECT`: its
    training failed the sanity check, `‡`: its precision emulated) or its status."""
    if cell[col.status] in labels.STATUS_TEXT:
        return labels.STATUS_TEXT[cell[col.status]]
    text = f"{cell[col.throughput]:.1f}"
    if cell.get(col.std) == cell.get(col.std) and cell.get(col.n, 0) > 1:
        text += f" ± {cell[col.std]:.1f}"
    if cell[col.status] == "partial":
        text += f" * ({int(cell[col.n])}/{int(cell[col.repeats])})"  # floats when read back with N/A cells
    if bool(cell.get(col.noisy, False)):
        text += " ~"
    if cell.get(col.sanity) == sanity.SUSPECT:
        text += " " + labels.SANITY_TEXT[sanity.SUSPECT]
    if cell.get(col.python_env) == "site":
        text += " " + labels.SITE_ENV_MARK
    if emulated_pairs and (cell.get(col.framework), cell.get(col.precision)) in emulated_pairs:
        text += " " + labels.EMULATED_MARK
    return text


def pivot(cells: pd.DataFrame, emulated_pairs: frozenset = frozenset()) -> list[tuple[str, pd.DataFrame]]:
    """One framework-by-scale table per model/batch/precision/data."""
    out = []
    for (model, batch, precision, data), group in cells.groupby(
        [col.model, col.batch, col.precision, col.data], sort=True
    ):
        group = group.assign(
            row=[labels.scale_with_caict(s, st) for s, st in zip(group[col.scale], group[col.strategy], strict=True)],
            order=[labels.devices(s) for s in group[col.scale]],
            text=[cell_text(c, emulated_pairs) for _, c in group.iterrows()],
        ).sort_values(["order", "row"])
        table = group.pivot_table(index="row", columns=col.framework, values="text", aggfunc="first", sort=False)
        table.index.name = col.scale
        title = f"{labels.model_title(model)}, {labels.setup(batch, precision, data)} ({labels.unit(model)})"
        out.append((title, table.fillna("")))
    return out


def real_vs_synthetic(cells: pd.DataFrame) -> pd.DataFrame:
    """Each real-data cell with a number beside its synthetic twin: ratio and data-wait share."""
    real = real_data_pairs(cells)
    if real.empty:
        return pd.DataFrame()
    return pd.DataFrame(
        {
            col.model: real[col.model],
            col.framework: real[col.framework],
            col.scale: [
                labels.scale_with_caict(s, st) for s, st in zip(real[col.scale], real[col.strategy], strict=True)
            ],
            col.batch: real[col.batch],
            col.precision: real[col.precision],
            "synthetic": real["synthetic_throughput"].round(1),
            "real": real[col.throughput].round(1),
            "real / synthetic": real[col.real_vs_synthetic].round(3),
            "data wait": real[col.data_wait_fraction].map(lambda w: f"{w:.1%}" if w == w else ""),
        }
    )


def markdown(cells: pd.DataFrame, protocol: dict, emulated_pairs: frozenset = frozenset()) -> str:
    """cells.md; `emulated_pairs`: the (framework, precision) pairs that ran emulated (`emulated`)."""
    cells = labels.with_training_in_strategy(cells)
    lines = [
        "# dlbench results",
        "",
        f"Protocol `{protocol['preset']}`: {protocol['warmup_steps']} warm-up steps, "
        f"{protocol['measured_steps']} measured steps, {protocol['repeats']} repeats, "
        f"statistic: {protocol['statistic']} (± sample std across repeats; * = not all repeats "
        "produced a number; ~ = noisy, CV above threshold; SUSPECT = failed the sanity check, below).",
        "",
    ]
    if col.python_env in cells and (cells[col.python_env] == "site").any():
        lines += [f"{labels.SITE_ENV_MARK} = {labels.SITE_ENV_TEXT} (run.python; environment.json lists it).", ""]
    for fw, precision in sorted(emulated_pairs):
        option = capabilities(fw).emulated_precisions[precision]
        lines += [
            f"{labels.EMULATED_MARK} = {labels.framework_label(fw)} {precision} {labels.EMULATED_TEXT} "
            f"(framework_options.{fw}.{option}; each run's header records it in framework.options).",
            "",
        ]
    for title, table in pivot(cells, emulated_pairs):
        lines += [f"## {title}", "", table.to_markdown(), ""]
    data = real_vs_synthetic(cells)
    if not data.empty:
        lines += ["## Synthetic vs real data", "", data.to_markdown(index=False), ""]
    lines += sanity_lines(cells) + convergence_lines(cells) + memory_lines(cells) + pipeline_lines(cells)
    energy = efficiency.energy_table(cells)
    if energy is not None:
        lines += ["## Energy per sample and MFU", "", energy.to_markdown(index=False), ""]
    elif efficiency.not_measured_note(cells):
        lines += [efficiency.not_measured_note(cells), ""]
    failed = cells[cells[col.status] != "ok"]
    if not failed.empty:
        lines += ["## Cells without a full set of numbers", ""]
        for _, c in failed.iterrows():
            lines.append(
                f"- {c[col.framework]} {c[col.model]} bs{c[col.batch]} {c[col.scale]} {c[col.strategy]}: "
                f"{labels.status_label(c[col.status], unknown=str)} — {c[col.reason]}"
            )
        lines.append("")
    return "\n".join(lines)


def convergence_lines(cells: pd.DataFrame) -> list[str]:
    """The Markdown section comparing frameworks' losses where cells train the same model alike."""
    if col.convergence not in cells or not cells[col.convergence].isin(losses.COMPARED).any():
        return []
    judged = cells[cells[col.convergence].isin(losses.COMPARED)]
    slower = judged[judged[col.convergence] == losses.SLOWER]
    undecided = (judged[col.convergence] == losses.INCONCLUSIVE).sum()
    summary = f"{len(slower)} of {len(judged)} compared cells train slower" + (
        f"; {undecided} inconclusive (the gap's 95% CI crosses the tolerance)." if undecided else "."
    )
    lines = ["## Convergence across frameworks", "", summary, ""]
    for _, c in judged.iterrows():
        where = f"{c[col.framework]} {c[col.model]} bs{c[col.batch]} {c[col.scale]} {c[col.strategy]} {c[col.data]}"
        lines.append(f"- {where}: " + c[col.convergence_reason])
    return [*lines, ""]


def _measured(cells: pd.DataFrame, column: str) -> pd.DataFrame:
    """The cells with a value in `column` (none where the table lacks it)."""
    return cells[cells[column].notna()] if column in cells else cells.iloc[0:0]


def _where(shown: pd.DataFrame) -> dict:
    """The tables' first columns below: each cell's framework, model, precision, data and
    batch; its scale; its strategy."""
    names = [
        f"{c[col.framework]} {c[col.model]} {c[col.precision]} {c[col.data]} bs{c[col.batch]}"
        for _, c in shown.iterrows()
    ]
    return {"cell": names, col.scale: shown[col.scale], col.strategy: shown[col.strategy]}


def memory_lines(cells: pd.DataFrame) -> list[str]:
    """The Markdown table of each cell's peak memory per rank (dlbench.analysis.memory)."""
    shown = _measured(cells, col.peak_memory_gib)
    if shown.empty:
        return []
    table = pd.DataFrame(
        {
            **_where(shown),
            "GiB per rank": shown[col.peak_memory_gib].round(3),
            **(
                {"estimated": shown[col.memory_estimate_gib].round(3)}
                if col.memory_estimate_gib in shown and shown[col.memory_estimate_gib].notna().any()
                else {}
            ),
            **(
                {"compiler's": shown[col.compiled_estimate_gib].round(3)}
                if col.compiled_estimate_gib in shown and shown[col.compiled_estimate_gib].notna().any()
                else {}
            ),
            "of the limit": shown[col.memory_share].map(lambda v: f"{v:.1%}" if v == v else ""),
            "what": shown[col.memory_basis],
        }
    )
    return ["## Peak memory per rank", "", table.to_markdown(index=False), ""]


def pipeline_lines(cells: pd.DataFrame) -> list[str]:
    """The Markdown table of the pipeline cells (dlbench.analysis.pipeline): the measured bubble
    beside the schedule's theory, each stage rank's bubble and peak (its first finished repeat)."""
    shown = _measured(cells, col.bubble_fraction)
    if shown.empty:
        return []
    table = pd.DataFrame(
        {
            **_where(shown),
            "bubble measured": shown[col.bubble_fraction].round(3),
            "theory": shown[col.bubble_theory].round(3),
            "per rank": shown[col.stage_bubbles],
            "peak GiB per rank": shown[col.stage_peaks_gib],
        }
    )
    note = (
        "Measured: the share of the schedule's time that the least idle rank (the stage that sets the pace) "
        "did not compute, mean over the measured steps; theory: the schedule's formula for equal stages "
        "(docs/frameworks/llm.md, Pipeline parallelism). The strategy names the schedule and micro-batches."
    )
    return ["## Pipeline bubbles", "", note, "", table.to_markdown(index=False), ""]


def sanity_lines(cells: pd.DataFrame) -> list[str]:
    """The Markdown section that lists the cells whose training failed the sanity check, and why."""
    if col.sanity not in cells:
        return []
    judged = cells[cells[col.sanity].isin([sanity.PASS, sanity.SUSPECT])]
    if judged.empty:
        return []
    suspect = judged[judged[col.sanity] == sanity.SUSPECT]
    passing = f"{len(judged) - len(suspect)} of {len(judged)} cells pass ({labels.SANITY_MEANING})."
    lines = ["## Sanity", "", passing, ""]
    for _, c in suspect.iterrows():
        lines.append(
            f"- {c[col.framework]} {c[col.model]} bs{c[col.batch]} {c[col.scale]} {c[col.strategy]} {c[col.data]}: "
            + labels.sanity_label(c[col.sanity], c[col.sanity_reason])
        )
    return [*lines, ""] if len(suspect) else lines
