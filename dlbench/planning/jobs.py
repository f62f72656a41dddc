"""Job shapes: the Slurm resources of a training run, from its scale and strategy.

A run's job is `nodes` nodes with one task per rank process, each rank given its share
of the node's CPUs, and the devices it drives (snakemake-executor-plugin-slurm's keys:
`nodes`, `tasks`, `cpus_per_task`, `gpu`, `mpi`, `slurm_extra`, `mem_mb`, `runtime`).

Runs with the same shape share one Snakemake rule with static resources (train.smk), so
that building the DAG of a large grid calls no function per job for its resources.
Executors other than slurm ignore every key but `mem_mb` and `runtime`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from dlbench.coords import RUN_RECORD, WILDCARD_NAMES, RunCoords, Scale
from dlbench.launch import slurm
from dlbench.runners import run_layout


@dataclass(frozen=True, order=True)
class JobShape:
    scale: str
    processes_per_node: int

    @property
    def rule_name(self) -> str:
        """`train_2x4`, or `train_2x4_p1` when one process drives each node's 4 devices."""
        devices_per_node = Scale.parse(self.scale).devices_per_node
        suffix = "" if self.processes_per_node == devices_per_node else f"_p{self.processes_per_node}"
        return f"train_{self.scale}{suffix}"

    def resources(self, run: dict) -> dict:
        """Static resources of every run of this shape, from config `run`."""
        scale = Scale.parse(self.scale)
        tasks = scale.nodes * self.processes_per_node
        cuda = run["device"] == "cuda"
        values = {
            "mem_mb": run["mem_mb"],  # per node (Slurm's --mem)
            # dlbench's own time limit plus a margin, so that it fires first
            "runtime": slurm.runtime_minutes(run["time_limit_s"]),
            "nodes": scale.nodes,
            "tasks": tasks,
            "cpus_per_task": slurm.cpus_per_task(run["threads"], self.processes_per_node),
        }
        extra = []
        if tasks > 1:
            # The plugin does not wrap a job marked mpi in `srun -n1` (it refuses the mark for
            # one task): the launcher's own srun is the job's first step. A single task driving
            # several devices runs inside the plugin's step (the launcher's srun uses --overlap).
            values["mpi"] = "srun"
            extra.append(f"--ntasks-per-node={self.processes_per_node}")
        if cuda:
            values.update(gpu_resources(run, scale))
            if "gpu" not in values and "gres" not in values:  # what the plugin has no key for
                extra.append(
                    slurm.gpu_flag("gpus-per-node", run.get("gpu_type", ""), scale.nodes, scale.devices_per_node)
                )
        if run.get("exclusive"):
            # Whole nodes: --exclusive; all of their memory is --mem=0, which the plugin neither
            # writes (mem_mb 0: no --mem) nor lets through slurm_extra: submit_environment().
            extra.append("--exclusive")
            values["mem_mb"] = 0
        if extra:
            values["slurm_extra"] = " ".join(extra)
        return values


def gpu_resources(run: dict, scale: Scale) -> dict:
    """The plugin's GPU keys for run.gpu_request on CUDA (docs/slurm.md, Site knobs). Its `gpu`
    (→ --gpus) and `gres` make it add --ntasks-per-gpu, which Slurm refuses beside
    --ntasks-per-node: `tasks_per_gpu: 0` leaves that out. gpus-per-node, which the plugin has
    no key for, goes in slurm_extra (JobShape.resources), but for one device: --gpus=1."""
    request, gpu_type = run.get("gpu_request", "gpus-per-node"), run.get("gpu_type", "")
    model = {"gpu_model": gpu_type} if gpu_type else {}
    if request == "gres":
        return {
            "gres": slurm.gpu_flag("gres", gpu_type, scale.nodes, scale.devices_per_node).split("=", 1)[1],
            "tasks_per_gpu": 0,
        }
    if request == "gpus":
        return {"gpu": scale.devices, **model, "tasks_per_gpu": 0}
    return {"gpu": 1, **model} if scale.devices == 1 else {}


def submit_environment(run: dict) -> dict[str, str]:
    """Variables for sbatch on the submit host: run.exclusive's --mem=0 (sbatch reads
    SBATCH_MEM_PER_NODE where the command line has no --mem; every other job has one)."""
    return {"SBATCH_MEM_PER_NODE": "0"} if run.get("exclusive") else {}


def job_shape(run: RunCoords) -> JobShape:
    return JobShape(run.scale, run_layout(run).tasks_per_node)


def shapes(runs: list[RunCoords]) -> dict[JobShape, list[str]]:
    """Each job shape of a grid with the strategies that have it (sorted)."""
    found: dict[JobShape, set[str]] = {}
    # One layout per framework, strategy and scale, not per run (each asks the framework's
    # capabilities).
    distinct = {(run.framework, run.strategy, run.scale): run for run in runs}
    for run in distinct.values():
        found.setdefault(job_shape(run), set()).add(run.strategy)
    clash = {}
    for shape, strategies in found.items():
        for strategy in strategies:
            other = clash.setdefault((shape.scale, strategy), shape)
            if other != shape:
                # Rules are told apart by scale and strategy in the run's path.
                raise ValueError(
                    f"strategy {strategy!r} at scale {shape.scale} runs {other.processes_per_node} and "
                    f"{shape.processes_per_node} processes per node in different frameworks: rename one"
                )
    return {shape: sorted(found[shape]) for shape in sorted(found)}


def constraint(values: list[str]) -> str:
    """A wildcard constraint matching exactly these values. An empty value alone (the training
    options at their defaults) is an explicit empty match: Snakemake reads an empty constraint
    as none and asks for one character at least."""
    return "|".join(re.escape(v) for v in values) or "(?:)"


def recorded_runs(root: str = "results/runs") -> dict[str, set[str]]:
    """The run directories below `root` that hold launch.json / slurm.json, by file name: one
    walk of what exists instead of a stat per run of the grid (most of which do not)."""
    found: dict[str, set[str]] = {RUN_RECORD: set(), slurm.RECORD: set()}
    for directory, _, files in os.walk(root):
        for name in found.keys() & set(files):
            found[name].add(directory)
    return found


def ended_run_constraints(runs: list[RunCoords], recorded: dict[str, set[str]]) -> dict[str, str] | None:
    """Wildcard constraints that match (at least) the runs an earlier invocation's Slurm job
    left without launch.json (train.smk's record_ended_run), or None if there are none.
    Only srun-launched runs leave slurm.json. `recorded`: `recorded_runs()`."""
    ended = [run for run in runs if run.run_dir in recorded[slurm.RECORD] - recorded[RUN_RECORD]]
    if not ended:
        return None
    return {name: constraint(sorted({run.wildcards()[name] for run in ended})) for name in WILDCARD_NAMES}
