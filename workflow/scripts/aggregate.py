"""Rule aggregate: raw step logs of every run in the grid → runs.csv, cells.csv, cells.md,
environment.json (the runs' environment from their step-log headers, for the report),
results/campaign.json (the campaign's manifest, dlbench.campaigns)."""

import json
import sys
from pathlib import Path

from dlbench import environment, grid, tables
from dlbench.campaigns.campaign import manifest_bytes, measured_manifest

sys.stderr = open(snakemake.log[0], "w")  # noqa: SIM115

config = snakemake.config
experiment = grid.expand(config)
flops = {}
for path in snakemake.input.flops:
    counted = json.loads(Path(path).read_text())
    flops[counted["model"]] = counted["train_flops_per_sample"]
runs, cells = tables.build(
    experiment, noisy_cv=config["analysis"]["noisy_cv"], flops=flops, peak_tflops=config["run"]["peak_tflops"]
)
with open(snakemake.output.runs, "wb") as f:
    f.write(tables.csv_bytes(runs))
with open(snakemake.output.cells, "wb") as f:
    f.write(tables.csv_bytes(cells))
with open(snakemake.output.markdown, "w") as f:
    f.write(tables.markdown(cells, experiment.protocol))
Path(snakemake.output.environment).write_text(environment.to_json(environment.table(runs)), encoding="utf-8")
Path(snakemake.output.campaign).write_bytes(manifest_bytes(measured_manifest(runs, ".", experiment.protocol)))
