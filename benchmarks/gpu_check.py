"""GPU check: the PyTorch runner on CUDA beside a bare training loop on the same GPU.

    python benchmarks/gpu_check.py [--model resnet50] [--batch 64] [--image-size 224] \
        [--warmup 10] [--steps 50] [--rounds 3] [--precisions fp32 amp] [--compile off on]
    python benchmarks/gpu_check.py --device cpu --batch 2 --image-size 32 --steps 2   # smoke test

Per configuration (precision × torch.compile; channels-last always, as the runner), rounds
alternate three blocks on one GPU, in rotating order: the dlbench runner through the timed
loop with window sync (CUDA events, the runner's default on CUDA), the same runner with
per-step sync, and a bare loop (model, SGD, autocast/GradScaler, no harness; synchronised
only at its ends). It prints throughput, runner ÷ bare (median and interval: dlbench.analysis.stats
where importable, else min–max), the cost of per-step sync against window sync, J/sample
and average W from NVML's energy counter (dlbench.launch.energy) and MFU against the GPU's dense
peak (dlbench.devices). Needs only the stdlib and torch with torchvision (the runner's
model definitions; + nvidia-ml-py if present): it runs with .venvs/pytorch-cuda's Python
where that exists, else the Python that started it, and says which. Without a CUDA GPU (or
torch, or torchvision) it exits 2 with the reason (unless --device cpu).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
NO_GPU = 2
clock = time.perf_counter


def project_python(device: str) -> Path:
    return REPO / ".venvs" / ("pytorch-cuda" if device == "cuda" else "pytorch") / "bin" / "python"


def reexec_in_project_env(device: str) -> str:
    """Run in the project's environment where it exists; say which Python runs."""
    python = project_python(device)
    if python.exists() and Path(sys.prefix).resolve() != python.parent.parent.resolve():
        os.execv(str(python), [str(python), *sys.argv])
    where = "project environment" if python.exists() else "this machine's own Python (no project environment)"
    return f"{sys.executable} ({where})"


def require_device(device: str):
    try:
        import torch
    except ImportError as exc:
        sys.exit(_fail(f"PyTorch is not importable here ({exc})"))
    try:  # the runner's CNNs are torchvision's definitions
        import torchvision  # noqa: F401
    except ImportError as exc:
        sys.exit(_fail(f"torchvision is not importable here ({exc}): the runner builds its models with it"))
    if device == "cuda" and not torch.cuda.is_available():
        why = f"torch {torch.__version__} (CUDA build {torch.version.cuda}) sees no CUDA GPU"
        sys.exit(_fail(f"{why}; run with --device cpu for a smoke test"))
    return torch


def _fail(message: str) -> int:
    print(f"gpu_check: {message}", file=sys.stderr)
    return NO_GPU


def runner_for(args, precision: str, compiled: bool):
    from dlbench.coords import RunCoords
    from dlbench.runners.base import RunSpec
    from dlbench.runners.pytorch import Runner

    coords = RunCoords("pytorch", args.model, precision, "synthetic", str(args.batch), "1x1", "single", 1)
    spec = RunSpec(
        coords=coords,
        batch=args.batch,
        image_size=args.image_size,
        seq_len=0,
        threads=args.threads,
        device=args.device,
        compile=compiled,
    )
    runner = Runner(spec)
    runner.import_framework()
    runner.build()
    return runner


def runner_block(runner, args, window: bool, meter) -> float:
    """Samples/s of the measured steps of one timed-loop block (warm-up steps before it)."""
    from dlbench.launch.worker import time_steps

    runner.window_sync = window and args.device == "cuda"
    steps = time_steps(runner, args.warmup, args.steps, 0, 0, meter)
    measured = [s for s in steps if s["phase"] == "measure"]
    return sum(s["samples"] for s in measured) / (measured[-1]["t_end"] - measured[0]["t_start"])


def bare_block(runner, args) -> float:
    """The same model, optimizer, batch and precision, stepped back to back with no harness."""
    torch, model, optimizer = runner.torch, runner.model, runner.optimizer
    workload, scaler = runner.workload, runner.scaler  # the image workload's batch and loss
    images, labels, loss_fn = workload.images, workload.labels, workload.loss_fn
    dtype, device = runner.autocast_dtype, runner.device.type

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = loss_fn(model(images), labels)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            runner.optimizer_step()

    for _ in range(args.warmup):
        step()
    runner.sync()
    start = clock()
    for _ in range(args.steps):
        step()
    runner.sync()
    return args.steps * args.batch / (clock() - start)


def ratio_text(reference: list[float], candidate: list[float]) -> str:
    ratios = [c / r for r, c in zip(reference, candidate, strict=True)]
    if len(ratios) < 2:  # no interval from one round
        return f"{ratios[0]:.3f} (n=1)"
    try:
        from dlbench.analysis import stats

        low, high = stats.ratio_ci("median", reference, candidate)
        interval = f"95% CI [{low:.3f}, {high:.3f}]"
    except (ImportError, AttributeError, ValueError):
        interval = f"range [{min(ratios):.3f}, {max(ratios):.3f}]"
    return f"{statistics.median(ratios):.3f} {interval} (n={len(ratios)})"


def energy_text(meter, throughput: float) -> str:
    record = meter.record()
    if not record["measured"]:
        return f"energy not measured: {record['reason']}"
    joules, window = record["joules"], record["window_s"]
    flag = " (window too short for the counter)" if record["too_short"] else ""
    return f"{joules / (throughput * window):.4g} J/sample, {joules / window:.0f} W average{flag}"


def mfu_text(args, precision: str, throughput: float, device_name: str) -> str:
    from dlbench import devices

    peak = devices.peak(device_name, precision)
    if not args.flops_per_sample or peak is None:
        return "MFU: no FLOPs per sample (--flops-per-sample)" if peak else f"MFU: no peak known for {device_name}"
    return f"MFU {throughput * args.flops_per_sample / 1e12 / peak[0]:.1%} of {peak[1]}"


def check(args, precision: str, compiled: bool) -> None:
    from dlbench.launch import energy

    runner = runner_for(args, precision, compiled)
    blocks = {"window": [], "per-step": [], "bare": []}
    meters = []
    for r in range(args.rounds):
        order = list(blocks)[r % 3 :] + list(blocks)[: r % 3]
        for block in order:
            if block == "bare":
                blocks[block].append(bare_block(runner, args))
                continue
            meter = energy.open_meter(args.device, [0])
            blocks[block].append(runner_block(runner, args, block == "window", meter))
            meters.append((meter, blocks[block][-1]))
    name = runner.describe()["device_name"]
    label = f"{args.model} bs{args.batch} {args.image_size}px {precision} compile={'on' if compiled else 'off'}"
    print(f"\n== {label} on {name}")
    for block, values in blocks.items():
        rounds = ", ".join(f"{v:.1f}" for v in values)
        print(f"  {block:9s} {statistics.median(values):10.1f} samples/s  (rounds: {rounds})")
    print(f"  runner (window) ÷ bare:       {ratio_text(blocks['bare'], blocks['window'])}")
    print(f"  per-step sync ÷ window sync:  {ratio_text(blocks['window'], blocks['per-step'])}")
    print(f"  {energy_text(*meters[-1])}")
    print(f"  {mfu_text(args, precision, statistics.median(blocks['window']), name)}")
    runner.close()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--model", default="resnet50", choices=("resnet50", "resnet152", "vgg16", "alexnet"))
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--precisions", nargs="+", default=["fp32", "amp"], choices=("fp32", "amp"))
    p.add_argument("--compile", nargs="+", default=["off", "on"], choices=("off", "on"))
    p.add_argument(
        "--flops-per-sample", type=float, default=0.0, help="training FLOPs/sample for MFU (dlbench.analysis.flops)"
    )
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    python = reexec_in_project_env(args.device)
    torch = require_device(args.device)
    print(f"gpu_check: {python}; torch {torch.__version__}, CUDA {torch.version.cuda}, device {args.device}")
    failed = []
    for precision in args.precisions:
        for compiled in args.compile:
            try:
                check(args, precision, compiled == "on")
            except Exception as exc:  # one configuration's failure (e.g. no C compiler for Triton) spares the rest
                failed.append(f"{precision} compile={compiled}")
                print(f"\n== {failed[-1]}: failed: {type(exc).__name__}: {exc}", flush=True)
                traceback.print_exc()
    if failed:
        print(f"gpu_check: failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
