"""Rule figures: cells.csv → throughput, speedup and real-vs-synthetic figures."""

import sys

import pandas as pd

from dlbench.plots import figures

sys.stderr = open(snakemake.log[0], "w")  # noqa: SIM115

cells = pd.read_csv(snakemake.input.cells, dtype={"batch": str})
figures.throughput_figure(cells, snakemake.output.throughput)
figures.speedup_figure(cells, snakemake.output.speedup)
figures.data_figure(cells, snakemake.output.data)
