"""Rule references: cells.csv against published numbers and a baseline run."""

import sys

from dlbench.analysis import references, tables
from dlbench.analysis.columns import read_cells

sys.stderr = open(snakemake.log[0], "w")  # noqa: SIM115

cells = read_cells(snakemake.input.cells)
verdicts = references.compare(cells, snakemake.config["references"], snakemake.input.published)
with open(snakemake.output.references, "wb") as f:
    f.write(tables.csv_bytes(verdicts))
