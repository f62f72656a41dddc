"""Tables for people: cells.csv → Markdown (one table per model/batch/precision/data)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dlbench import labels
from dlbench.analysis import adaptive, efficiency, losses, sanity
from dlbench.analysis.aggregate import cells_table, real_data_pairs, runs_table
from dlbench.planning.grid import Grid
from dlbench.planning.schema import settings


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
    per_sample = cells["model"].map(flops).astype(float)
    cells["train_gflops_per_sample"] = per_sample / 1e9
    cells["tflops"] = cells["throughput"] * per_sample / 1e12
    # The per-device peak: run.peak_tflops, else the GPU's dense peak for the precision (dlbench.analysis.efficiency).
    cells["peak_tflops"], cells["peak_basis"] = efficiency.mfu_basis(cells, peak_tflops)
    cells["mfu"] = cells["tflops"] / (cells["peak_tflops"] * cells["devices"])
    return cells


def csv_bytes(table: pd.DataFrame) -> bytes:
    """The one way tables are written, so that the audit can compare bytes."""
    return table.to_csv(index=False, lineterminator="\n").encode()


def cell_text(cell: pd.Series) -> str:
    """A cell as a person reads it: `123.4 ± 5.6` (marks: `*` partial, `~` noisy, `SUSPECT`: its
    training failed the sanity check) or its status."""
    if cell["status"] in labels.STATUS_TEXT:
        return labels.STATUS_TEXT[cell["status"]]
    text = f"{cell['throughput']:.1f}"
    if cell.get("std") == cell.get("std") and cell.get("n", 0) > 1:
        text += f" ± {cell['std']:.1f}"
    if cell["status"] == "partial":
        text += f" * ({int(cell['n'])}/{int(cell['repeats'])})"  # floats when read back with N/A cells
    if bool(cell.get("noisy", False)):
        text += " ~"
    if cell.get("sanity") == sanity.SUSPECT:
        text += " " + labels.SANITY_TEXT[sanity.SUSPECT]
    if cell.get("python_env") == "site":
        text += " " + labels.SITE_ENV_MARK
    return text


def pivot(cells: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """One framework-by-scale table per model/batch/precision/data."""
    out = []
    for (model, batch, precision, data), group in cells.groupby(["model", "batch", "precision", "data"], sort=True):
        group = group.assign(
            row=[labels.scale_with_caict(s, st) for s, st in zip(group["scale"], group["strategy"], strict=True)],
            order=[labels.devices(s) for s in group["scale"]],
            text=[cell_text(c) for _, c in group.iterrows()],
        ).sort_values(["order", "row"])
        table = group.pivot_table(index="row", columns="framework", values="text", aggfunc="first", sort=False)
        table.index.name = "scale"
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
            "model": real["model"],
            "framework": real["framework"],
            "scale": [labels.scale_with_caict(s, st) for s, st in zip(real["scale"], real["strategy"], strict=True)],
            "batch": real["batch"],
            "precision": real["precision"],
            "synthetic": real["synthetic_throughput"].round(1),
            "real": real["throughput"].round(1),
            "real / synthetic": real["real_vs_synthetic"].round(3),
            "data wait": real["data_wait_fraction"].map(lambda w: f"{w:.1%}" if w == w else ""),
        }
    )


def markdown(cells: pd.DataFrame, protocol: dict) -> str:
    lines = [
        "# dlbench results",
        "",
        f"Protocol `{protocol['preset']}`: {protocol['warmup_steps']} warm-up steps, "
        f"{protocol['measured_steps']} measured steps, {protocol['repeats']} repeats, "
        f"statistic: {protocol['statistic']} (± sample std across repeats; * = not all repeats "
        "produced a number; ~ = noisy, CV above threshold; SUSPECT = failed the sanity check, below).",
        "",
    ]
    if "python_env" in cells and (cells["python_env"] == "site").any():
        lines += [f"{labels.SITE_ENV_MARK} = {labels.SITE_ENV_TEXT} (run.python; environment.json lists it).", ""]
    for title, table in pivot(cells):
        lines += [f"## {title}", "", table.to_markdown(), ""]
    data = real_vs_synthetic(cells)
    if not data.empty:
        lines += ["## Synthetic vs real data", "", data.to_markdown(index=False), ""]
    lines += sanity_lines(cells) + convergence_lines(cells) + memory_lines(cells)
    energy = efficiency.energy_table(cells)
    if energy is not None:
        lines += ["## Energy per sample and MFU", "", energy.to_markdown(index=False), ""]
    elif efficiency.not_measured_note(cells):
        lines += [efficiency.not_measured_note(cells), ""]
    failed = cells[cells["status"] != "ok"]
    if not failed.empty:
        lines += ["## Cells without a full set of numbers", ""]
        for _, c in failed.iterrows():
            lines.append(
                f"- {c['framework']} {c['model']} bs{c['batch']} {c['scale']} {c['strategy']}: "
                f"{labels.status_label(c['status'], unknown=str)} — {c['reason']}"
            )
        lines.append("")
    return "\n".join(lines)


def convergence_lines(cells: pd.DataFrame) -> list[str]:
    """The Markdown section comparing frameworks' losses where cells train the same model alike."""
    if "convergence" not in cells or not cells["convergence"].isin(losses.COMPARED).any():
        return []
    judged = cells[cells["convergence"].isin(losses.COMPARED)]
    slower = judged[judged["convergence"] == losses.SLOWER]
    lines = ["## Convergence across frameworks", "", f"{len(slower)} of {len(judged)} compared cells train slower.", ""]
    for _, c in judged.iterrows():
        lines.append(f"- {c['framework']} {c['model']} bs{c['batch']} {c['scale']} {c['strategy']} {c['data']}: "
                     + c["convergence_reason"])  # fmt: skip
    return [*lines, ""]


def memory_lines(cells: pd.DataFrame) -> list[str]:
    """The Markdown table of each cell's peak memory per rank (dlbench.analysis.memory)."""
    if "peak_memory_gib" not in cells or not cells["peak_memory_gib"].notna().any():
        return []
    shown = cells[cells["peak_memory_gib"].notna()]
    table = pd.DataFrame(
        {
            "cell": [
                f"{c['framework']} {c['model']} {c['precision']} {c['data']} bs{c['batch']}"
                for _, c in shown.iterrows()
            ],
            "scale": shown["scale"],
            "strategy": shown["strategy"],
            "GiB per rank": shown["peak_memory_gib"].round(3),
            "of the limit": shown["memory_share"].map(lambda v: f"{v:.1%}" if v == v else ""),
            "what": shown["memory_basis"],
        }
    )
    return ["## Peak memory per rank", "", table.to_markdown(index=False), ""]


def sanity_lines(cells: pd.DataFrame) -> list[str]:
    """The Markdown section that lists the cells whose training failed the sanity check, and why."""
    if "sanity" not in cells:
        return []
    judged = cells[cells["sanity"].isin([sanity.PASS, sanity.SUSPECT])]
    if judged.empty:
        return []
    suspect = judged[judged["sanity"] == sanity.SUSPECT]
    passing = f"{len(judged) - len(suspect)} of {len(judged)} cells pass ({labels.SANITY_MEANING})."
    lines = ["## Sanity", "", passing, ""]
    for _, c in suspect.iterrows():
        lines.append(
            f"- {c['framework']} {c['model']} bs{c['batch']} {c['scale']} {c['strategy']} {c['data']}: "
            + labels.sanity_label(c["sanity"], c["sanity_reason"])
        )
    return [*lines, ""] if len(suspect) else lines
