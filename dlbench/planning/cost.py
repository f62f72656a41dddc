"""What a grid will cost before it runs: device-hours and the disk its raw logs will take.

A run's time is (warm-up + measured steps) × its step time + STARTUP_S, held on every device
of its scale (a 2x4 run holds 8). The step time is, where a committed campaign (campaigns/)
measured the same cell at the same sizes on the same device type (run.gpu_type in its step
logs' device name), the median of its runs' step times; otherwise the cell's training FLOPs
(its model kind's count, dlbench.model_kinds) per device and step over an assumed share of the
device's dense peak (the kind's assumed_mfu of dlbench.devices' peak or of run.peak_tflops), or
on a CPU without run.peak_tflops an assumed throughput per thread (CPU_GFLOPS_PER_THREAD). A
cell with neither has no estimate, said per cell. Communication, input pipelines and the batch search are not modelled.

Stdlib only and cheap (planning runs in the analysis environment and plans 10 000 runs in well
under a second): one estimate per distinct cell, the campaigns' runs.csv read once with `csv`.
"""

from __future__ import annotations

import csv
import functools
import re
import statistics
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from operator import attrgetter
from pathlib import Path

from dlbench import devices, models
from dlbench.coords import CellKey, Scale
from dlbench.models import kind_of
from dlbench.planning.grid import Grid, planned_sizes
from dlbench.runners import layout
from dlbench.steplog import read_steplog

# On a CPU without run.peak_tflops: the training FLOP/s one thread of a rank achieves, assumed.
# The default grid's first repeats on a 2-core host (2026-11-27) did 30-45 (PyTorch, TensorFlow,
# MXNet: ResNet-50, PyTorch: llama_small) and 12 (JAX: llama_small) GFLOP/s a thread.
CPU_GFLOPS_PER_THREAD = 30.0
# A run's time beyond its steps (interpreter and framework start, model build, the first step's
# compilation), by run.device: launch.json's wall_seconds less the steps at their median time,
# the median over the committed GPU campaigns' 15 runs (8.6-100 s) and over the default grid's 39
# CPU runs on a shared 2-core host (2-21 s).
# The GPU a CUDA grid without run.gpu_type is costed as: today's most common training GPU.
ASSUMED_GPU = "h100"
STARTUP_S = {"cuda": 20.0, "cpu": 7.0}
# The raw logs of a run (results/runs/<run>/): per step-log writer a header, a line per step and
# a footer (bytes by run.device), and the run's launch.json. Measured: on CUDA the committed H100
# campaign's logs (a header carries nvidia-smi -q: 13.1-13.4 kB; 162-171 bytes a step; the
# footer's energy record), on CPUs the default grid's (1.75-2.5 kB; 158 bytes; 343 bytes).
LOG_BYTES = {"cuda": (13_300, 167, 450), "cpu": (2_100, 158, 343)}
RUN_RECORD_BYTES = 150
# Recomputation under activation checkpointing: `full` runs each block's forward again (8 N
# instead of 6 N a token); `selective` recomputes only elementwise work.
CHECKPOINTING_FACTOR = {"none": 1.0, "selective": 1.0, "full": 4 / 3}
HOUR = 3600.0
CELL_FIELDS = tuple(CellKey.__dataclass_fields__)
CAMPAIGN_RUNS = "results/tables/runs.csv"
# The runs.csv columns read here besides the cell's (workflow/schemas/runs.schema.yaml; analysis's
# `col` names them, but planning comes before analysis and reads the campaigns with stdlib csv).
STATUS, STEP_TIME, DEVICE_NAME, LOG_FILES, DEVICES = (
    "status",
    "step_time_median_s",
    "device_name",
    "log_files",
    "devices",
)
SIZE_FIELDS = ("image_size", "seq_len")


@dataclass(frozen=True)
class CellCost:
    """One cell's runs: the step time they are estimated at and how (None: no estimate)."""

    cell: CellKey
    runs: int
    step_s: float | None
    basis: str
    device_hours: float
    log_bytes: int


@dataclass(frozen=True)
class CostEstimate:
    device_hours: float  # of the cells with an estimate
    unit: str  # "GPU-hours" on CUDA, "CPU-hours" on CPUs (rank × hours)
    device: str  # run.gpu_type, else run.device
    kind: str  # run.device
    log_bytes: int
    cells: tuple[CellCost, ...]

    @property
    def unestimated_runs(self) -> int:
        return sum(c.runs for c in self.cells if c.step_s is None)

    def summary_lines(self) -> list[str]:
        """The plan summary's lines: the total with its bases, and what has no estimate."""
        by_basis = Counter()
        for cost in self.cells:
            if cost.step_s is not None:
                by_basis[cost.basis] += 1
        bases = ", ".join(f"{n} cell{'s' * (n != 1)} {basis}" for basis, n in sorted(by_basis.items()))
        lines = [
            f"estimated {hours_text(self.device_hours)} {self.unit} ({self.device}: {bases or 'no cell estimated'}),"
            f" raw logs ≈ {size_text(self.log_bytes)}"
        ]
        lines.append(
            f"  a run: (warm-up + measured steps) × step time + {STARTUP_S[self.kind]:g} s start-up,"
            " on each of its devices"
        )
        missing = Counter(c.basis for c in self.cells if c.step_s is None)
        for basis, n in sorted(missing.items())[:2]:
            lines.append(f"  {n} cell{'s' * (n != 1)} not counted: {basis}")
        return lines


def hours_text(hours: float) -> str:
    """Three significant figures below 100 hours (a small grid's 0.0823), else tenths."""
    return f"{hours:.3g}" if hours < 100 else f"{hours:.1f}"


def size_text(size: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size / 1024:.0f} KiB"


@dataclass(frozen=True)
class Device:
    """What a run trains on, from config `run`."""

    kind: str  # run.device: cpu or cuda
    gpu_type: str
    peak_tflops: float  # run.peak_tflops, 0: unknown
    threads: int

    @classmethod
    def of(cls, run: dict) -> Device:
        return cls(
            run.get("device", "cpu"), str(run.get("gpu_type") or ""), float(run.get("peak_tflops") or 0), run["threads"]
        )

    @property
    def label(self) -> str:
        return self.gpu_type or self.kind

    def names(self, device_name: str) -> bool:
        """Whether a step log's device name is this type: every part of run.gpu_type in it
        (h100 in "NVIDIA H100 80GB HBM3"). A CPU names no type: any host's CPU reads "cpu"."""
        if self.kind == "cpu" or not self.gpu_type:
            return False
        return all(part in device_name.upper() for part in re.split(r"[-_.]", self.gpu_type.upper()) if part)


def estimate(grid: Grid, config: dict, repo: str | Path) -> CostEstimate:
    """The device-hours and raw-log bytes of `grid`'s runs, one estimate per distinct cell."""
    run = config["run"]
    device = Device.of(run)
    steps = grid.protocol["warmup_steps"] + grid.protocol["measured_steps"]
    campaigns = str(Path(repo).resolve())
    runs_per_cell = Counter(map(attrgetter(*CELL_FIELDS), grid.runs))
    cells = []
    for fields, runs in runs_per_cell.items():
        cell = CellKey(*fields)
        step_s, basis = cell_step(cell, planned_sizes(run, cell.model), device, campaigns)
        run_s = None if step_s is None else steps * step_s + STARTUP_S[device.kind]
        hours = 0.0 if run_s is None else runs * run_s * Scale.parse(cell.scale).devices / HOUR
        cells.append(CellCost(cell, runs, step_s, basis, hours, runs * run_log_bytes(cell, steps, device)))
    unit = "CPU-hours" if device.kind == "cpu" else "GPU-hours"
    total = sum(c.device_hours for c in cells)
    return CostEstimate(total, unit, device.label, device.kind, sum(c.log_bytes for c in cells), tuple(cells))


def run_log_bytes(cell: CellKey, steps: int, device: Device) -> int:
    """One run's raw logs: each step-log writer's header, steps and footer, and launch.json."""
    writers = layout(cell.framework, cell.strategy, cell.scale).step_logs
    header, step, footer = LOG_BYTES[device.kind]
    per_log = header + steps * step + footer
    return writers * per_log + RUN_RECORD_BYTES


def budget_problem(cost: CostEstimate, config: dict) -> str | None:
    """The message refusing a grid estimated over run.max_device_hours (None: within it, or unset)."""
    limit = config.get("run", {}).get("max_device_hours")
    if limit is None or cost.device_hours <= limit:
        return None
    at_least = f"at least {hours_text(cost.device_hours)}" if cost.unestimated_runs else hours_text(cost.device_hours)
    return (
        f"run.max_device_hours: the grid is estimated at {at_least} {cost.unit}, over the limit"
        f" of {limit:g}: run fewer cells, repeats or steps, or raise the limit"
    )


@functools.cache
def cell_step(cell: CellKey, sizes: tuple[int, int], device: Device, repo: str) -> tuple[float | None, str]:
    """One step's seconds for `cell` and how it was estimated: a campaign's measurement where one
    has the cell on this device type, else its FLOPs (None: no estimate, and why)."""
    measured = campaign_step_times(repo).get((*_cell_fields(cell), *sizes))
    for campaign, device_name, step_times in measured or ():
        if device.names(device_name):
            return statistics.median(step_times), f"from campaigns/{campaign}'s step times"
    return flops_step(cell, sizes, device)


def _cell_fields(cell: CellKey) -> tuple[str, ...]:
    return tuple(str(getattr(cell, name)) for name in CELL_FIELDS)


def flops_step(cell: CellKey, sizes: tuple[int, int], device: Device) -> tuple[float | None, str]:
    """A step's seconds from the FLOPs one device trains a step at an assumed rate."""
    if not cell.batch.isdigit():
        return None, f"no estimate: batch {cell.batch} is found at run time"
    per_device = train_flops_per_sample(cell.model, *sizes) * int(cell.batch) * cell.grad_accum
    per_device *= CHECKPOINTING_FACTOR[cell.activation_checkpointing]
    mfu = kind_of(cell.model).assumed_mfu
    if device.peak_tflops:
        return per_device / (device.peak_tflops * 1e12 * mfu), f"at {mfu:.0%} assumed MFU of run.peak_tflops"
    if device.kind == "cpu":
        # A rank's threads (run.threads split over a node's ranks) train its devices' batches.
        ranks = layout(cell.framework, cell.strategy, cell.scale)
        threads = max(1, device.threads // ranks.tasks_per_node)
        seconds = per_device * ranks.local_devices / (threads * CPU_GFLOPS_PER_THREAD * 1e9)
        return seconds, f"at an assumed {CPU_GFLOPS_PER_THREAD:g} GFLOP/s per CPU thread"
    # An unset run.gpu_type (any GPU the site gives) is costed as the reference GPU, and says so.
    found = devices.peak(device.gpu_type or ASSUMED_GPU, cell.precision)
    if found is None:
        return None, f"no estimate: no known peak for run.gpu_type {device.gpu_type!r}: set run.peak_tflops"
    peak_tflops = found[0]
    named = "" if device.gpu_type else f" (run.gpu_type unset: an {ASSUMED_GPU.upper()}'s)"
    return per_device / (peak_tflops * 1e12 * mfu), f"at {mfu:.0%} assumed MFU of {peak_tflops:g} TFLOP/s{named}"


@functools.cache
def train_flops_per_sample(model: str, image_size: int, seq_len: int) -> float:
    """Training FLOPs (forward + backward) of one example of a batch: an image, a sequence, or
    for an LLM the sequence of tokens (its kind's count per token × seq_len)."""
    per_sample = models.train_flops_per_sample(model, (image_size, seq_len))
    return per_sample * models.samples_per_example(model, seq_len)


@functools.cache
def campaign_step_times(repo: str) -> dict[tuple, list[tuple[str, str, list[float]]]]:
    """Per cell and sizes: (campaign, device name, its ok runs' median step times) of every
    committed campaign that measured it."""
    found: dict[tuple, dict[tuple[str, str], list[float]]] = {}
    for table in sorted(Path(repo).glob(f"campaigns/*/{CAMPAIGN_RUNS}")):
        campaign = table.parents[2].name
        with table.open(newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                if row[STATUS] != "ok" or not row[STEP_TIME]:
                    continue
                key = (*_row_cell(row), *(int(float(row[name] or 0)) for name in SIZE_FIELDS))
                found.setdefault(key, {}).setdefault((campaign, row[DEVICE_NAME]), []).append(float(row[STEP_TIME]))
    # The latest campaign first: folder names end in their date.
    return {key: sorted(((c, d, t) for (c, d), t in by.items()), reverse=True) for key, by in found.items()}


UNSET_CELL = CellKey("", "", "", "", "", "", "")  # its training options at their defaults


def _row_cell(row: dict) -> tuple[str, ...]:
    """A runs.csv row's cell fields as text; a version-1 table has no training options: defaults."""
    return tuple(str(row.get(name) or getattr(UNSET_CELL, name)) for name in CELL_FIELDS)


def measured_device_hours(runs_table, root: str | Path = ".") -> float:
    """The device-hours a finished grid held: per run in runs.csv, from its first rank log's
    header start to the last footer's end (runs.csv has no wall-time column; window_s is the
    measured steps only), × its devices. A run whose logs have no footer counts to its last step."""
    hours = 0.0
    for files, run_devices in zip(runs_table[LOG_FILES], runs_table[DEVICES], strict=True):
        names = files.split(";") if isinstance(files, str) else []  # a run that never started has none
        seconds = _logged_seconds([Path(root) / name for name in names if name])
        hours += seconds * int(run_devices) / HOUR
    return hours


def _logged_seconds(paths: list[Path]) -> float:
    """First header start to last footer end over a run's rank logs (a rank without a footer:
    its start plus its steps' span)."""
    starts, ends = [], []
    for path in paths:
        log = read_steplog(path)
        if not log.header:
            continue
        start = datetime.fromisoformat(log.header["start_time"])
        starts.append(start)
        if log.footer and log.footer.get("end_time"):
            ends.append(datetime.fromisoformat(log.footer["end_time"]))
        elif log.steps:
            ends.append(start + timedelta(seconds=log.steps[-1]["t_end"] - log.steps[0]["t_start"]))
    return (max(ends) - min(starts)).total_seconds() if starts and ends else 0.0
