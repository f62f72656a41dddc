"""Rule references: cells.csv against published numbers and a baseline run."""

import sys

import pandas as pd

from dlbench.analysis import references, tables

sys.stderr = open(snakemake.log[0], "w")  # noqa: SIM115

cells = pd.read_csv(snakemake.input.cells, dtype={"batch": str})
verdicts = references.compare(cells, snakemake.config["references"], snakemake.input.published)
with open(snakemake.output.references, "wb") as f:
    f.write(tables.csv_bytes(verdicts))
