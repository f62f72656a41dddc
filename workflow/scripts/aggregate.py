"""Rule aggregate: raw step logs of every run in the grid → runs.csv, cells.csv, cells.md."""

import sys

from dlbench import grid, tables

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821, SIM115

config = snakemake.config  # noqa: F821
experiment = grid.expand(config)
runs, cells = tables.build(experiment, noisy_cv=config["analysis"]["noisy_cv"])
runs.to_csv(snakemake.output.runs, index=False)  # noqa: F821
cells.to_csv(snakemake.output.cells, index=False)  # noqa: F821
with open(snakemake.output.markdown, "w") as f:  # noqa: F821
    f.write(tables.markdown(cells, experiment.protocol))
