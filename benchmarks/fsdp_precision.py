"""FSDP2's precision under amp, before and after it moved into the sharding: PyTorch's `fsdp`
and `fsdp_tp` on llama_small, gloo CPU ranks, for each variant of the amp step

    autocast          the step before: float32 parameters gathered, the forward under autocast
                      (bfloat16, its cast cache on); the runner with FSDP2's policy switched off
    policy            the step now: MixedPrecisionPolicy(param_dtype=bfloat16,
                      reduce_dtype=float32), no autocast
    policy+autocast   the policy and, around the forward, autocast with its cache off (what
                      the runner would run if some op outside the policy needed autocast)

the bytes all-gathered and reduce-scattered per step on a rank (counted at torch.distributed's
calls: dlbench.runners.pytorch.collectives.counted), each rank's peak resident set over the
measured steps, and tokens/s of the global batch:

    .venvs/analysis/bin/python benchmarks/fsdp_precision.py [--scales 1x2 2x2] [--rounds 2]
        [--seq-len 256] [--batch 2] [--steps 3]

Each configuration runs in fresh processes (one per rank, 1 thread each, all on this host: a
2x2 is two "nodes" of two ranks), the configurations alternating round by round. Memory: the
peak resident set (VmHWM) reset after the warm-up step (/proc/self/clear_refs), so that it is
the measured steps' peak, the runner's resident state included.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = REPO / ".venvs/pytorch/bin/python"
ENV = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": "/tmp"}
VARIANTS = ("autocast", "policy", "policy+autocast")
MIB = 2**20


def _patch(variant: str) -> None:
    """(In a rank.) The runner as `variant` steps: without FSDP2's policy (autocast), or with
    autocast around the policy's forward, its cache off."""
    import torch

    from dlbench.runners.pytorch import Runner, strategies

    if variant == "autocast":
        strategies.FSDP.policy = lambda self, model, amp_dtype: {}
    if variant == "policy+autocast":
        backward = Runner._backward

        def uncached(self, batch, micro_batches):
            with torch.autocast(self.device.type, dtype=self.compute_dtype, cache_enabled=False):
                return backward(self, batch, micro_batches)

        Runner._backward = uncached


def _memory(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _tensor_peak(runner) -> dict:
    """One more step under FSDP2's memory tracker (torch.distributed._tools): the peak of the
    tensors this rank holds, MiB by category (sharded and unsharded parameters, gradients,
    activations, optimizer state, ...), exact where the resident set has the allocator's slack."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

    tracker = FSDPMemTracker(runner.distributed_model, runner.optimizer)
    with tracker:
        runner.loss_value(runner.step())
    (peak,) = tracker.get_tracker_snapshot("peak").values()
    return {str(kind): round(size / MIB, 1) for kind, size in peak.items() if size}


def rank(args) -> None:
    """(In the pytorch environment, one process per rank.) Build, warm up, measure, print."""
    import torch.distributed as td

    from dlbench.coords import RunCoords, Scale
    from dlbench.runners.base import Distributed, RunSpec
    from dlbench.runners.pytorch import Runner, collectives

    _patch(args.variant)
    scale = Scale.parse(args.scale)
    dist = Distributed(rank=args.rank, world_size=scale.devices, local_rank=args.rank % scale.devices_per_node,
                       local_world_size=scale.devices_per_node, master_port=args.port,
                       node=f"node{args.rank // scale.devices_per_node}")  # fmt: skip
    coords = RunCoords("pytorch", args.model, "amp", "synthetic", str(args.batch), args.scale, args.strategy, repeat=1)
    runner = Runner(RunSpec(coords, args.batch, 0, args.seq_len, 1, "cpu", dist=dist))
    runner.import_framework()
    runner.build()
    for _ in range(args.warmup):
        runner.loss_value(runner.step())
    Path("/proc/self/clear_refs").write_text("5")  # the peak resident set from here
    td.barrier()
    start = time.perf_counter()
    with collectives.counted(td) as moved:
        for _ in range(args.steps):
            handle = runner.step()
        runner.loss_value(handle)
    seconds = time.perf_counter() - start
    record = {
        "seconds": seconds,
        "bytes_per_step": {kind: total // args.steps for kind, total in moved.items()},
        "peak_bytes": _memory("VmHWM"),
        "loss": float(handle),
        "mixed_precision": runner.describe()["mixed_precision"],
        "tensor_peak_mib": _tensor_peak(runner),
    }
    runner.close()
    print("RESULT", json.dumps(record))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def configuration(args, strategy: str, scale: str, variant: str) -> dict:
    """One configuration's ranks, started together; their records and the global tokens/s."""
    from dlbench.coords import Scale

    devices, port = Scale.parse(scale).devices, str(_free_port())
    common = ["--strategy", strategy, "--scale", scale, "--variant", variant, "--port", port, "--model", args.model,
              "--batch", str(args.batch), "--seq-len", str(args.seq_len), "--steps", str(args.steps),
              "--warmup", str(args.warmup)]  # fmt: skip
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    ranks = [
        subprocess.Popen([str(PYTHON), __file__, "--rank", str(r), *common], cwd=REPO, env=ENV, **pipes)
        for r in range(devices)
    ]
    outputs = [process.communicate(timeout=1200) for process in ranks]
    records = []
    for process, (stdout, stderr) in zip(ranks, outputs, strict=True):
        if process.returncode != 0:
            raise SystemExit(f"{strategy} {scale} {variant}: a rank failed\n{stderr[-3000:]}")
        records.append(json.loads(next(x for x in stdout.splitlines() if x.startswith("RESULT "))[7:]))
    tokens = args.batch * devices * args.seq_len * args.steps  # the global batch's (dlbench's convention)
    return {
        "strategy": strategy, "scale": scale, "variant": variant,
        "tokens_per_s": tokens / max(r["seconds"] for r in records),
        "bytes_per_step": records[0]["bytes_per_step"],
        "peak_mib": [round(r["peak_bytes"] / MIB) for r in records],
        "tensor_peak_mib": [r["tensor_peak_mib"] for r in records],
        "loss": statistics.mean(r["loss"] for r in records),
        "mixed_precision": records[0]["mixed_precision"],
    }  # fmt: skip


def summarise(results: list[dict]) -> None:
    print("\nstrategy scale variant: all-gathered / reduce-scattered MiB per step per rank, the largest rank's"
          " peak resident set and tensor peak (MiB), tokens/s")  # fmt: skip
    keys = sorted({(r["strategy"], r["scale"], r["variant"]) for r in results})
    for key in keys:
        rows = [r for r in results if (r["strategy"], r["scale"], r["variant"]) == key]
        moved = rows[0]["bytes_per_step"]
        peak = statistics.median(max(r["peak_mib"]) for r in rows)
        tensors = max(t.get("Total", 0) for t in rows[0]["tensor_peak_mib"])
        rate = statistics.median(r["tokens_per_s"] for r in rows)
        gathered, reduced = moved.get("all_gather", 0) / MIB, moved.get("reduce_scatter", 0) / MIB
        rates = [round(r["tokens_per_s"], 1) for r in rows]
        print(f"{' '.join(key):32} {gathered:8.1f} / {reduced:6.1f}  peak {peak:6.0f} tensors {tensors:6.1f}"
              f"  {rate:7.1f} tokens/s (n={len(rows)}, {rates})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategies", nargs="+", default=["fsdp", "fsdp_tp"])
    parser.add_argument("--scales", nargs="+", default=["1x2", "2x2"])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--model", default="llama_small")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    for name in ("--strategy", "--scale", "--variant"):
        parser.add_argument(name, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    if args.rank is not None:
        return rank(args)
    configurations = [(s, c, v) for s in args.strategies for c in args.scales for v in args.variants]
    results = []
    for index in range(args.rounds):
        order = configurations[index % len(configurations) :] + configurations[: index % len(configurations)]
        for strategy, scale, variant in order:
            with open("/proc/loadavg") as f:
                load = f.read().split()[0]
            record = configuration(args, strategy, scale, variant)
            results.append(record)
            print(json.dumps({**record, "round": index + 1, "load": load}), flush=True)
    summarise(results)


if __name__ == "__main__":
    main()
