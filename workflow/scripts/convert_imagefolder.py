"""Rule imagefolder, in PyTorch's environment: check and link the ImageNet layout (dlbench.data.imagefolder)."""

import argparse

from dlbench.data import imagefolder, run_job

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--source", required=True, help="ImageNet-layout directory (with train/)")
parser.add_argument("--out", required=True, help="output directory (split links + manifest.json)")
parser.add_argument("--splits", nargs="+", default=["train"], choices=["train", "val"])
args = parser.parse_args()
run_job(lambda: imagefolder.convert(args.source, args.out, splits=args.splits))
