"""LLM GPU check: a dlbench LLM runner beside an independent definition of the same Llama on
the same GPU, in one process, rounds alternating (docs/gpu.md, "The LLM line"):

    python benchmarks/llm_gpu_check.py --framework pytorch [--model llama3_1b --batch 4 --seq-len 2048]
    python benchmarks/llm_gpu_check.py --framework jax     # needs transformers 4.57 (.whl-flax)
    python benchmarks/llm_gpu_check.py --framework jax --device cpu --model llama_small \
        --batch 2 --seq-len 64 --warmup 1 --steps 2 --rounds 2 --layers 1       # smoke test
    python benchmarks/llm_gpu_check.py --precision fp8 --arms window amp --compile   # float8 vs bf16
    python benchmarks/llm_gpu_check.py --precision fp8 --arms window amp --fp8-emulation \
        --device cpu --model llama_small --batch 2 --seq-len 64 --warmup 1 --steps 2 --rounds 2

Arms, in rotating order each round: the runner through the worker's timed loop with window
sync (its GPU default: CUDA events for PyTorch, each loss's ready time for JAX), the same runner
with per-step sync, a second runner in amp (`amp`: beside a `--precision fp8` runner, float8's
gain over bf16 and the two loss curves, step for step), and a bare loop of transformers'
LlamaForCausalLM (PyTorch, SDPA) or FlaxLlamaForCausalLM (JAX; without Llama 3.1's RoPE
scaling, which it lacks: the same operations, other constant angles) with the runner's AdamW,
loss and tokens. One process keeps start-up and compilation out of the rounds; fresh-process
rounds are benchmarks/llm_overhead.py. Prints tokens/s per arm, runner ÷ reference, per-step ÷
window and runner ÷ amp (median, bootstrap 95 % interval: dlbench.analysis.stats), J/token and W
(NVML), MFU against the GPU's dense peak for the runner's precision (fp8: its fp8 peak), the
fp8 runner's and the amp runner's losses step by step, and the process's peak device memory;
`--json` writes them too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]
clock = time.perf_counter
STARTED = clock()
ARMS = ("window", "per-step", "reference", "xla-attention", "amp")
DEFAULT_ARMS = ("window", "per-step", "reference")


def build_runner(args, attention: str | None = None, precision: str | None = None):
    """The runner as the worker builds it; `attention` (JAX) forces that implementation of
    jax.nn.dot_product_attention instead of the runner's choice (the xla-attention arm);
    `precision` another than --precision (the amp arm)."""
    from dlbench.coords import RunCoords
    from dlbench.runners import framework_module
    from dlbench.runners.base import RunSpec

    precision = precision or args.precision
    coords = RunCoords(args.framework, args.model, precision, "synthetic", str(args.batch), "1x1", "single", 1)
    options = {"fp8_emulation": True} if args.fp8_emulation else {}
    spec = RunSpec(coords=coords, batch=args.batch, image_size=0, seq_len=args.seq_len, threads=args.threads,
                   device=args.device, compile=args.compile, options=options)  # fmt: skip
    runner = framework_module(args.framework).Runner(spec)
    runner.import_framework()
    if attention is None:
        runner.build()
        return runner
    from dlbench.runners.jax import llm

    chosen = llm.attention_implementation
    llm.attention_implementation = lambda backend, dtype: attention
    try:
        runner.build()
    finally:
        llm.attention_implementation = chosen
    return runner


def step_memory(runner) -> dict | None:
    """XLA's memory analysis of a JAX runner's compiled step (bytes), None for PyTorch."""
    analysis = getattr(getattr(runner, "step_fn", None), "memory_analysis", lambda: None)()
    if analysis is None:
        return None
    names = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes", "alias_size_in_bytes")
    return {name: int(getattr(analysis, name, 0) or 0) for name in names}


def build_reference(args):
    """(step, sync) of transformers' definition, through benchmarks/llm_bare_loop.py."""
    import llm_bare_loop

    bf16 = args.precision != "fp32"  # fp8's reference: bf16 (transformers has no float8 of its own)
    options = SimpleNamespace(**vars(args), definition="transformers", bf16=bf16, plain_rope=True)
    if args.framework == "jax":
        return llm_bare_loop.jax_trainer(options)
    return llm_bare_loop.torch_trainer(options, compiled=args.compile)


def runner_block(runner, args, window: bool, meter, losses: list | None = None) -> float:
    """Tokens/s over the measured steps of one timed-loop block (its warm-up steps before them);
    the block's losses are appended to `losses`."""
    from dlbench.launch.worker import time_steps

    # PyTorch's window clock is CUDA events: none on a CPU. JAX's runs on any backend.
    runner.window_sync = window and (args.device == "cuda" or args.framework == "jax")
    steps = time_steps(runner, args.warmup, args.steps, 0, 0, meter)
    if losses is not None:
        losses.extend(s["loss"] for s in steps)
    measured = [s for s in steps if s["phase"] == "measure"]
    return sum(s["samples"] for s in measured) / (measured[-1]["t_end"] - measured[0]["t_start"])


def reference_block(reference, args, losses: list) -> float:
    step, sync = reference
    for _ in range(args.warmup):
        step()
    sync()
    start = clock()
    for _ in range(args.steps):
        loss = step()
    sync()
    elapsed = clock() - start
    losses.append(float(loss))
    return args.steps * args.batch * args.seq_len / elapsed


def ratio(reference: list[float], candidate: list[float]) -> dict:
    from dlbench.analysis import stats

    ratios = [c / r for r, c in zip(reference, candidate, strict=True)]
    low, high = stats.ratio_ci("median", reference, candidate) if len(ratios) > 1 else (min(ratios), max(ratios))
    return {"median": statistics.median(ratios), "low": low, "high": high, "n": len(ratios)}


def efficiency(args, runner, tokens_per_s: float, meter) -> dict:
    from dlbench import llm
    from dlbench.devices import peak

    name = runner.describe()["device_name"]
    flops = llm.train_flops_per_token(args.model, args.seq_len)
    basis = peak(name, args.precision)
    energy = meter.record()
    result = {"device_name": name, "train_flops_per_token": flops, "tflops": tokens_per_s * flops / 1e12}
    if basis:
        result |= {"mfu": result["tflops"] / basis[0], "peak": basis[1]}
    if energy["measured"]:
        window_tokens = tokens_per_s * energy["window_s"]
        result |= {"joules_per_token": energy["joules"] / window_tokens, "watts": energy["joules"] / energy["window_s"]}
        result["energy_too_short"] = energy["too_short"]
    else:
        result["energy"] = energy["reason"]
    return result | {"device_memory": runner.device_memory()}


def check(args) -> dict:
    from dlbench.launch import energy

    arms = tuple(args.arms)
    runner = build_runner(args)
    print(f"[{clock() - STARTED:.1f} s] the runner is built (step compiled): {attention_of(runner)}", flush=True)
    runners = {arm: runner for arm in arms if arm != "reference"}
    if "xla-attention" in arms:
        runners["xla-attention"] = build_runner(args, attention="xla")
        print(f"[{clock() - STARTED:.1f} s] the xla-attention runner is built", flush=True)
    if "amp" in arms:
        runners["amp"] = build_runner(args, precision="amp")
        print(f"[{clock() - STARTED:.1f} s] the amp runner is built", flush=True)
    reference = build_reference(args) if "reference" in arms else None
    print(f"[{clock() - STARTED:.1f} s] the reference is built", flush=True)
    blocks: dict[str, list[float]] = {arm: [] for arm in arms}
    meter, timing, reference_losses = None, {}, []
    # Each runner's losses, step by step: the window arm and the amp arm (one runner each) take
    # their steps in the same rounds, so their i-th losses are the same step's.
    runner_losses: dict[str, list] = {arm: [] for arm in ("window", "amp") if arm in arms}
    for r in range(args.rounds):
        shift = r % len(arms)
        for arm in arms[shift:] + arms[:shift]:
            if arm == "reference":
                blocks[arm].append(reference_block(reference, args, reference_losses))
                continue
            block_meter = energy.open_meter(args.device, [0])
            losses = runner_losses.get(arm)
            blocks[arm].append(runner_block(runners[arm], args, arm != "per-step", block_meter, losses))
            meter = block_meter if arm == "window" else meter
            timing[arm] = runners[arm].timing()
        print(
            f"[{clock() - STARTED:.1f} s] round {r + 1}: "
            + ", ".join(f"{a} {v[-1]:.1f}" for a, v in blocks.items())
            + " tokens/s",
            flush=True,
        )
        if args.json:  # each round kept: a stage stopped by its time limit still leaves its rounds
            Path(args.json).write_text(
                json.dumps(results(args, runners, blocks, timing, reference_losses, meter, runner_losses), indent=1)
            )
    result = results(args, runners, blocks, timing, reference_losses, meter, runner_losses)
    for each in {id(r): r for r in runners.values()}.values():
        each.close()
    return result


def attention_of(runner) -> str:
    return str(runner.describe().get("attention") or "the framework's attention")


# (key, candidate arm, baseline arm): each ratio the results give where both arms ran.
RATIOS = (
    ("runner_over_reference", "window", "reference"),
    ("per_step_over_window", "per-step", "window"),
    ("window_over_xla_attention", "window", "xla-attention"),
    ("window_over_amp", "window", "amp"),
)


def results(args, runners, blocks, timing, reference_losses, meter, runner_losses=None) -> dict:
    medians = {arm: statistics.median(values) for arm, values in blocks.items()}
    runner = runners["window"]
    return {
        **loss_comparison(runner_losses or {}),
        **({"float8": runner.describe()["float8"]} if "float8" in runner.describe() else {}),
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
        "framework": runner.describe().get("version"),
        "attention": {arm: attention_of(r) for arm, r in runners.items()},
        "step_memory": {arm: step_memory(r) for arm, r in runners.items()},
        "timing": timing,
        "reference_loss": reference_losses[-1] if reference_losses else None,
        "rounds": blocks,
        "median_tokens_per_s": medians,
        **{key: ratio(blocks[base], blocks[arm]) for key, arm, base in RATIOS if blocks.get(arm) and blocks.get(base)},
        **efficiency(args, runner, medians["window"], meter),
    }


def loss_comparison(runner_losses: dict) -> dict:
    """The window arm's losses against the amp arm's, step for step (fp8 against bf16): each
    list, and the largest relative difference."""
    if not runner_losses.get("amp") or not runner_losses.get("window"):
        return {}
    pairs = [(w, a) for w, a in zip(runner_losses["window"], runner_losses["amp"], strict=False) if w and a]
    gap = max((abs(w - a) / abs(a) for w, a in pairs), default=None)
    return {"losses": runner_losses, "loss_max_relative_difference_vs_amp": gap}


def summary(result: dict) -> str:
    s = result["settings"]
    lines = [f"== {s['framework']} {s['model']} batch {s['batch']} x {s['seq_len']} {s['precision']} "
             f"compile={'on' if s['compile'] else 'off'} on {result['device_name']}"]  # fmt: skip
    for arm, value in result["median_tokens_per_s"].items():
        lines.append(
            f"  {arm:10s} {value:10.1f} tokens/s (rounds: {', '.join(f'{v:.1f}' for v in result['rounds'][arm])})"
        )
    for key, _, _ in RATIOS:
        if key not in result:
            continue
        r = result[key]
        lines.append(f"  {key.replace('_', ' ')}: {r['median']:.3f} [{r['low']:.3f}, {r['high']:.3f}] (n={r['n']})")
    lines.append(
        f"  {result['tflops']:.1f} TFLOP/s"
        + (f", MFU {result['mfu']:.1%} of {result['peak']}" if "mfu" in result else "")
    )
    if "joules_per_token" in result:
        lines.append(f"  {result['joules_per_token']:.4g} J/token, {result['watts']:.0f} W")
    if result.get("loss_max_relative_difference_vs_amp") is not None:
        last = {arm: values[-1] for arm, values in result["losses"].items()}
        lines.append(
            f"  losses, last: {s['precision']} {last['window']:.5f}, amp {last['amp']:.5f}; largest relative "
            f"difference over {len(result['losses']['amp'])} steps {result['loss_max_relative_difference_vs_amp']:.2e}"
        )
    if "float8" in result:
        f8 = result["float8"]
        lines.append(f"  float8: torchao {f8['torchao']}, emulate={f8['emulate']}, {f8['converted']} linear layers")
    for arm, memory in (result.get("step_memory") or {}).items():
        if memory:
            lines.append(
                f"  {arm}: XLA's step temp {memory['temp_size_in_bytes'] / 2**30:.1f} GiB, "
                f"arguments {memory['argument_size_in_bytes'] / 2**30:.1f} GiB ({result['attention'][arm]})"
            )
    memory = result["device_memory"]
    if memory:
        lines.append(
            f"  peak device memory (runner and reference in one process): {memory['peak_bytes'] / 2**30:.1f} GiB"
        )
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--framework", choices=("pytorch", "jax"), default="pytorch")
    p.add_argument("--model", default="llama3_1b")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--precision", choices=("fp32", "amp", "fp8"), default="amp")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--threads", type=int, default=min(8, os.cpu_count() or 1))
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--compile", action="store_true", help="PyTorch: torch.compile the runner and the reference alike")
    p.add_argument("--fp8-emulation", action="store_true", help="PyTorch fp8: torchao's emulation (a CPU's path)")
    arms_help = "window must be one; xla-attention (JAX) builds a second runner with XLA's attention"
    p.add_argument("--arms", nargs="+", choices=ARMS, default=list(DEFAULT_ARMS), help=arms_help)
    p.add_argument("--json", default=None, help="also write the results here")
    layers_help = "the model's blocks (0: its shape's); fewer make a quick check of this script's paths, never a figure"
    p.add_argument("--layers", type=int, default=0, help=layers_help)
    return p.parse_args(argv)


def override_layers(model: str, layers: int) -> None:
    """The runner, the reference and the FLOPs all read the model's shape from dlbench.llm."""
    import dataclasses

    from dlbench import llm

    llm.SHAPES[model] = dataclasses.replace(llm.shape(model), layers=layers)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.compile and args.framework != "pytorch":
        sys.exit("llm_gpu_check: --compile is PyTorch's (JAX always compiles its step)")
    if "window" not in args.arms:
        sys.exit("llm_gpu_check: --arms must include window")
    if "xla-attention" in args.arms and args.framework != "jax":
        sys.exit("llm_gpu_check: the xla-attention arm is JAX's")
    if "amp" in args.arms and args.precision == "amp":
        sys.exit("llm_gpu_check: the amp arm is beside a runner of another precision (--precision fp8)")
    if args.layers:
        override_layers(args.model, args.layers)
    print(summary(check(args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
