"""Rule figures: cells.csv → throughput, speedup and real-vs-synthetic figures."""

import sys

from dlbench import labels
from dlbench.analysis.columns import read_cells
from dlbench.plots import figures

sys.stderr = open(snakemake.log[0], "w")  # noqa: SIM115

cells = labels.with_training_in_strategy(read_cells(snakemake.input.cells))
figures.throughput_figure(cells, snakemake.output.throughput)
figures.speedup_figure(cells, snakemake.output.speedup)
figures.data_figure(cells, snakemake.output.data)
