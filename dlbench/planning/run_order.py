"""The order runs are started in: interleaved across cells, seeded and recorded.

Snakemake starts the ready job with the highest priority first (its greedy and ILP
schedulers both maximise priority), and a rule's `priority` may be a function of the job's
wildcards, so each run gets its position in this order as its priority (train.smk). Rounds
by repeat: every cell's first repeat, shuffled, then every cell's second, shuffled again,
and so on, so a slow drift of the machine spreads over all cells instead of landing on the
cells that happened to run last (dlbench.analysis.drift checks for it). `run.order: grid` keeps the
grid's order (all repeats of a cell back to back). Stdlib only.
"""

from __future__ import annotations

import csv
import io
import random
from collections.abc import Callable

from dlbench.coords import RUN_DIR_TEMPLATE, RUN_FIELDS, RunCoords


def ordered(runs: list[RunCoords], order: str = "interleaved", seed: int = 0) -> list[RunCoords]:
    """The runs in the order they should start."""
    if order == "grid":
        return list(runs)
    rounds: dict[int, list[RunCoords]] = {}
    for run in runs:
        rounds.setdefault(run.repeat, []).append(run)
    out: list[RunCoords] = []
    for repeat in sorted(rounds):
        batch = sorted(rounds[repeat])
        random.Random(f"{seed}:{repeat}").shuffle(batch)
        out.extend(batch)
    return out


def priority_function(runs: list[RunCoords], order: str, seed: int) -> Callable:
    """`priority:` for the training rules: the first run to start gets the highest number."""
    sequence = ordered(runs, order, seed)
    priorities = {run.run_dir: len(sequence) - i for i, run in enumerate(sequence)}

    def run_priority(wildcards) -> int:
        return priorities.get(RUN_DIR_TEMPLATE.format(**wildcards), 0)

    return run_priority


def order_csv(runs: list[RunCoords], order: str, seed: int) -> str:
    """The planned order as CSV (position, run coordinates, order, seed): results/tables/run_order.csv."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["position", *RUN_FIELDS, "order", "seed"])
    for i, run in enumerate(ordered(runs, order, seed)):
        writer.writerow([i, *(getattr(run, f) for f in RUN_FIELDS), order, seed])
    return text.getvalue()
