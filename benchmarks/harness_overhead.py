"""Harness overhead: dlbench's runner vs the fastest known plain loop(s), per framework.

    .venvs/analysis/bin/python benchmarks/harness_overhead.py [--frameworks pytorch tensorflow mxnet]
        [--model resnet50] [--batch 8] [--image-size 224] [--steps 20] [--warmup 5] [--threads 2]
        [--min-rounds 4] [--max-rounds 16] [--rounds N] [--tolerance 0.03] [--statistic median]
        [--baseline FRAMEWORK:NAME …] [--variant NAME:KEY=VALUE[,KEY=VALUE…] …]

Baselines are `benchmarks/baselines/<framework>_<name>.py` (e.g. pytorch:eager,
pytorch:compiled, mxnet:hybrid); a framework with no `--baseline` gets all of its files. Each
takes --model --batch --image-size --steps --warmup --threads and prints "N images/s" (or
"images_per_s=N"). The runner side is dlbench's launcher on a synthetic 1x1 run; its figure is
its own statistic (measured samples ÷ measured window from the step log).

Every round runs each baseline and each runner variant once, as fresh processes with the same
model, batch, image size, optimizer, threads and step counts, in an order that rotates from
round to round, so that the shared machine's drift hits all alike. The best baseline is the
one with the highest median throughput over the rounds; each round gives the ratio runner ÷
that baseline's run of the same round. Rounds continue (at least --min-rounds) until the 95 %
percentile-bootstrap interval (dlbench.analysis.stats.bootstrap_ci, seeded) of the median of the
per-round ratios lies within ±tolerance of that median for every variant, or --max-rounds is
reached. `--rounds N` runs exactly N rounds. Target: ratio ≥ 0.98.

`--variant` (repeatable) runs the runner once per variant in every round, each with extra
environment variables or launcher options (items starting with `--`, e.g. `--variant
waitall:--options=sync=waitall --variant loss:--options=sync=loss`, the framework's declared options, or
`--variant compiled:--compile` runs PyTorch's runner with torch.compile); without it the one
variant is "dlbench".
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BASELINES = REPO / "benchmarks" / "baselines"
sys.path.insert(0, str(REPO))

from dlbench.analysis import stats  # noqa: E402
from dlbench.analysis.aggregate import summarize_run  # noqa: E402
from dlbench.coords import RunCoords  # noqa: E402

PLAIN_ENV = {"PATH": "/usr/bin:/bin"}  # runner and baselines alike: no inherited thread settings
# Baselines that run an external tool: where it is (passed through; without it they are skipped).
EXTERNAL = {"tensorflow_tf_cnn": ("TF_CNN_BENCHMARKS", "TF_CNN_PYTHON")}
DEFAULT_IMAGE_SIZE = {"inception_v3": 299}  # else 224
THROUGHPUT = re.compile(r"([0-9.]+) images/s|images_per_s=([0-9.]+)")
FIRST_STEP = re.compile(r"first step ([0-9.]+) s")


def run_dlbench(fw: str, args, extra_env: dict | None = None, options: tuple[str, ...] = ()) -> float:
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
            *options,
        ]
        subprocess.run(
            cmd,
            cwd=REPO,
            env={"PYTHONPATH": str(REPO), **PLAIN_ENV, **(extra_env or {})},
            check=True,
            capture_output=True,
        )
        row = summarize_run(coords, root)
        if row["status"] != "ok":
            raise RuntimeError(f"{fw} dlbench run: {row['status']} {row['reason']}")
        return row["throughput"]


def run_baseline(fw: str, name: str, args) -> tuple[float, float | None]:
    """(images/s, seconds of the first step when the baseline prints it: compilation)."""
    cmd = [
        str(REPO / ".venvs" / fw / "bin/python"),
        str(BASELINES / f"{fw}_{name}.py"),
        *[f"--{k}={getattr(args, k.replace('-', '_'))}" for k in ("model", "batch", "image-size", "steps")],
        f"--warmup={args.warmup}",
        f"--threads={args.threads}",
    ]
    env = {**PLAIN_ENV, **{k: os.environ[k] for k in EXTERNAL.get(f"{fw}_{name}", ()) if k in os.environ}}
    out = subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True, text=True).stdout
    found = THROUGHPUT.search(out)
    if found is None:
        raise RuntimeError(f"{fw}:{name} printed no throughput: {out[-500:]!r}")
    first_step = FIRST_STEP.search(out)
    return float(found.group(1) or found.group(2)), float(first_step.group(1)) if first_step else None


def available_baselines(fw: str) -> list[str]:
    """The framework's baselines; one of an external tool only where its location is given."""
    found = [p.stem for p in BASELINES.glob(f"{fw}_*.py")]
    usable = [s for s in found if all(k in os.environ for k in EXTERNAL.get(s, ()))]
    return sorted(s.removeprefix(f"{fw}_") for s in usable)


def chosen_baselines(specs: list[str], frameworks: list[str]) -> dict[str, list[str]]:
    """`--baseline FW:NAME` values per framework; a framework not named gets all its baselines."""
    chosen: dict[str, list[str]] = {}
    for spec in specs:
        fw, sep, name = spec.partition(":")
        if not sep or not (BASELINES / f"{fw}_{name}.py").exists():
            raise SystemExit(f"--baseline {spec}: no benchmarks/baselines/{fw}_{name}.py")
        chosen.setdefault(fw, []).append(name)
    return {fw: chosen.get(fw) or available_baselines(fw) for fw in frameworks}


def round_order(arms: list, round_index: int) -> list:
    shift = round_index % len(arms)
    return arms[shift:] + arms[:shift]


def best_baseline(throughputs: dict[str, list[float]]) -> str:
    return max(throughputs, key=lambda name: stats.median(throughputs[name]))


def ratio_summary(ratios: list[float], statistic: str) -> tuple[float, float, float]:
    """(statistic of the per-round ratios, its 95 % bootstrap interval)."""
    return (stats.statistic(statistic, ratios), *stats.bootstrap_ci(statistic, ratios))


def within(value: float, low: float, high: float, tolerance: float) -> bool:
    """The interval lies inside value × (1 ± tolerance); a NaN interval (one round) never does."""
    return value * (1 - tolerance) <= low and high <= value * (1 + tolerance)


def converged(runner: dict[str, list[float]], baseline: list[float], statistic: str, tolerance: float) -> bool:
    for values in runner.values():
        ratios = [r / b for r, b in zip(values, baseline, strict=True)]
        if not within(*ratio_summary(ratios, statistic), tolerance):
            return False
    return True


def measure_framework(fw: str, baselines: list[str], variants: list[str], args, run_arm) -> dict:
    """Alternate baselines and runner variants over rounds until the interval criterion holds.

    `run_arm(kind, name)` -> (images/s, first-step seconds or None), kind "baseline"/"runner".
    """
    arms = [("baseline", name) for name in baselines] + [("runner", name) for name in variants]
    result = {"baseline": {name: [] for name in baselines}, "runner": {name: [] for name in variants}}
    result.update(first_step={name: [] for name in baselines}, load=[], converged=False)
    for r in range(args.max_rounds):
        for kind, name in round_order(arms, r):
            throughput, first_step = run_arm(kind, name)
            result[kind][name].append(throughput)
            if kind == "baseline" and first_step is not None:
                result["first_step"][name].append(first_step)
        result["load"].append(os.getloadavg()[0])
        figures = ", ".join(
            f"{name} {values[-1]:.2f}" for group in ("baseline", "runner") for name, values in result[group].items()
        )
        print(f"{fw} round {r + 1} (load {result['load'][-1]:.2f}): {figures} img/s", flush=True)
        best = best_baseline(result["baseline"])
        result["converged"] = converged(result["runner"], result["baseline"][best], args.statistic, args.tolerance)
        if r + 1 >= args.min_rounds and result["converged"]:
            break
    result["rounds"] = r + 1
    return result


def print_summary(fw: str, result: dict, args) -> None:
    rounds, tol = result["rounds"], args.tolerance
    stop = "interval within" if result["converged"] else "max rounds reached, interval NOT within"
    print(
        f"== {fw} {args.model} bs{args.batch} {args.image_size}px {args.threads} threads, "
        f"{args.warmup}+{args.steps} steps: {rounds} round{'s' if rounds > 1 else ''} ({stop} ±{tol:.0%})"
    )
    best = best_baseline(result["baseline"])
    for name, values in result["baseline"].items():
        first = result["first_step"][name]
        compile_note = f", first step (compilation) median {stats.median(first):.1f} s" if first else ""
        print(
            f"   baseline {name}: median {stats.median(values):.2f} img/s{compile_note}"
            + ("  <- best" if name == best else "")
        )
    for variant, values in result["runner"].items():
        print(f"   runner {variant}: median {stats.median(values):.2f} img/s")
        for name, base in result["baseline"].items():
            value, low, high = ratio_summary([r / b for r, b in zip(values, base, strict=True)], args.statistic)
            print(
                f"   {variant} ÷ {name}: {args.statistic} of per-round ratios {value:.3f}, "
                f"95 % bootstrap interval [{low:.3f}, {high:.3f}]" + ("  <- the ratio" if name == best else "")
            )
    load = result["load"]
    print(
        f"   load average (1 min) after each round: {min(load):.2f}–{max(load):.2f}; "
        "now {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()),
        flush=True,
    )


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frameworks", nargs="+", default=["pytorch", "tensorflow", "mxnet"])
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--image-size", type=int, help="default 224 (299 for inception_v3)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--min-rounds", type=int, default=4)
    p.add_argument("--max-rounds", type=int, default=16)
    p.add_argument("--rounds", type=int, help="exactly this many rounds (sets min and max)")
    p.add_argument("--tolerance", type=float, default=0.03, help="interval half-width, relative")
    p.add_argument("--statistic", default="median", choices=sorted(stats.STATISTICS))
    p.add_argument("--baseline", action="append", default=[], help="FRAMEWORK:NAME (repeatable)")
    p.add_argument("--variant", action="append", default=[], help="NAME:KEY=VALUE[,KEY=VALUE...] (repeatable)")
    args = p.parse_args(argv)
    if args.image_size is None:
        args.image_size = DEFAULT_IMAGE_SIZE.get(args.model, 224)
    if args.rounds is not None:
        args.min_rounds = args.max_rounds = args.rounds
    if not 1 <= args.min_rounds <= args.max_rounds:
        p.error("need 1 <= --min-rounds <= --max-rounds")
    return args


def main() -> None:
    args = parse_args()
    variants = {"dlbench": ({}, ())}
    if args.variant:
        variants = {}
        for text in args.variant:
            name, _, assignments = text.partition(":")
            items = [a for a in assignments.split(",") if a]
            env = dict(a.split("=", 1) for a in items if not a.startswith("--"))
            variants[name] = (env, tuple(a for a in items if a.startswith("--")))
    baselines = chosen_baselines(args.baseline, args.frameworks)
    for fw in args.frameworks:
        if not (REPO / ".venvs" / fw / "bin/python").exists():
            print(f"{fw}: environment not built, skipped")
            continue
        if not baselines[fw]:
            print(f"{fw}: no benchmarks/baselines/{fw}_*.py, skipped")
            continue

        def run_arm(kind, name, fw=fw):
            if kind == "baseline":
                return run_baseline(fw, name, args)
            return run_dlbench(fw, args, *variants[name]), None

        print_summary(fw, measure_framework(fw, baselines[fw], list(variants), args, run_arm), args)


if __name__ == "__main__":
    main()
