"""dlbench: reproducible deep-learning framework benchmarks as a Snakemake pipeline."""

__version__ = "0.1.0"
