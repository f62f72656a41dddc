"""Rule audit: check the tables against the raw step logs; fail naming what differs."""

import sys
from pathlib import Path

from dlbench.analysis import audit
from dlbench.planning import grid

sys.stderr = open(snakemake.log[0], "w")  # noqa: SIM115

config = snakemake.config
tables = Path(snakemake.input.runs).parent
made = snakemake.params.planned
result = audit.audit(grid.expand(config), config, tables, flops_files=snakemake.input.flops, planned=made)
audit.write(result, Path(snakemake.output.manifest), Path(snakemake.output.verdict))
if not result.passed:
    print("audit FAILED:\n" + "\n".join(result.problems), file=sys.stderr)
    sys.exit("audit FAILED: " + "; ".join(result.problems))
print("audit passed", file=sys.stderr)
