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
launch_args = [
    f"--framework={wildcards.framework}",
    f"--model={wildcards.model}",
    f"--precision={wildcards.precision}",
    "--data=synthetic",
    "--scale=1x1",
    "--strategy=single",
    "--repeat=1",
    "--preset=caict2020",
    "--warmup-steps=1",
    "--measured-steps=1",
    "--statistic=mean",
    f"--image-size={run['image_size']}",
    f"--seq-len={run['seq_len']}",
    f"--threads={snakemake.threads}",
    f"--device={wildcards.device}",
    f"--memory-cap-mb={run['memory_cap_mb']}",
    "--progress-every=0",
]
probe = batch_search.launcher_probe(snakemake.params.python, snakemake.params.repo, launch_args)
batch, history = batch_search.search(probe, limit=config["batch_max"]["limit"])
print(f"largest batch: {batch}; probes: {history}", file=sys.stderr)
batch_search.write_result(snakemake.output[0], batch, history, settings)
