"""A CAICT-sized campaign made without training: CAICT 2020's full grid as first shipped (every
model on both data kinds and every batch; config/grids/caict2020.yaml now plans only the seed's
cells), with JAX added to make five frameworks (5 frameworks x 3 models x
3 batches x 2 data x 4 scales = 360 cells, 720 runs, ~5,000 rank logs), every planned run's rank
logs written through the one step-log writer with full headers. Step times are made up but
shaped like real ones: some runs trend or have two modes (the stability check flags them), a few
run out of memory or time out, real data is slower than synthetic."""

from __future__ import annotations

import copy
import math
import random
from pathlib import Path

from dlbench.coords import RunCoords
from dlbench.planning.config import checked_grid
from dlbench.planning.grid import Grid
from dlbench.steplog import StepLogWriter, rank_log_name
from tests.test_report import provenance

VERSIONS = {"pytorch": "2.5.1", "tensorflow": "2.18.0", "mxnet": "1.9.1", "jax": "0.4.38"}
PARAMS = {"resnet50": 25557032, "vgg16": 138357544, "bert_base": 110106428}
# Per model: the single-device step time (s) at batch 64, and the batch `max` resolved to.
BASE_STEP = {"resnet50": 0.20, "vgg16": 0.35, "bert_base": 0.25}
MAX_BATCH = {"resnet50": 256, "vgg16": 128, "bert_base": 96}
FRAMEWORK_SPEED = {"pytorch": 1.0, "tensorflow": 1.08, "mxnet": 1.15, "jax": 0.95}


# A report at scale: 5 frameworks x 3 models x 3 batches x 2 data x 4 scales.
CAICT_SIZED = {
    "grid": {
        "frameworks": ["tensorflow", "pytorch", "mxnet", "oneflow", "jax"],
        "models": ["resnet50", "vgg16", "bert_base"],
        "batch_per_device": [1, 64, "max"],
        "data": ["real", "synthetic"],
        "precision": ["fp32"],
        "scales": ["1x1", "1x4", "2x4", "4x4"],
        "strategies": {
            "tensorflow": ["multi_worker_mirrored"],
            "pytorch": ["ddp"],
            "mxnet": ["dist_sync"],
            "oneflow": ["ddp"],
            "jax": ["sharded"],
        },
    },
    "protocol": {"preset": "caict2020"},
    "run": {"device": "cuda", "launcher": "srun", "threads": 8, "time_limit_s": 3600, "mem_mb": 64000},
}


def caict_config(measured_steps: int = 12) -> dict:
    """The CAICT-sized grid, over a short window."""
    config = copy.deepcopy(CAICT_SIZED)
    config["protocol"].update({"warmup_steps": 2, "measured_steps": measured_steps})
    return config


def _header(coords: RunCoords, rank: int, batch: int, protocol: dict) -> dict:
    nodes = int(coords.scale.split("x")[0])
    return {
        "run": coords.as_dict(),
        "protocol": {k: protocol[k] for k in ("preset", "warmup_steps", "measured_steps", "statistic")},
        "batch": batch,
        "image_size": 0 if coords.model == "bert_base" else 224,
        "seq_len": 128 if coords.model == "bert_base" else 0,
        "threads": 8,
        "device": "cuda",
        "rank": rank,
        "world_size": coords.devices,
        "node": f"gpu{rank * nodes // coords.devices:02d}",
        "start_time": f"2026-01-02T{3 + coords.repeat:02d}:04:05.000+00:00",
        "python": "3.11.7",
        "framework": {
            "name": coords.framework,
            "version": VERSIONS[coords.framework],
            "trainable_params": PARAMS[coords.model],
        },
        "provenance": provenance(coords.framework, "Test Xeon @ 2.4GHz", 64, 512.0),
    }


def _outcome(coords: RunCoords, index: int) -> tuple[str, str | None]:
    if coords.model == "vgg16" and coords.batch == "max" and coords.devices == 16 and coords.framework == "mxnet":
        return "oom", "out of memory: tried to allocate 4.0 GiB"
    if (
        coords.framework == "tensorflow"
        and coords.model == "bert_base"
        and coords.scale == "4x4"
        and coords.repeat == 3
    ):
        return "timeout", "run exceeded its time limit of 3600 s"
    return "ok", None


def _step_times(coords: RunCoords, batch: int, steps: int, rng: random.Random, index: int) -> list[float]:
    base = BASE_STEP[coords.model] * FRAMEWORK_SPEED[coords.framework] * (0.05 + batch / 64)
    base *= 1.0 + 0.04 * math.log2(coords.devices) + (0.15 if coords.data == "real" else 0.0)
    kind = index % 11  # about one run in eleven trends, one in eleven has two modes
    times = []
    for i in range(steps):
        t = base * rng.gauss(1.0, 0.01)
        if kind == 3:
            t *= 1.0 + 0.25 * i / steps
        elif kind == 7 and i % 3 == 0:
            t *= 1.4
        times.append(t)
    return times


def write_campaign(root: Path, config: dict) -> Grid:
    """Every planned run's rank logs under `root` (the pipeline's layout); the planned grid."""
    experiment = checked_grid(config)
    protocol = experiment.protocol
    rng = random.Random(29)
    warmup, measured = protocol["warmup_steps"], protocol["measured_steps"]
    for index, coords in enumerate(experiment.runs):
        batch = MAX_BATCH[coords.model] if coords.batch == "max" else int(coords.batch)
        status, error = _outcome(coords, index)
        durations = _step_times(coords, batch, warmup + measured, rng, index)
        for rank in range(coords.devices):
            writer = StepLogWriter(root / coords.run_dir / rank_log_name(rank), _header(coords, rank, batch, protocol))
            t, steps = 1000.0 + 50 * index, []
            for i, d in enumerate(durations if status == "ok" else durations[:1]):
                loss = 7.0 * math.exp(-0.02 * i) + rng.uniform(0, 0.01)
                steps.append(
                    {
                        "i": i,
                        "phase": "warmup" if i < warmup else "measure",
                        "t_start": t,
                        "t_end": t + d * (1.0 + 0.002 * rank),
                        "samples": batch,
                        "loss": loss,
                    }
                )
                t += d
            writer.write_steps(steps)
            writer.close(status, error)
    return experiment
