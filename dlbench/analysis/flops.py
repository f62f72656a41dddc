"""Training FLOPs per sample of a model, counted once (forward + backward) with PyTorch's
FLOP counter on the reference definitions, and used for every framework's cells
(the frameworks' definitions differ only in details the counts barely see; see README).

    python -m dlbench.analysis.flops --model resnet50 --image-size 224 --out results/flops/resnet50.json

Runs in the PyTorch environment; only this entry point imports torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dlbench.coords import RunCoords
from dlbench.models import CATALOGUE
from dlbench.runners.base import RunSpec

COUNT_BATCH = 2


def count(model: str, image_size: int, seq_len: int) -> dict:
    if CATALOGUE[model]["kind"] == "llm":
        return llm_count(model, seq_len)
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from dlbench.runners.pytorch import Runner

    coords = RunCoords("pytorch", model, "fp32", "synthetic", str(COUNT_BATCH), "1x1", "single", 1)
    spec = RunSpec(coords=coords, batch=COUNT_BATCH, image_size=image_size, seq_len=seq_len, threads=1, device="cpu")
    runner = Runner(spec)
    runner.build()
    with FlopCounterMode(display=False) as counter:
        loss = runner._loss()
        loss.backward()
    return {
        "model": model,
        "image_size": image_size if CATALOGUE[model]["kind"] == "image" else None,
        "seq_len": seq_len if CATALOGUE[model]["kind"] == "text" else None,
        "train_flops_per_sample": counter.get_total_flops() / COUNT_BATCH,
        "counted_with": f"torch {torch.__version__} FlopCounterMode, forward + backward, optimizer excluded",
    }


def llm_count(model: str, seq_len: int) -> dict:
    """An LLM's FLOPs per sample are per token (its samples are tokens, dlbench.llm), from
    PaLM's formula: counting an 8B model's step on a CPU would take minutes for the same number."""
    from dlbench import llm

    return {
        "model": model,
        "image_size": None,
        "seq_len": seq_len,
        "train_flops_per_sample": llm.train_flops_per_token(model, seq_len),
        "counted_with": "PaLM appendix B: 6 x matmul parameters + 12 x layers x hidden x seq_len, per token",
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, choices=sorted(CATALOGUE))
    p.add_argument("--image-size", type=int, default=0, help="as planned (dlbench.planning.grid.planned_sizes)")
    p.add_argument("--seq-len", type=int, default=0, help="as planned (dlbench.planning.grid.planned_sizes)")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    try:
        result = count(args.model, args.image_size, args.seq_len)
    except Exception as exc:  # e.g. AlexNet below ~63 px: the report shows no FLOPs, not no report
        print(f"dlbench.analysis.flops: {args.model}: cannot count FLOPs: {exc}", file=sys.stderr)
        result = {"model": args.model, "train_flops_per_sample": None, "error": str(exc)[-500:]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
