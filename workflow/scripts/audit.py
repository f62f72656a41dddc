"""Rule audit: check the tables against the raw step logs; fail naming what differs."""

import json
import sys
from pathlib import Path

from dlbench import audit, grid

sys.stderr = open(snakemake.log[0], "w")  # noqa: SIM115

config = snakemake.config
flops = {}
for path in snakemake.input.flops:
    counted = json.loads(Path(path).read_text())
    flops[counted["model"]] = counted["train_flops_per_sample"]
result = audit.audit(
    grid.expand(config),
    Path(snakemake.input.runs).parent,
    flops_files=list(snakemake.input.flops),
    noisy_cv=config["analysis"]["noisy_cv"],
    flops=flops,
    peak_tflops=config["run"]["peak_tflops"],
)
audit.write(result, Path(snakemake.output.manifest), Path(snakemake.output.verdict))
if not result.passed:
    print("audit FAILED:\n" + "\n".join(result.problems), file=sys.stderr)
    sys.exit("audit FAILED: " + "; ".join(result.problems))
print("audit passed", file=sys.stderr)
