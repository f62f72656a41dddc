"""Rule figures: cells.csv → throughput and speedup figures."""

import sys

import pandas as pd

from dlbench import figures

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821, SIM115

cells = pd.read_csv(snakemake.input.cells, dtype={"batch": str})  # noqa: F821
figures.throughput_figure(cells, snakemake.output.throughput)  # noqa: F821
figures.speedup_figure(cells, snakemake.output.speedup)  # noqa: F821
