"""Rule tfrecords, in TensorFlow's environment: ImageNet layout → TFRecord shards (dlbench.data.tfrecord)."""

import argparse

from dlbench.data import run_job, tfrecord

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--source", required=True, help="ImageNet-layout directory (with train/)")
parser.add_argument("--out", required=True, help="output directory (shards + manifest.json)")
parser.add_argument("--splits", nargs="+", default=["train"], choices=["train", "val"])
parser.add_argument("--shards", type=int, default=4, help="train shards")
parser.add_argument("--val-shards", type=int, default=1)
parser.add_argument("--seed", type=int, default=0, help="record order")
args = parser.parse_args()
run_job(
    lambda: tfrecord.convert(
        args.source,
        args.out,
        splits=args.splits,
        shards={"train": args.shards, "val": args.val_shards},
        seed=args.seed,
    )
)
