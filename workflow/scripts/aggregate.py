"""Rule aggregate: raw step logs of every run in the grid → runs.csv, cells.csv, cells.md,
environment.json, losses.csv and results/campaign.json (dlbench.analysis.derive: the one derivation)."""

import sys

from dlbench.analysis.derive import derive, flops_counts
from dlbench.planning import grid

sys.stderr = open(snakemake.log[0], "w")  # noqa: SIM115

config = snakemake.config
flops = flops_counts(snakemake.input.flops)
derived = derive(grid.expand(config), config, ".", flops, snakemake.params.planned)
out = snakemake.output
derived.write(
    {
        "runs.csv": out.runs,
        "cells.csv": out.cells,
        "cells.md": out.markdown,
        "environment.json": out.environment,
        "losses.csv": out.losses,
        "campaign.json": out.campaign,
        # declared where a prescreen is planned; else beside cells.csv, wherever one ran
        "prescreen.csv": getattr(out, "prescreen", None),
    }
)
