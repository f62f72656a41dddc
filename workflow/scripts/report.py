"""Rule report_document: cells.csv, runs.csv, environment.json, references.csv and the published
numbers (its campaigns section) → results/report/index.html."""

import sys
from pathlib import Path

from dlbench import report
from dlbench.planning import grid

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821, SIM115

config = snakemake.config  # noqa: F821
inputs = snakemake.input  # noqa: F821
html = report.render_files(
    inputs.cells,
    inputs.runs,
    grid.expand(config).protocol,
    config,
    inputs.references,
    inputs.environment,
    published_path=inputs.published,
)
Path(snakemake.output.html).write_text(html, encoding="utf-8")  # noqa: F821
