"""Rule llm_tokens: the LLMs' real text, byte-level tokens packed into sequences
(dlbench.data.tokens)."""

import os
import sys

from dlbench.data import run_job, tokens

sys.stderr = sys.stdout = open(snakemake.log[0], "w")  # noqa: SIM115

settings = snakemake.params.settings
out = os.path.dirname(snakemake.output[-1])
run_job(lambda: tokens.build(out, settings["corpus"], settings["seq_len"]))
