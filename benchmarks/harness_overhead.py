"""Harness overhead: dlbench's runner vs the plainest idiomatic loop, per framework.

    .venvs/analysis/bin/python benchmarks/harness_overhead.py [--frameworks pytorch tensorflow mxnet]
        [--rounds 4] [--model resnet50] [--batch 8] [--image-size 64] [--steps 20] [--warmup 5]
        [--variant NAME:KEY=VALUE[,KEY=VALUE…] …]

The two run alternately (A B A B …) in one session so that the shared machine's drift
hits both alike; each is a fresh process with the same model, batch, image size,
optimizer, threads and step counts. The dlbench figure is its own statistic (measured
samples ÷ measured window from the step log). Prints per-round images/s and the ratio
dlbench ÷ plain (median and range over rounds). Target: ≥ 0.98.

`--variant` (repeatable) runs the dlbench side once per variant in every round, each with
extra environment variables (e.g. `--variant waitall:DLBENCH_MXNET_SYNC=waitall --variant
loss:DLBENCH_MXNET_SYNC=loss`), each variant's ratio against the same round's plain run; the
order of plain and variants rotates from round to round.
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


def run_dlbench(fw: str, args, extra_env: dict | None = None) -> float:
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
            cmd,
            cwd=REPO,
            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", **(extra_env or {})},
            check=True,
            capture_output=True,
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
    # pytorch/mxnet baselines print "N images/s", tensorflow's "images_per_s=N"
    found = re.search(r"([0-9.]+) images/s|images_per_s=([0-9.]+)", out)
    return float(found.group(1) or found.group(2))


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
    p.add_argument("--variant", action="append", default=[], help="NAME:KEY=VALUE[,KEY=VALUE...] (repeatable)")
    args = p.parse_args()
    variants = {"dlbench": {}}
    if args.variant:
        variants = {}
        for text in args.variant:
            name, _, assignments = text.partition(":")
            variants[name] = dict(a.split("=", 1) for a in assignments.split(",") if a)
    for fw in args.frameworks:
        if not (REPO / ".venvs" / fw / "bin/python").exists():
            print(f"{fw}: environment not built, skipped")
            continue
        ratios: dict[str, list[float]] = {name: [] for name in variants}
        order = ["plain", *variants]
        for r in range(args.rounds):
            shift = r % len(order)
            results = {}
            for name in order[shift:] + order[:shift]:
                results[name] = run_plain(fw, args) if name == "plain" else run_dlbench(fw, args, variants[name])
            plain = results["plain"]
            line = [f"{fw} round {r + 1}: plain {plain:.2f} img/s"]
            for name in variants:
                ratios[name].append(results[name] / plain)
                line.append(f"{name} {results[name]:.2f} img/s (ratio {results[name] / plain:.3f})")
            print(", ".join(line), flush=True)
        for name, values in ratios.items():
            print(
                f"{fw} {args.model} bs{args.batch} {args.image_size}px: {name}/plain median "
                f"{statistics.median(values):.3f} (min {min(values):.3f}, max {max(values):.3f}, {args.rounds} rounds)"
            )


if __name__ == "__main__":
    main()
