"""Rule profiles: each profiled run's top operations by self time (dlbench.analysis.profiles)."""

import sys

from dlbench.analysis import profiles, tables

sys.stderr = open(snakemake.log[0], "w")  # noqa: SIM115

with open(snakemake.output[0], "wb") as f:
    f.write(tables.csv_bytes(profiles.table(snakemake.params.runs)))
