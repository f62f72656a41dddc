"""Training FLOPs per sample of a model, counted once (forward + backward) by its kind's formula
(dlbench.model_kinds: published MACs for the CNNs, the parameter counts for BERT and the LLMs)
and used for every framework's cells, whichever framework builds the model.

    python -m dlbench.analysis.flops --model resnet50 --image-size 224 --out results/flops/resnet50.json

Stdlib only: it imports no framework.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dlbench.models import CATALOGUE, kind_of, train_flops_per_sample
from dlbench.runners import capabilities, framework_names


def count(model: str, image_size: int, seq_len: int) -> dict:
    """results/flops/<model>.json's record at the planned sizes (the one its kind trains at)."""
    kind = kind_of(model)
    sizes = {"image_size": image_size, "seq_len": seq_len}
    return {
        "model": model,
        **{name: size if name == kind.size_field else None for name, size in sizes.items()},
        "train_flops_per_sample": train_flops_per_sample(model, (image_size, seq_len)),
        "counted_with": kind.flops_method,
    }


def load_plugin_models(model: str) -> None:
    """A plug-in's models join the catalogue when its framework module loads."""
    if model not in CATALOGUE:
        for framework in framework_names():
            capabilities(framework)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--image-size", type=int, default=0, help="as planned (dlbench.planning.grid.planned_sizes)")
    p.add_argument("--seq-len", type=int, default=0, help="as planned (dlbench.planning.grid.planned_sizes)")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    load_plugin_models(args.model)
    if args.model not in CATALOGUE:
        p.error(f"unknown model {args.model!r}; known: {', '.join(sorted(CATALOGUE))}")
    try:
        result = count(args.model, args.image_size, args.seq_len)
    except Exception as exc:  # a counter that cannot count a size: the report shows no FLOPs, not no report
        print(f"dlbench.analysis.flops: {args.model}: cannot count FLOPs: {exc}", file=sys.stderr)
        result = {"model": args.model, "train_flops_per_sample": None, "error": str(exc)[-500:]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
