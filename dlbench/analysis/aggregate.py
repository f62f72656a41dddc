"""Step logs → per-run throughput → per-cell statistics, speedup and scaling efficiency.

The one reader of step logs after the runners (through `dlbench.steplog.read_steplog`).

Per run, global throughput = measured samples of all ranks ÷ the longest rank's measured
window (window = the steps after warm-up, from the first measured step's start to the
last one's end). Clocks of different processes are never compared, and no rank's number
is multiplied by the world size.
"""

from __future__ import annotations

import math
import os
import statistics
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

import pandas as pd

from dlbench import labels
from dlbench.analysis import efficiency, losses, memory, pipeline, sanity, stability, stats
from dlbench.analysis.columns import col, with_training_defaults
from dlbench.coords import CELL_FIELDS, RUN_FIELDS, CellKey, RunCoords, Scale
from dlbench.launch.record import slurm_verdict
from dlbench.provenance import sha256_file
from dlbench.runners import run_layout
from dlbench.steplog import StepLog, rank_log_name, read_steplog

# Worst first: the status a cell shows when no repeat produced a number.
FAILURE_ORDER = ("oom", "timeout", "cancelled", "failed", "killed", "invalid", "missing")


def summarize_run(coords: RunCoords, root: str | Path = ".", loss_tolerance: float | None = None) -> dict:
    """One row of runs.csv: status, throughput, sanity verdict and evidence for one run
    (`loss_tolerance`: the protocol's, dlbench.analysis.sanity; None: the schema's default)."""
    row = summarize_logs(coords, root, loss_tolerance)
    return with_slurm_outcome(row, Path(root) / coords.run_dir)


def with_slurm_outcome(row: dict, run_dir: Path) -> dict:
    """A run whose logs do not say 'ok': Slurm's verdict (in launch.json, from slurm.json) names
    what rank logs cannot -- a job cancelled, timed out or OOM-killed as a whole leaves logs
    without footers, or none. A rank's own 'oom'/'timeout' footer is more specific and stays."""
    if row[col.status] in ("ok", "oom", "timeout"):
        return row
    status, reason = slurm_verdict(run_dir)
    if status:
        row[col.status] = status
        row[col.reason] = "; ".join(r for r in (reason, row[col.reason]) if r)
    return row


def summarize_logs(coords: RunCoords, root: str | Path = ".", loss_tolerance: float | None = None) -> dict:
    """The run's row from its rank logs alone."""
    run_dir = Path(root) / coords.run_dir
    step_logs = run_layout(coords).step_logs
    row: dict = {
        **coords.as_dict(),
        col.devices: coords.devices,
        col.status: "ok",
        col.reason: "",
        col.throughput: math.nan,
    }
    logs: list[StepLog] = []
    problems: list[str] = []
    for rank in range(step_logs):
        path = run_dir / rank_log_name(rank)
        if not path.exists():
            problems.append(f"rank {rank}: no step log")
            continue
        log = read_steplog(path)
        logs.append(log)
        problems.extend(f"rank {rank}: {p}" for p in log.problems if not p.startswith("missing footer"))
    row[col.log_files] = ";".join(str(Path(coords.run_dir) / rank_log_name(r)) for r in range(step_logs))
    row[col.log_sha256] = ";".join(sha256_file(log.path) for log in logs)

    statuses = [log.status for log in logs]
    if problems:
        row[col.status] = "missing" if any("no step log" in p for p in problems) else "invalid"
        row[col.reason] = "; ".join(problems)
        return row
    failed = [s for s in statuses if s != "ok"]
    if failed:
        row[col.status] = min(failed, key=FAILURE_ORDER.index)
        row[col.reason] = "; ".join(
            f"rank {log.header['rank'] if log.header else '?'}: {log.status}"
            + (f": {log.footer['error']}" if log.footer and log.footer.get("error") else "")
            for log in logs
            if log.status != "ok"
        )
        return row

    measured = [log.measured_steps() for log in logs]
    if any(not steps for steps in measured):
        row.update(status="invalid", reason="a rank has no measured steps")
        return row
    row.update(_measurement(logs, measured))
    row.update(efficiency.run_energy(logs, row[col.measured_samples]), sync=logs[0].header.get("sync", "step"))
    row.update(memory.run_memory(logs, coords, root))
    row.update(pipeline.run_pipeline(logs))
    tolerance = sanity.loss_tolerance({"loss_tolerance": loss_tolerance})
    row.update(sanity.run_verdict(logs, coords.data, tolerance).columns())
    row.update(stability.run_columns(measured), start_time=logs[0].header.get("start_time", ""))
    row[losses.CURVE_COLUMN] = losses.run_curve(logs)  # to losses.csv (dlbench.analysis.derive)
    return row


def _measurement(logs: list[StepLog], measured: list[list[dict]]) -> dict:
    """Throughput and the evidence beside it, from ranks that all have measured steps."""
    header = logs[0].header
    windows = [steps[-1]["t_end"] - steps[0]["t_start"] for steps in measured]
    busy = sum(s["t_end"] - s["t_start"] for steps in measured for s in steps)
    waited = sum(s.get("data_wait", 0.0) for steps in measured for s in steps)
    samples = sum(s["samples"] for steps in measured for s in steps)
    first_losses = [s["loss"] for s in logs[0].steps if s.get("loss") is not None]
    return dict(
        throughput=stats.window_throughput(samples, max(windows)),
        window_s=max(windows),
        measured_samples=samples,
        measured_steps=len(measured[0]),
        warmup_steps=sum(1 for s in logs[0].steps if s["phase"] == "warmup"),
        step_time_median_s=statistics.median(s["t_end"] - s["t_start"] for s in measured[0]),
        # Share of the measured steps spent waiting for input (a starved pipeline shows here).
        data_wait_fraction=waited / busy if busy > 0 else math.nan,
        loss_first=first_losses[0] if first_losses else math.nan,
        loss_last=first_losses[-1] if first_losses else math.nan,
        framework_version=header["framework"].get("version", ""),
        nodes=";".join(sorted({log.header["node"] for log in logs})),
        image_size=header.get("image_size"),
        seq_len=header.get("seq_len"),
        trainable_params=header["framework"].get("trainable_params"),
        python_env=python_env(header),
    )


def python_env(header: dict) -> str:
    """`site` where the ranks ran in a site's own Python (run.python), else `lock`."""
    return "site" if (header.get("provenance") or {}).get("site_environment") else "lock"


def runs_table(
    runs: list[RunCoords], root: str | Path = ".", workers: int | None = None, loss_tolerance: float | None = None
) -> pd.DataFrame:
    """One row per run; large grids are read by one process per core (order kept)."""
    workers = workers or os.cpu_count() or 1
    summarize = partial(summarize_run, root=root, loss_tolerance=loss_tolerance)
    if workers > 1 and len(runs) >= 1000:
        with ProcessPoolExecutor(workers) as pool:
            rows = list(pool.map(summarize, runs, chunksize=200))
    else:
        rows = [summarize(c) for c in runs]
    df = pd.DataFrame(rows)
    return df if not df.empty else pd.DataFrame(columns=[*RUN_FIELDS, col.status, col.throughput])


def _cell_status(statuses: list[str], n_ok: int) -> str:
    if n_ok == len(statuses):
        return "ok"
    if n_ok > 0:
        return "partial"
    return min(statuses, key=lambda s: FAILURE_ORDER.index(s) if s in FAILURE_ORDER else len(FAILURE_ORDER))


def cells_table(
    runs: pd.DataFrame, statistic: str, unavailable: dict[CellKey, str] | None = None, noisy_cv: float = 0.1
) -> pd.DataFrame:
    """One row per cell: the preset's statistic across repeats, spread, speedup, efficiency."""
    rows = []
    runs = with_training_defaults(runs.copy())  # a table made before some options existed
    for key, group in runs.groupby(CELL_FIELDS, sort=True):
        ok = group[group[col.status] == "ok"][col.throughput].dropna().to_numpy()
        statuses = group[col.status].tolist()
        reasons = sorted({r for r in group[col.reason] if r})
        ci_low, ci_high = stats.bootstrap_ci(statistic, ok)
        rows.append(
            {
                **dict(zip(CELL_FIELDS, key, strict=True)),
                col.devices: Scale.parse(key[CELL_FIELDS.index(col.scale)]).devices,
                col.status: _cell_status(statuses, len(ok)),
                col.reason: " | ".join(reasons),
                col.statistic: statistic,
                col.throughput: stats.statistic(statistic, ok),
                col.n: len(ok),
                col.repeats: len(group),
                col.mean: stats.mean(ok),
                col.median: stats.median(ok),
                col.olympic_mean: stats.olympic_mean(ok),
                col.std: stats.std(ok),
                col.cv: stats.cv(ok),
                col.ci95_low: ci_low,
                col.ci95_high: ci_high,
                col.data_wait_fraction: _mean_of_ok(group, col.data_wait_fraction),
                col.python_env: "site" if "site" in set(group.get(col.python_env, ())) else "lock",
                **efficiency.cell_energy(group),
                **memory.cell_memory(group),
                **pipeline.cell_pipeline(group),
                **_cell_sanity(group),
            }
        )
    for cell, reason in (unavailable or {}).items():
        scale = Scale.parse(cell.scale)
        rows.append(
            {**cell.as_dict(), col.devices: scale.devices, col.status: "unavailable", col.reason: reason, col.n: 0}
        )
    cells = pd.DataFrame(rows)
    if cells.empty:
        return cells
    cells[col.noisy] = cells[col.cv] > noisy_cv
    return add_real_vs_synthetic(add_speedup(cells))


def add_real_vs_synthetic(cells: pd.DataFrame) -> pd.DataFrame:
    """real_vs_synthetic = a real-data cell's throughput ÷ the synthetic-data cell with the
    same other coordinates (below 1: the input pipeline costs throughput)."""
    keys = [f for f in CELL_FIELDS if f != col.data]
    synthetic = cells[cells[col.data] == "synthetic"][[*keys, col.throughput]].drop_duplicates(subset=keys)
    merged = cells.merge(synthetic.rename(columns={col.throughput: "synthetic_throughput"}), on=keys, how="left")
    ratio = merged[col.throughput] / merged["synthetic_throughput"]
    merged[col.real_vs_synthetic] = ratio.where(merged[col.data] == "real")
    return merged.drop(columns=["synthetic_throughput"])


def real_data_pairs(cells: pd.DataFrame) -> pd.DataFrame:
    """Real-data cells that have a number and a synthetic twin, with the twin's throughput
    (`synthetic_throughput`), in model/batch/precision/framework/devices order."""
    if col.real_vs_synthetic not in cells:
        return cells.iloc[0:0].assign(synthetic_throughput=[])
    real = cells[(cells[col.data] == "real") & cells[col.real_vs_synthetic].notna()]
    real = real.assign(synthetic_throughput=real[col.throughput] / real[col.real_vs_synthetic])
    return real.sort_values([col.model, col.batch, col.precision, col.framework, col.devices, col.strategy])


def _cell_sanity(group: pd.DataFrame) -> dict:
    """The cell's sanity columns from its runs' (dlbench.analysis.sanity.cell_sanity); its quarters'
    mean losses are the means over its repeats."""
    if col.sanity not in group:
        return {col.sanity: "", col.sanity_reason: ""}
    verdicts = [labels.text(v) for v in group[col.sanity]]
    verdict, reason = sanity.cell_sanity(verdicts, [labels.text(r) for r in group[col.sanity_reason]])
    return {
        col.sanity: verdict,
        col.sanity_reason: reason,
        col.loss_first_quarter: _mean_of_ok(group, col.loss_first_quarter),
        col.loss_last_quarter: _mean_of_ok(group, col.loss_last_quarter),
    }


def _mean_of_ok(group: pd.DataFrame, column: str) -> float:
    if column not in group:
        return math.nan
    values = group.loc[group[col.status] == "ok", column].dropna()
    return float(values.mean()) if len(values) else math.nan


def add_speedup(cells: pd.DataFrame) -> pd.DataFrame:
    """speedup = cell throughput ÷ the 1-device cell with the same other coordinates;
    efficiency = speedup ÷ devices."""
    # A pipeline's schedule and micro-batches belong to its strategy: one device has neither.
    base_keys = [f for f in CELL_FIELDS if f not in (col.scale, col.strategy, col.pp_schedule, col.pp_microbatches)]
    single = cells[cells[col.devices] == 1][[*base_keys, col.throughput]].rename(columns={col.throughput: "baseline"})
    single = single.drop_duplicates(subset=base_keys)
    merged = cells.merge(single, on=base_keys, how="left")
    merged[col.speedup] = merged[col.throughput] / merged["baseline"]
    merged[col.efficiency] = merged[col.speedup] / merged[col.devices]
    return merged.drop(columns=["baseline"])
