"""Rule recordio, in MXNet's environment: ImageNet layout → .rec/.idx/.lst (dlbench.data.recordio)."""

import argparse

from dlbench.data import recordio, run_job

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--source", required=True, help="ImageNet-layout directory (with train/)")
parser.add_argument("--out", required=True, help="output directory (.rec/.idx/.lst + manifest.json)")
parser.add_argument("--splits", nargs="+", default=["train"], choices=["train", "val"])
parser.add_argument("--seed", type=int, default=0, help="record order")
args = parser.parse_args()
run_job(lambda: recordio.convert(args.source, args.out, splits=args.splits, seed=args.seed))
