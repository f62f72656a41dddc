"""Rule find_max_batch: the largest per-device batch for one framework/model/precision."""

import sys

from dlbench import batch_search

sys.stderr = open(snakemake.log[0], "w")  # noqa: SIM115

config, wildcards = snakemake.config, snakemake.wildcards
run = config["run"]
settings = {
    "framework": wildcards.framework,
    "model": wildcards.model,
    "precision": wildcards.precision,
    "device": wildcards.device,
    "image_size": run["image_size"],
    "seq_len": run["seq_len"],
    "memory_cap_mb": run["memory_cap_mb"],
    "limit": config["batch_max"]["limit"],
}
launch_args = batch_search.probe_arguments(
    wildcards.framework,
    wildcards.model,
    wildcards.precision,
    wildcards.device,
    run["image_size"],
    run["seq_len"],
    snakemake.threads,
    run["memory_cap_mb"],
)
probe = batch_search.launcher_probe(snakemake.params.python, snakemake.params.repo, launch_args)
batch, history = batch_search.search(probe, limit=config["batch_max"]["limit"])
print(f"largest batch: {batch}; probes: {history}", file=sys.stderr)
batch_search.write_result(snakemake.output[0], batch, history, settings)
