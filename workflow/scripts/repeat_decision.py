"""Checkpoint repeat_decision: a cell's repeats 1..n → whether it needs another (dlbench.analysis.adaptive)."""

import json
import sys
from pathlib import Path

import pandas as pd

from dlbench import protocol
from dlbench.analysis import adaptive, sanity
from dlbench.analysis.aggregate import summarize_run
from dlbench.coords import CellKey, RunCoords

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821, SIM115

wildcards = snakemake.wildcards  # noqa: F821
proto = protocol.resolve(snakemake.config["protocol"])  # noqa: F821
cell = CellKey.from_wildcards(wildcards).as_dict()
runs = pd.DataFrame(
    [
        summarize_run(RunCoords(**cell, repeat=r), ".", sanity.loss_tolerance(proto))
        for r in range(1, int(wildcards.n) + 1)
    ]
)
decision = adaptive.decide(runs, proto)
Path(snakemake.output[0]).write_text(json.dumps(decision, indent=1) + "\n")  # noqa: F821
print(decision["reason"], file=sys.stderr)
