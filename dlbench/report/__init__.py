"""The report document: one self-contained HTML page (figures embedded as base64 PNG).

Inputs are tables only: cells.csv, runs.csv, environment.json (written by the aggregate
stage from the step-log headers), the resolved protocol and config, and, when it exists,
references.csv. Sections: summary (generated findings), test method, environment, per
model (throughput table per batch group, throughput figure, speedup figure with the ideal
line, cells without a number and why), published vs measured.

`cells` builds the table entries, `sections` the page's data, `page` renders it with
Jinja2 (dlbench/templates/); figures are drawn by `dlbench.plots.figures`.
"""

from dlbench.report.cells import cell_id, compact_reason, finding_html, throughput_tables
from dlbench.report.page import render, render_files

__all__ = ["cell_id", "compact_reason", "finding_html", "render", "render_files", "throughput_tables"]
