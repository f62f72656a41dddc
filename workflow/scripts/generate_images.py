"""Rule generate_images: the generated ImageNet-layout dataset (dlbench.data.imagenet)."""

import sys

from dlbench.data import imagenet, run_job

sys.stderr = sys.stdout = open(snakemake.log[0], "w")  # noqa: SIM115

settings = snakemake.params.settings
run_job(
    lambda: imagenet.generate(
        snakemake.output[0],
        count=settings["count"],
        classes=settings["classes"],
        image_size=settings["image_size"],
        seed=settings["seed"],
        quality=settings["quality"],
        val_count=settings["val_count"],
    )
)
