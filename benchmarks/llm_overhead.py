"""An LLM runner (PyTorch or JAX) against the bare loop of the same Llama
(benchmarks/llm_bare_loop.py), alternating fresh processes round by round (issue #27; target:
runner ÷ bare ≥ 0.98):

    .venvs/analysis/bin/python benchmarks/llm_overhead.py [--framework jax] [--rounds 16] [--batch 2] [--seq-len 128]
    .venvs/analysis/bin/python benchmarks/llm_overhead.py [--framework jax] --definition transformers

`--definition transformers`: the bare loop trains transformers' LlamaForCausalLM (JAX:
FlaxLlamaForCausalLM) of the same shape instead of the runner's own Llama (an independent
reference: "measure both and keep the faster"); runner ÷ that loop below 1 says the runner's
definition is the slower one.

Each round runs both in its own process, in alternating order; the runner's tokens/s is read
from its step log's measured window, the bare loop's from its output. Prints every round and
the median ratio with its 95 % bootstrap interval (dlbench.analysis.stats.ratio_ci).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from dlbench.analysis import stats  # noqa: E402 (the repository on the path first)
from dlbench.steplog import rank_log_name, read_steplog  # noqa: E402

ENV = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}


def python(args) -> str:
    return args.python or str(REPO / ".venvs" / args.framework / "bin" / "python")


def environment(args) -> dict:
    """The children's environment: bare on the CPU; on a GPU the machine's own (its CUDA set-up)."""
    return ENV if args.device == "cpu" else {**os.environ, "PYTHONPATH": str(REPO)}


def bare(args) -> float:
    command = [python(args), "benchmarks/llm_bare_loop.py", "--framework", args.framework, "--model", args.model]
    command += ["--batch", str(args.batch), "--seq-len", str(args.seq_len), "--definition", args.definition]
    command += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads)]
    command += ["--device", args.device, *(["--bf16"] if args.precision == "amp" else [])]
    run = subprocess.run(command, cwd=REPO, env=environment(args), capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise SystemExit(f"the bare loop failed: {run.stderr[-2000:]}")
    return float(re.findall(r"([0-9.]+) tokens/s", run.stdout)[-1])


def runner(args) -> float:
    run_dir = Path(tempfile.mkdtemp())
    coords = ["--framework", args.framework, "--model", args.model, "--precision", args.precision]
    coords += ["--data", "synthetic", "--batch", str(args.batch), "--scale", "1x1", "--strategy", "single"]
    coords += ["--repeat", "1"]
    options = ["--run-dir", str(run_dir), "--preset", "caict2020", "--warmup-steps", str(args.warmup)]
    options += ["--measured-steps", str(args.steps), "--statistic", "mean", "--seq-len", str(args.seq_len)]
    options += ["--threads", str(args.threads), "--device", args.device]
    launch = [python(args), "-m", "dlbench.launch", *coords, *options]
    run = subprocess.run(launch, cwd=REPO, env=environment(args), capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise SystemExit(f"the runner failed: {run.stderr[-2000:]}")
    measured = read_steplog(run_dir / rank_log_name(0)).measured_steps()
    window = measured[-1]["t_end"] - measured[0]["t_start"]
    return stats.window_throughput(sum(s["samples"] for s in measured), window)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--framework", choices=("pytorch", "jax"), default="pytorch")
    p.add_argument("--definition", choices=("dlbench", "transformers"), default="dlbench")
    p.add_argument("--rounds", type=int, default=16)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--model", default="llama_small")
    p.add_argument("--precision", choices=("fp32", "amp"), default="fp32", help="amp: bf16 autocast in both")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--python", default=None, help="the interpreter (default: .venvs/<framework>); a site's own")
    args = p.parse_args()
    bares, runners = [], []
    for i in range(args.rounds):
        for arm in ("bare", "runner") if i % 2 == 0 else ("runner", "bare"):
            (bares if arm == "bare" else runners).append((bare if arm == "bare" else runner)(args))
        print(f"round {i + 1}: bare {bares[-1]:.1f}, runner {runners[-1]:.1f} tokens/s", flush=True)
    low, high = stats.ratio_ci("median", bares, runners)
    ratio = statistics.median(r / b for r, b in zip(runners, bares, strict=True))
    label = f"{args.framework} runner / bare ({args.definition} Llama)"
    print(
        f"{label}: {ratio:.3f} [{low:.3f}, {high:.3f}] (n={args.rounds}); tokens/s median bare "
        f"{statistics.median(bares):.1f}, runner {statistics.median(runners):.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
