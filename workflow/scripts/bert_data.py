"""Rule bert_data, in PyTorch's environment (tokenizers): corpus → WordPiece vocab → BERT
pre-training examples (dlbench.data.bert). One option per `data.text` setting, its default
the config schema's."""

import argparse

from dlbench.data import bert, run_job
from dlbench.planning import datasets as paths
from dlbench.planning.schema import schema_defaults

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--out", required=True, help="output directory (examples.npz, vocab.txt, manifest.json)")
for name, default in schema_defaults("data", "text").items():
    parser.add_argument(f"--{name.replace('_', '-')}", type=str if default is None else type(default), default=default)
settings = vars(parser.parse_args())
out = settings.pop("out")
run_job(lambda: bert.build(out, paths.text_settings({"data": {"text": settings}})))
