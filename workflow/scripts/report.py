"""Rule report_document: cells.csv + runs.csv (+ run headers, references.csv) → results/report/index.html."""

import sys
from pathlib import Path

from dlbench import grid, report

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821, SIM115

config = snakemake.config  # noqa: F821
inputs = snakemake.input  # noqa: F821
# references.csv: an input of the rule; read from its usual place if the rule does not name it.
references = getattr(inputs, "references", None) or "results/tables/references.csv"
html = report.render_files(inputs.cells, inputs.runs, grid.expand(config).protocol, config, references, root=".")
Path(snakemake.output.html).write_text(html, encoding="utf-8")  # noqa: F821
