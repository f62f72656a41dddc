"""Rule report_document: tables + figures → results/report/index.html."""

import sys

import pandas as pd

from dlbench import grid, report

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821, SIM115

config = snakemake.config  # noqa: F821
cells = pd.read_csv(snakemake.input.cells, dtype={"batch": str})  # noqa: F821
runs = pd.read_csv(snakemake.input.runs, dtype={"batch": str})  # noqa: F821
figures = {"throughput": snakemake.input.throughput, "speedup": snakemake.input.speedup}  # noqa: F821
html = report.render(cells, runs, figures, grid.expand(config).protocol, config)
with open(snakemake.output.html, "w") as f:  # noqa: F821
    f.write(html)
