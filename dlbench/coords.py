"""Run coordinates: the one definition of where a run sits in the experiment grid.

Paths, Snakemake wildcards, table keys and report labels are all derived from
`RunCoords`; nothing else parses run paths. Stdlib only: imported inside every
framework environment.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields, replace

# Every value that ends up in a path or a shell command matches one of these.
SAFE_NAME = r"[a-z][a-z0-9_]*"
SCALE_PATTERN = r"[1-9][0-9]*x[1-9][0-9]*"
BATCH_PATTERN = r"[1-9][0-9]*|max"

# A run's place below results/runs/ (its directory) and logs/runs/ (its Snakemake job log).
RUN_PATH_TEMPLATE = "{framework}/{model}/{precision}/{data}/bs{batch}/{scale}/{strategy}/rep{repeat}"
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
    "repeat": r"[0-9]+",
    "device": r"cpu|cuda",
}

# A single-device run has no parallel strategy; this is its strategy name.
SINGLE_DEVICE = "single"


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
    repeat: int

    def __post_init__(self) -> None:
        for f in fields(self):
            value = str(getattr(self, f.name))
            if not re.fullmatch(WILDCARD_CONSTRAINTS[f.name], value):
                raise ValueError(f"run coordinate {f.name}={value!r} is not allowed")

    @property
    def scale_obj(self) -> Scale:
        return Scale.parse(self.scale)

    @property
    def devices(self) -> int:
        return self.scale_obj.devices

    @property
    def run_dir(self) -> str:
        return RUN_DIR_TEMPLATE.format(**vars(self))

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
        names = [f.name for f in fields(cls)]
        return cls(**{n: (int(values[n]) if n == "repeat" else str(values[n])) for n in names})

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

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def label(self) -> str:
        return f"{self.framework} {self.model} {self.precision} {self.data} bs{self.batch} {self.scale} {self.strategy}"


CELL_FIELDS = [f.name for f in fields(CellKey)]
RUN_FIELDS = [f.name for f in fields(RunCoords)]
