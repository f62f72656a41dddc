"""Rule aggregate: raw step logs of every run in the grid → runs.csv, cells.csv, cells.md."""

import sys

from dlbench import grid, tables

sys.stderr = open(snakemake.log[0], "w")  # noqa: SIM115

config = snakemake.config
experiment = grid.expand(config)
runs, cells = tables.build(experiment, noisy_cv=config["analysis"]["noisy_cv"])
with open(snakemake.output.runs, "wb") as f:
    f.write(tables.csv_bytes(runs))
with open(snakemake.output.cells, "wb") as f:
    f.write(tables.csv_bytes(cells))
with open(snakemake.output.markdown, "w") as f:
    f.write(tables.markdown(cells, experiment.protocol))
