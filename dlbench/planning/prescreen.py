"""The communication prescreen's plan (docs/slurm.md): which allocation shapes it measures,
in which framework's environment, and each shape's launch request. Analysis environment."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from dlbench.coords import RunCoords, Scale
from dlbench.launch.request import LaunchRequest
from dlbench.planning.deployment import Deployment, quoted
from dlbench.planning.jobs import JobShape
from dlbench.planning.snakemake_api import RunWildcards
from dlbench.runners import capabilities, framework_names

# Where a shape's measurement lives: its launch.json (the file Snakemake tracks) and rank logs.
PRESCREEN_DIR = "results/prescreen/{scale}"
PRESCREEN_RECORD = PRESCREEN_DIR + "/launch.json"
PRESCREEN_LOG = "logs/prescreen/{scale}.log"
# What the timed runs wait for: one file naming every shape's record, so that a training job has
# one edge to the prescreen, not one per shape (Snakemake's planning cost grows with the edges).
MEASURED = "results/prescreen/measured.json"
# The run coordinates of its request: they only carry the framework and the shape.
MODEL = STRATEGY = "allreduce"
TIME_LIMIT_S = 300


class PrescreenError(ValueError):
    pass


@dataclass(frozen=True)
class Plan:
    framework: str  # whose environment measures (Capabilities.allreduce)
    shapes: tuple[JobShape, ...]  # nodes x ranks per node, one rank per device

    @property
    def records(self) -> list[str]:
        return [PRESCREEN_RECORD.format(scale=shape.scale) for shape in self.shapes]

    def wildcards(self, shape: JobShape) -> dict:
        """The request's coordinates, as a run's wildcards (text)."""
        coords = RunCoords(self.framework, MODEL, "fp32", "synthetic", "1", shape.scale, STRATEGY, 1)
        return {**{name: str(value) for name, value in coords.as_dict().items()}, "training": coords.training}

    def command(self, deploy: Deployment, protocol, shape: JobShape, settings: dict) -> str:
        """The launcher's command line for one shape's measurement, as `deploy` runs a run's."""
        wildcards = RunWildcards(self.wildcards(shape))
        base = deploy.launch_request(wildcards, protocol, None)
        return deploy.command(wildcards, quoted(self.request(base, shape, settings)))

    def software_inputs(self, deploy: Deployment, shape: JobShape):
        """The input function of a shape's rule: the measuring framework's environment or image."""
        return lambda wildcards: deploy.software_inputs(RunWildcards(self.wildcards(shape)))

    def request(self, base: LaunchRequest, shape: JobShape, settings: dict) -> LaunchRequest:
        """The shape's request: `base` (what the deployment gives its wildcards) set to measure."""
        return dataclasses.replace(
            base,
            run_dir=PRESCREEN_DIR.format(scale=shape.scale),
            task="prescreen",
            sizes=",".join(str(size) for size in settings["sizes"]),
            protocol=dataclasses.replace(
                base.protocol, warmup_steps=settings["warmup"], measured_steps=settings["iterations"]
            ),
            time_limit=TIME_LIMIT_S,
        )


def write_measured(records: list[str], path: str) -> None:
    """The gate's file: each shape's record and its sha256 (what the timed runs waited for)."""
    digests = {record: hashlib.sha256(Path(record).read_bytes()).hexdigest() for record in records}
    Path(path).write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")


def plan(config: dict, train_shapes) -> Plan | None:
    """The prescreen of a grid whose Slurm job shapes are `train_shapes` (jobs.shapes), or None
    where it is off: `prescreen.enabled` false, or auto without srun or without multi-rank
    shapes. A shape of P processes per node is measured with P ranks per node (a process that
    drives several devices reduces among them inside itself). Raises PrescreenError naming the key."""
    settings, run = config["prescreen"], config["run"]
    enabled = settings["enabled"]
    if enabled is False or (enabled == "auto" and run["launcher"] != "srun"):
        return None
    nodes_ok = (lambda nodes: True) if run["launcher"] == "srun" else (lambda nodes: nodes == 1)
    shapes = sorted(
        {
            JobShape(f"{scale.nodes}x{shape.processes_per_node}", shape.processes_per_node)
            for shape in train_shapes
            if (scale := Scale.parse(shape.scale)).nodes * shape.processes_per_node > 1 and nodes_ok(scale.nodes)
        }
    )
    if not shapes:
        return None
    framework = _framework(config, settings)
    if framework is None and enabled is True:
        raise PrescreenError(
            "prescreen.enabled: no framework of grid.frameworks can measure an all-reduce: name one in "
            "prescreen.framework, or set prescreen.enabled: false"
        )
    return Plan(framework, tuple(shapes)) if framework else None


def _framework(config: dict, settings: dict) -> str | None:
    if settings["framework"]:
        name = settings["framework"]
        if name not in framework_names() or not capabilities(name).allreduce:
            measuring = [fw for fw in framework_names() if capabilities(fw).allreduce]
            raise PrescreenError(
                f"prescreen.framework: {name} cannot measure an all-reduce; these can: {', '.join(measuring)}"
            )
        return name
    return next((name for name in config["grid"]["frameworks"] if capabilities(name).allreduce), None)
