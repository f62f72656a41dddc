"""Run coordinates: the one definition of where a run sits in the experiment grid.

Paths, Snakemake wildcards, table keys and report labels are all derived from
`RunCoords`; nothing else parses run paths. Stdlib only: imported inside every
framework environment.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, fields, replace

# Every value that ends up in a path or a shell command matches one of these.
SAFE_NAME = r"[a-z][a-z0-9_]*"
SCALE_PATTERN = r"[1-9][0-9]*x[1-9][0-9]*"
BATCH_PATTERN = r"[1-9][0-9]*|max"

# Precisions (the grid's `precision`): fp32; amp, mixed precision (a 16-bit compute dtype beside
# float32 master weights: the framework's autocast or its sharding's policy); fp8, amp with the
# linear layers' matmuls in float8 (dynamic scaling), where the device has float8 matmuls.
PRECISIONS = ("fp32", "amp", "fp8")
# Those that compute in a 16-bit dtype beside float32 master weights (fp8: all but its float8 matmuls).
MIXED_PRECISIONS = ("amp", "fp8")

# How a step trains beyond its strategy: activation checkpointing (none: every activation kept
# for backward; selective: the matmuls' outputs kept, the rest recomputed; full: each block
# recomputed) and gradient accumulation (micro-batches per optimizer update).
ACTIVATION_CHECKPOINTING = ("none", "selective", "full")
NO_CHECKPOINTING, NO_ACCUMULATION = "none", 1
# A pipeline-parallel strategy's schedule (dlbench.pipelining.SCHEDULES) and the micro-batches
# its step splits the pipeline's batch into; "none" and 1 for every other strategy.
PIPELINE_SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b", "zero_bubble")
NO_PIPELINE, NO_PIPELINE_MICROBATCHES = "none", 1
# Their path form, a suffix of the strategy's segment: `fsdp+ac_full+ga4`, `pp+pp_1f1b_m4`;
# empty at the defaults, so a run at the defaults keeps the directory it has always had.
TRAINING_PATTERN = (
    r"(\+ac_(?:selective|full))?(\+ga(?:[2-9]|[1-9][0-9]+))?"
    r"(\+pp_(?:" + "|".join(PIPELINE_SCHEDULES) + r")_m[1-9][0-9]*)?"
)

# A run's place below results/runs/ (its directory) and logs/runs/ (its Snakemake job log).
RUN_PATH_TEMPLATE = "{framework}/{model}/{precision}/{data}/bs{batch}/{scale}/{strategy}{training}/rep{repeat}"
RUN_DIR_TEMPLATE = "results/runs/" + RUN_PATH_TEMPLATE
RUN_LOG_TEMPLATE = "logs/runs/" + RUN_PATH_TEMPLATE + ".log"

# A cell's profiled run (config `profile`): repeat 0, beside the measured repeats 1..n, a few
# steps under the framework's profiler; no table reads it (docs/report.md, Profiles).
PROFILE_REPEAT = 0

# The file Snakemake tracks per run (written by the launcher; raw rank logs sit beside it).
RUN_RECORD = "launch.json"
RUN_RECORD_TEMPLATE = RUN_DIR_TEMPLATE + "/" + RUN_RECORD

# Snakemake wildcard constraints, one per coordinate (used by common.smk).
WILDCARD_CONSTRAINTS = {
    "framework": SAFE_NAME,
    "model": SAFE_NAME,
    "precision": SAFE_NAME,
    "data": SAFE_NAME,
    "batch": BATCH_PATTERN,
    "scale": SCALE_PATTERN,
    "strategy": SAFE_NAME,
    "training": TRAINING_PATTERN,
    "repeat": r"[0-9]+",
    "device": r"cpu|cuda",
}

# A single-device run has no parallel strategy; this is its strategy name.
SINGLE_DEVICE = "single"


def training_suffix(
    activation_checkpointing: str,
    grad_accum: int,
    pp_schedule: str = NO_PIPELINE,
    pp_microbatches: int = NO_PIPELINE_MICROBATCHES,
) -> str:
    """The path form of a run's training options (TRAINING_PATTERN): empty at the defaults."""
    checkpointing = "" if activation_checkpointing == NO_CHECKPOINTING else f"+ac_{activation_checkpointing}"
    accumulation = "" if int(grad_accum) == NO_ACCUMULATION else f"+ga{grad_accum}"
    pipeline = "" if pp_schedule == NO_PIPELINE else f"+pp_{pp_schedule}_m{pp_microbatches}"
    return checkpointing + accumulation + pipeline


def parse_training(suffix: str) -> dict:
    """`training_suffix`'s inverse: {activation_checkpointing, grad_accum, pp_schedule, pp_microbatches}."""
    match = re.fullmatch(TRAINING_PATTERN, suffix)
    if not match:
        raise ValueError(f"training options {suffix!r} are not of the form +ac_<mode>+ga<n>+pp_<schedule>_m<n>")
    checkpointing, accumulation, pipeline = match.groups()
    schedule, _, microbatches = pipeline[len("+pp_") :].rpartition("_m") if pipeline else ("", "", "")
    return {
        "activation_checkpointing": checkpointing[len("+ac_") :] if checkpointing else NO_CHECKPOINTING,
        "grad_accum": int(accumulation[len("+ga") :]) if accumulation else NO_ACCUMULATION,
        "pp_schedule": schedule or NO_PIPELINE,
        "pp_microbatches": int(microbatches) if microbatches else NO_PIPELINE_MICROBATCHES,
    }


def _whole(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= 1


def _check_training(activation_checkpointing: str, grad_accum, pp_schedule: str, pp_microbatches) -> None:
    if activation_checkpointing not in ACTIVATION_CHECKPOINTING:
        raise ValueError(
            f"run coordinate activation_checkpointing={activation_checkpointing!r} is not one of "
            f"{', '.join(ACTIVATION_CHECKPOINTING)}"
        )
    if not _whole(grad_accum):
        raise ValueError(f"run coordinate grad_accum={grad_accum!r} is not a whole number of micro-batches >= 1")
    if pp_schedule not in (NO_PIPELINE, *PIPELINE_SCHEDULES):
        raise ValueError(
            f"run coordinate pp_schedule={pp_schedule!r} is not one of {', '.join((NO_PIPELINE, *PIPELINE_SCHEDULES))}"
        )
    if not _whole(pp_microbatches) or (pp_schedule == NO_PIPELINE and pp_microbatches != NO_PIPELINE_MICROBATCHES):
        raise ValueError(
            f"run coordinate pp_microbatches={pp_microbatches!r} is not a whole number >= 1 "
            "(1 without a pipeline schedule)"
        )


@functools.cache
def _allowed(name: str, value: str) -> bool:
    """`value` matches coordinate `name`'s constraint (a grid repeats few values: checked once each)."""
    return re.fullmatch(WILDCARD_CONSTRAINTS[name], value) is not None


def _as_accumulation(value) -> int:
    """grad_accum as an int from a table's, a path's or a wildcard's text ("4" -> 4)."""
    return int(value) if isinstance(value, str) and value.isdigit() else value


@dataclass(frozen=True, order=True)
class Scale:
    """`NxG`: N nodes with G devices each (CAICT's "2n8c" is `2x4`)."""

    nodes: int
    devices_per_node: int

    @classmethod
    def parse(cls, text: str) -> Scale:
        if not re.fullmatch(SCALE_PATTERN, text):
            raise ValueError(f"scale {text!r} is not of the form NODESxDEVICES_PER_NODE, e.g. 1x4")
        nodes, per_node = text.split("x")
        return cls(int(nodes), int(per_node))

    @property
    def devices(self) -> int:
        return self.nodes * self.devices_per_node

    def __str__(self) -> str:
        return f"{self.nodes}x{self.devices_per_node}"

    @property
    def caict_label(self) -> str:
        return f"{self.nodes}n{self.devices}c"


@dataclass(frozen=True, order=True)
class RunCoords:
    framework: str
    model: str
    precision: str
    data: str
    batch: str  # per-device batch as text: an integer or "max"
    scale: str
    strategy: str
    # Keyword-only, with their defaults: between strategy and repeat in tables and sort order.
    activation_checkpointing: str = field(default=NO_CHECKPOINTING, kw_only=True)
    grad_accum: int = field(default=NO_ACCUMULATION, kw_only=True)
    pp_schedule: str = field(default=NO_PIPELINE, kw_only=True)
    pp_microbatches: int = field(default=NO_PIPELINE_MICROBATCHES, kw_only=True)
    repeat: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "grad_accum", _as_accumulation(self.grad_accum))
        object.__setattr__(self, "pp_microbatches", _as_accumulation(self.pp_microbatches))
        for name in PATH_FIELDS:
            value = str(getattr(self, name))
            if not _allowed(name, value):
                raise ValueError(f"run coordinate {name}={value!r} is not allowed")
        _check_training(self.activation_checkpointing, self.grad_accum, self.pp_schedule, self.pp_microbatches)

    @property
    def scale_obj(self) -> Scale:
        return Scale.parse(self.scale)

    @property
    def devices(self) -> int:
        return self.scale_obj.devices

    @property
    def training(self) -> str:
        """The training options' path form (the `training` wildcard)."""
        return training_suffix(self.activation_checkpointing, self.grad_accum, self.pp_schedule, self.pp_microbatches)

    @property
    def run_dir(self) -> str:
        return RUN_DIR_TEMPLATE.format(**self.wildcards())

    def wildcards(self) -> dict:
        """The run's path wildcards (WILDCARD_NAMES) as text."""
        return {**{name: str(getattr(self, name)) for name in PATH_FIELDS}, "training": self.training}

    @classmethod
    def from_wildcards(cls, values) -> RunCoords:
        """A run from its path wildcards (a mapping or Snakemake's wildcards object)."""
        read = values.get if isinstance(values, dict) else lambda name: getattr(values, name)
        return cls.from_dict({**{name: read(name) for name in PATH_FIELDS}, **parse_training(read("training"))})

    @property
    def cell(self) -> CellKey:
        """The table cell this run is a repeat of."""
        return CellKey(**{k: v for k, v in vars(self).items() if k != "repeat"})

    def as_dict(self) -> dict:
        # Flat text and int fields: a copy of the instance's dict (asdict deep-copies each
        # value: about 0.05 s per 1,000 runs while a grid is planned).
        return dict(vars(self))

    @classmethod
    def from_dict(cls, values: dict) -> RunCoords:
        """A run from its coordinates by name (a table's row, a header's `run`); the training
        options may be absent (a log or table from before they existed): their defaults."""
        given = {n: (int(values[n]) if n == "repeat" else str(values[n])) for n in PATH_FIELDS}
        for name, default in TRAINING_DEFAULTS.items():
            given[name] = values.get(name, default) if hasattr(values, "get") else default
        for name in ("grad_accum", "pp_microbatches"):
            given[name] = _as_accumulation(str(given[name]))
        return cls(**given)

    def with_(self, **changes) -> RunCoords:
        return replace(self, **changes)


@dataclass(frozen=True, order=True)
class CellKey:
    framework: str
    model: str
    precision: str
    data: str
    batch: str
    scale: str
    strategy: str
    activation_checkpointing: str = NO_CHECKPOINTING
    grad_accum: int = NO_ACCUMULATION
    pp_schedule: str = NO_PIPELINE
    pp_microbatches: int = NO_PIPELINE_MICROBATCHES

    def __post_init__(self) -> None:
        object.__setattr__(self, "grad_accum", _as_accumulation(self.grad_accum))
        object.__setattr__(self, "pp_microbatches", _as_accumulation(self.pp_microbatches))
        _check_training(self.activation_checkpointing, self.grad_accum, self.pp_schedule, self.pp_microbatches)

    def as_dict(self) -> dict:
        return dict(vars(self))  # flat fields, as RunCoords.as_dict

    @property
    def training(self) -> str:
        return training_suffix(self.activation_checkpointing, self.grad_accum, self.pp_schedule, self.pp_microbatches)

    def wildcards(self) -> dict:
        """The cell's path wildcards (WILDCARD_NAMES but repeat) as text."""
        return {**{name: str(getattr(self, name)) for name in PATH_FIELDS[:-1]}, "training": self.training}

    @classmethod
    def from_wildcards(cls, values) -> CellKey:
        """A cell from its path wildcards (a mapping or Snakemake's wildcards object)."""
        read = values.get if isinstance(values, dict) else lambda name: getattr(values, name)
        return cls(**{name: str(read(name)) for name in PATH_FIELDS[:-1]}, **parse_training(read("training")))

    @property
    def label(self) -> str:
        return (
            f"{self.framework} {self.model} {self.precision} {self.data} bs{self.batch} {self.scale} "
            f"{self.strategy}{self.training}"
        )


CELL_FIELDS = [f.name for f in fields(CellKey)]
RUN_FIELDS = [f.name for f in fields(RunCoords)]
TRAINING_DEFAULTS = {
    "activation_checkpointing": NO_CHECKPOINTING,
    "grad_accum": NO_ACCUMULATION,
    "pp_schedule": NO_PIPELINE,
    "pp_microbatches": NO_PIPELINE_MICROBATCHES,
}
# The coordinates that are path wildcards as they are; the training options are one wildcard.
PATH_FIELDS = [name for name in RUN_FIELDS if name not in TRAINING_DEFAULTS]
WILDCARD_NAMES = [*PATH_FIELDS[:-1], "training", "repeat"]
