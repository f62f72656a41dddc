"""Harness overhead: dlbench's runner vs the plainest idiomatic loop, per framework.

    .venvs/analysis/bin/python benchmarks/harness_overhead.py [--frameworks pytorch tensorflow mxnet]
        [--rounds 4] [--model resnet50] [--batch 8] [--image-size 64] [--steps 20] [--warmup 5]

The two run alternately (A B A B …) in one session so that the shared machine's drift
hits both alike; each is a fresh process with the same model, batch, image size,
optimizer, threads and step counts. The dlbench figure is its own statistic (measured
samples ÷ measured window from the step log). Prints per-round images/s and the ratio
dlbench ÷ plain (median and range over rounds). Target: ≥ 0.98.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dlbench.aggregate import summarize_run  # noqa: E402
from dlbench.coords import RunCoords  # noqa: E402


def run_dlbench(fw: str, args) -> float:
    coords = RunCoords(fw, args.model, "fp32", "synthetic", str(args.batch), "1x1", "single", 1)
    with tempfile.TemporaryDirectory() as root:
        cmd = [
            str(REPO / ".venvs" / fw / "bin/python"),
            "-m",
            "dlbench.launch",
            *[f"--{k}={v}" for k, v in coords.as_dict().items()],
            f"--run-dir={Path(root) / coords.run_dir}",
            "--preset=caict2020",
            f"--warmup-steps={args.warmup}",
            f"--measured-steps={args.steps}",
            "--statistic=mean",
            f"--image-size={args.image_size}",
            f"--threads={args.threads}",
            "--progress-every=0",
        ]
        subprocess.run(
            cmd, cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, check=True, capture_output=True
        )
        row = summarize_run(coords, root)
        if row["status"] != "ok":
            raise RuntimeError(f"{fw} dlbench run: {row['status']} {row['reason']}")
        return row["throughput"]


def run_plain(fw: str, args) -> float:
    cmd = [
        str(REPO / ".venvs" / fw / "bin/python"),
        str(REPO / f"benchmarks/baselines/{fw}_plain.py"),
        f"--model={args.model}",
        f"--batch={args.batch}",
        f"--image-size={args.image_size}",
        f"--steps={args.steps}",
        f"--warmup={args.warmup}",
        f"--threads={args.threads}",
    ]
    out = subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, text=True).stdout
    return float(re.search(r"([0-9.]+) images/s", out).group(1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frameworks", nargs="+", default=["pytorch", "tensorflow", "mxnet"])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    for fw in args.frameworks:
        if not (REPO / ".venvs" / fw / "bin/python").exists():
            print(f"{fw}: environment not built, skipped")
            continue
        ratios = []
        for r in range(args.rounds):
            plain = run_plain(fw, args)
            ours = run_dlbench(fw, args)
            ratios.append(ours / plain)
            print(
                f"{fw} round {r + 1}: plain {plain:.2f} img/s, dlbench {ours:.2f} img/s, ratio {ours / plain:.3f}",
                flush=True,
            )
        print(
            f"{fw} {args.model} bs{args.batch} {args.image_size}px: dlbench/plain median "
            f"{statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}, {args.rounds} rounds)"
        )


if __name__ == "__main__":
    main()
