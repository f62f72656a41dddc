"""Rule find_max_batch: the largest per-device batch for one framework/model/precision."""

import sys

from dlbench.launch.max_batch import write_result
from dlbench.planning import batch_search
from dlbench.planning.grid import planned_sizes
from dlbench.protocol import resolve as resolve_protocol

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
protocol = resolve_protocol(config["protocol"])
image_size, seq_len = planned_sizes(run, wildcards.model)
request = batch_search.probe_request(
    wildcards.framework,
    wildcards.model,
    wildcards.precision,
    wildcards.device,
    preset=protocol["preset"],
    statistic=protocol["statistic"],
    image_size=image_size,
    seq_len=seq_len,
    threads=snakemake.threads,
    memory_cap_mb=run["memory_cap_mb"],
)
probe = batch_search.launcher_probe(snakemake.params.python, snakemake.params.repo, request)
batch, history = batch_search.search(probe, limit=config["batch_max"]["limit"])
print(f"largest batch: {batch}; probes: {history}", file=sys.stderr)
write_result(snakemake.output[0], batch, history, settings)
