"""Packing: several runs of one job shape, one after another, in one Slurm allocation.

`slurm.runs_per_job` N > 1 makes every N runs of a job shape (the same `train_<...>` rule, so
the same resources) a Snakemake group, submitted as one Slurm job. The group of a run is fixed
at planning time from its coordinates: its shape, its repeat round and its position in the
planned order (run_order.py), chunked N at a time within each (shape, repeat round). A group
thus never holds two repeats of one cell, and the placement analysis sees repeats in
different allocations as before.

Inside a group each run needs the record of the run before it (`chain`), so the group's runs
form one connected chain: Snakemake then submits the chunk as one group job (no
--group-components needed), runs it serially, and asks for the resources of one run and the
sum of their times (snakemake.resources.GroupResources: each toposort level is one run; levels
add `runtime` and take the maximum of the rest).

A run whose launch.json exists when a packed job fails is kept: Snakemake deletes every output
of a failed group job, finished runs' included, so the training command keeps a hard link of
each record under KEPT_DIR and puts it back instead of running again (`keep_record_shell`).
Stdlib only.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable

from dlbench.coords import RUN_DIR_TEMPLATE, RUN_RECORD, RunCoords
from dlbench.planning import run_order

# Set on packed runs so that Snakemake's default disk_mb, from the input's size, is not
# evaluated per job: a packed run has an input (the record before it) and that costs a file
# system look-up each. The Slurm plugin asks for no disk.
STATIC_RESOURCES = {"disk_mb": 1000}

# Hard links of packed runs' records, by run directory (see the module docstring).
KEPT_DIR = "logs/packed_records"


def runs_per_job(config: dict) -> int:
    return int((config.get("slurm") or {}).get("runs_per_job", 1))


def groups(
    runs: list[RunCoords], shape_of: Callable[[RunCoords], str], per_job: int, order: str = "interleaved", seed: int = 0
) -> dict[str, list[RunCoords]]:
    """Group id → its runs in the order they run. `shape_of`: a run's rule name."""
    rounds: dict[tuple[str, int], list[RunCoords]] = {}
    for run in run_order.ordered(runs, order, seed):
        rounds.setdefault((shape_of(run), run.repeat), []).append(run)
    out: dict[str, list[RunCoords]] = {}
    for (shape, repeat), members in rounds.items():
        for chunk in range(math.ceil(len(members) / per_job)):
            out[f"{shape}_r{repeat}_j{chunk}"] = members[chunk * per_job : (chunk + 1) * per_job]
    return out


def job_count(runs: list[RunCoords], shape_of: Callable[[RunCoords], str], per_job: int) -> int:
    """How many Slurm jobs the grid's runs are submitted as."""
    if per_job <= 1:
        return len(runs)
    return len(groups(runs, shape_of, per_job))


class Packing:
    """What the training rules look up per job: a dict access each, so that a large grid's
    DAG stays cheap (benchmarks/dag_cost.py)."""

    def __init__(self, grouped: dict[str, list[RunCoords]]):
        self.group_of: dict[str, str] = {}
        self.previous: dict[str, str] = {}
        for group, members in grouped.items():
            for i, run in enumerate(members):
                self.group_of[run.run_dir] = group
                if i:
                    self.previous[run.run_dir] = f"{members[i - 1].run_dir}/{RUN_RECORD}"

    def group(self, run_dir: str) -> str | None:
        return self.group_of.get(run_dir)

    def chain(self, run_dir: str) -> list[str]:
        """The record of the run before this one in its group (none for the first)."""
        previous = self.previous.get(run_dir)
        return [previous] if previous else []

    def group_function(self) -> Callable:
        """`group:` of the training rules."""

        def packed_group(wildcards) -> str | None:
            return self.group(RUN_DIR_TEMPLATE.format(**wildcards))

        return packed_group

    def inputs_function(self, inputs: Callable, recorded: set[str], mark: Callable) -> Callable:
        """`inputs` of a run, and the record of the run before it in its group, flagged with
        `mark` (Snakemake's ancient: an order, a newer record is no reason to run again). A
        recorded run (in `recorded`) waits for nothing."""

        def packed_inputs(wildcards) -> list:
            found = inputs(wildcards)
            run_dir = RUN_DIR_TEMPLATE.format(**wildcards)
            if run_dir in recorded:
                return found
            return found + [mark(record) for record in self.chain(run_dir)]

        return packed_inputs


def keep_record_shell(record: str, command: str) -> str:
    """`command`, unless this run's record was kept by an earlier attempt of its packed job:
    then it is put back. After the command, a hard link of the record is kept."""
    kept = shlex.quote(f"{KEPT_DIR}/{record}")
    target = shlex.quote(record)
    return (
        f"if [ -e {kept} ] && [ ! -e {target} ]; then ln {kept} {target}; "
        f"else {command}; fi && mkdir -p $(dirname {kept}) && ln -f {target} {kept}"
    )


def shape_namer(rule_name_of: Callable[[RunCoords], str]) -> Callable[[RunCoords], str]:
    """A run's rule name, asked once per framework, strategy and scale (a run's layout asks
    the framework's capabilities)."""
    known: dict[tuple[str, str, str], str] = {}

    def shape_of(run: RunCoords) -> str:
        key = (run.framework, run.strategy, run.scale)
        if key not in known:
            known[key] = rule_name_of(run)
        return known[key]

    return shape_of
