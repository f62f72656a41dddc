"""Rule aggregate: raw step logs of every run in the grid → runs.csv, cells.csv, cells.md."""

import sys

from dlbench import grid, tables

sys.stderr = open(snakemake.log[0], "w")  # noqa: SIM115

config = snakemake.config
experiment = grid.expand(config)
runs, cells = tables.build(experiment, noisy_cv=config["analysis"]["noisy_cv"])
runs.to_csv(snakemake.output.runs, index=False)
cells.to_csv(snakemake.output.cells, index=False)
with open(snakemake.output.markdown, "w") as f:
    f.write(tables.markdown(cells, experiment.protocol))
