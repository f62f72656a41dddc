"""Where the JAX runner's Llama loses to transformers' FlaxLlamaForCausalLM on XLA:CPU (issue #39
item 5): variants of the runner and of its definition, each timed beside the Flax reference in
one process, and what each compiled step costs (HLO cost, XLA's temporary buffer, page faults):

    .venvs/jax/bin/python benchmarks/jax_llama_ablation.py --rounds 20          # the default arms
    .venvs/jax/bin/python benchmarks/jax_llama_ablation.py --arms flax ours rope-const attn-einsum
    .venvs/jax/bin/python benchmarks/jax_llama_ablation.py --arms flax scoped --rounds 0 --profile 4

Every arm trains llama_small (fp32, batch 2 x 128 tokens, 2 threads by default) with the same
loss, optax AdamW and tokens, one `jax.jit` step with the state donated. A round resets each
arm's state to its initial values, runs its warm-up steps, then steps the arms in turn, one
synced step each (`--blocks`: a block of steps per arm), so that a change of the host's load
falls on every arm alike. The arms:

- `flax`: transformers' FlaxLlamaForCausalLM (benchmarks/llm_bare_loop.py's reference), the
  denominator of every ratio;
- `runner`: the dlbench runner itself (Runner.build: dlbench/runners/jax/llm.py's Llama, its
  step compiled ahead of time with the strategy's in/out shardings), stepped as the worker's
  per-step loop steps it (next_batch, step, sync: its CPU default; `--blocks`: through
  dlbench.launch.worker.time_steps);
- `runner-fix`: the same with the two changes proposed for llm.py: llm.initial_state replaced
  by `head_first_initial_state` below (the parameters' tree with the head's leaves first) and
  llm.Llama by `proposed_llama` (RoPE's cos/sin computed on the host: `rope-const`);
- `runner-step`: the runner's compiled step (shardings, ahead-of-time) in the bare loop;
- `ours`: the runner's Llama (llm.Llama) in the bare loop; `head-first`: the same with its
  parameters head first; `ours-memsched`, `flax-memsched`: ours and flax compiled with
  XLA:CPU's memory-optimised scheduler (`xla_cpu_scheduler_type`);
- `scoped`: a copy of llm.Llama written here with named scopes (rope, attention, swiglu) for
  `--profile`; with no option it is llm.Llama operation for operation (the same HLO cost and
  losses), and its variants change one thing each: `rope-const` (cos/sin computed on the host,
  constants of the step, as Flax's sinusoid table), `attn-repeat` (K/V repeated to every head
  before `jax.nn.dot_product_attention`), `attn-einsum` (FlaxLlama's attention: K/V repeated,
  query scaled, additive mask, einsums, float32 softmax), `norm-flax` (FlaxLlama's RMSNorm:
  x / sqrt(mean(x²) + eps)), `scale-q` (the query scaled before the call, scale=1 in it),
  `const+repeat` (rope-const and attn-repeat), `const+head-first` (rope-const with the
  parameters head first).

Prints for each compiled step its HLO cost (flops, bytes accessed, transcendentals), XLA's
temporary buffer, its minor page faults and kernel CPU time per step and its first losses;
then each round's tokens/s, and per arm its median tokens/s and arm ÷ flax: the median of the
rounds' ratios with its paired 95 % bootstrap interval (dlbench.analysis.stats.bootstrap_ci),
the ratio of the medians with stats.ratio_ci's interval (unpaired, as llm_overhead.py) and the
ratio of the fastest steps. `--profile N`: a jax.profiler trace of N steps per arm, each XLA
op's time summed by part of the model (the part read from the op's metadata).
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

VARIANTS = {  # arm: options of the scoped copy
    "scoped": {},
    "rope-const": {"rope": "const"},
    "attn-repeat": {"attention": "repeat"},
    "attn-einsum": {"attention": "einsum"},
    "norm-flax": {"norm": "flax"},
    "scale-q": {"attention": "scale-q"},
    "const+repeat": {"rope": "const", "attention": "repeat"},
    "const+head-first": {"rope": "const", "head_first": True},
}
# Arms of the runner's Llama that change no operation: its parameter tree with the head's leaves
# first (as FlaxLlama's: lm_head, then model) in the bare loop (`head-first`), or its step
# compiled with XLA:CPU's memory-optimised scheduler; `runner-fix`: the runner with both changes
# proposed for dlbench/runners/jax/llm.py (head_first_initial_state, proposed_llama below).
MEMORY_SCHEDULER = {"xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"}
ARMS = ("flax", "runner", "runner-fix", "runner-step", "ours", "head-first", "ours-memsched", "flax-memsched")
ARMS += tuple(VARIANTS)
DEFAULT_ARMS = ("flax", "runner", "runner-fix", "ours", "head-first")  # each holds ~1.1 GB (state, host copy)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arms", nargs="+", choices=ARMS, default=list(DEFAULT_ARMS), help="flax is always timed")
    p.add_argument("--model", default="llama_small")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=16)
    p.add_argument(
        "--blocks",
        action="store_true",
        help="a round times a block of warm-up + measured steps per arm (the runner through the worker's "
        "timed loop) instead of stepping the arms in turn, one synced step each",
    )
    p.add_argument("--profile", type=int, default=0, metavar="N", help="trace N steps per arm: op time by part")
    p.add_argument("--profile-rounds", type=int, default=3, help="traces per arm, rotating (median per part)")
    args = p.parse_args(argv)
    args.arms = ["flax", *[a for a in args.arms if a != "flax"]]
    return args


# ------------------------------------------------------------------ the runner's Llama, scoped


def scoped_llama(model: str, options: dict, dtype=None):
    """A copy of dlbench.runners.jax.llm.Llama (same parameters, same operations) with named
    scopes for the profile, and one change per option (module docstring). Longer than 60
    lines on purpose: the whole definition in one place, so that each variant is one `if`
    beside the line it changes (and the file past 450 lines for the same reason: the arms)."""
    from typing import Any

    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import numpy as np

    from dlbench import llm as shapes
    from dlbench.runners.jax import llm

    rope, attention, norm = options.get("rope"), options.get("attention"), options.get("norm")

    class FlaxNorm(nn.Module):  # FlaxLlamaRMSNorm's arithmetic, llm.RMSNorm's parameter
        eps: float
        dtype: Any = jnp.float32

        @nn.compact
        def __call__(self, x):
            weight = self.param("weight", nn.initializers.ones, (x.shape[-1],))
            x32 = x.astype(jnp.float32)
            normed = x / jnp.sqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
            return weight * normed.astype(self.dtype)

    Norm = FlaxNorm if norm == "flax" else llm.RMSNorm

    def attend(q, k, v, s):
        groups = s.heads // s.kv_heads
        if attention in ("repeat", "einsum"):
            k, v = jnp.repeat(k, groups, axis=2), jnp.repeat(v, groups, axis=2)
        if attention == "einsum":  # FlaxLlamaAttention with flax.linen's dot_product_attention_weights
            seq = q.shape[1]
            bias = np.where(np.tril(np.ones((seq, seq), bool)), 0.0, np.finfo(np.float32).min).astype(np.float32)
            weights = jnp.einsum("...qhd,...khd->...hqk", q / jnp.sqrt(s.head_dim).astype(q.dtype), k)
            weights = jax.nn.softmax((weights + bias).astype(jnp.float32)).astype(q.dtype)
            return jnp.einsum("...hqk,...khd->...qhd", weights, v)
        if attention == "scale-q":
            return jax.nn.dot_product_attention(
                q / np.sqrt(s.head_dim).astype(q.dtype), k, v, scale=1.0, is_causal=True
            )
        return jax.nn.dot_product_attention(q, k, v, is_causal=True)

    class Block(nn.Module):
        shape: shapes.LlamaShape
        dtype: Any = jnp.float32

        def dense(self, features: int, name: str):
            init = nn.initializers.normal(self.shape.init_std)
            return nn.Dense(features, use_bias=False, dtype=self.dtype, kernel_init=init, name=name)

        @nn.compact
        def __call__(self, x, cos, sin):
            s = self.shape
            batch, seq, _ = x.shape
            h = Norm(s.norm_eps, self.dtype, name="attention_norm")(x)
            q = self.dense(s.heads * s.head_dim, "q")(h).reshape(batch, seq, s.heads, s.head_dim)
            k = self.dense(s.kv_heads * s.head_dim, "k")(h).reshape(batch, seq, s.kv_heads, s.head_dim)
            v = self.dense(s.kv_heads * s.head_dim, "v")(h).reshape(batch, seq, s.kv_heads, s.head_dim)
            with jax.named_scope("rope"):
                q, k = llm.rotate(q, cos, sin), llm.rotate(k, cos, sin)
            with jax.named_scope("attention"):
                attended = attend(q, k, v, s)
            x = x + self.dense(s.hidden, "o")(attended.reshape(batch, seq, -1))
            h = Norm(s.norm_eps, self.dtype, name="ffn_norm")(x)
            gate, up = self.dense(s.ffn, "gate")(h), self.dense(s.ffn, "up")(h)
            with jax.named_scope("swiglu"):
                gated = nn.silu(gate) * up
            return x + self.dense(s.hidden, "down")(gated)

    class ScopedLlama(nn.Module):
        model: str
        dtype: Any = jnp.float32

        @nn.compact
        def __call__(self, tokens):
            s = shapes.shape(self.model)
            init = nn.initializers.normal(s.init_std)
            embed = nn.Embed(s.vocab, s.hidden, embedding_init=init, dtype=self.dtype, name="embed")
            with jax.named_scope("rope"):
                inv_freq = shapes.rope_inv_freq(self.model)
                if rope == "const":  # the host computes the table once: constants of the step
                    angles = np.outer(np.arange(tokens.shape[1], dtype=np.float32), np.asarray(inv_freq, np.float32))
                    angles = np.concatenate((angles, angles), axis=-1)[None, :, None, :]
                    cos, sin = np.cos(angles), np.sin(angles)
                else:
                    positions = jnp.arange(tokens.shape[1], dtype=jnp.float32)
                    angles = jnp.outer(positions, jnp.asarray(inv_freq, jnp.float32))
                    angles = jnp.concatenate((angles, angles), axis=-1)[None, :, None, :]
                    cos, sin = jnp.cos(angles), jnp.sin(angles)
            x = embed(tokens)
            for i in range(s.layers):
                x = Block(s, self.dtype, name=f"block{i}")(x, cos, sin)
            x = Norm(s.norm_eps, self.dtype, name="norm")(x)
            if s.tied_embeddings:
                return embed.attend(x)
            return nn.Dense(s.vocab, use_bias=False, dtype=self.dtype, kernel_init=init, name="head")(x)

    return ScopedLlama(model) if dtype is None else ScopedLlama(model, dtype)


# ------------------------------------------------------------------- the proposed change


def head_first(params):
    """The parameters with the head's leaves first, the others in jax's (sorted) order: an
    OrderedDict, whose order jax keeps (it sorts a dict's keys). A model without a head (tied
    embeddings) keeps jax's order."""
    import collections

    return collections.OrderedDict(sorted(params.items(), key=lambda item: (item[0] != "head", item[0])))


def proposed_llama(model: str, dtype, activation_checkpointing: str = "none"):
    """dlbench.runners.jax.llm.Llama with RoPE's cos/sin computed on the host (numpy), constants
    of the step (`rope-const`): the other change proposed for llm.py."""
    if activation_checkpointing != "none":
        raise ValueError("runner-fix: the proposed Llama is written here without activation checkpointing")
    return scoped_llama(model, VARIANTS["rope-const"], dtype)


def head_first_initial_state(module, seq_len: int, seed: int, strategy, optim):
    """dlbench.runners.jax.llm.initial_state with the parameters' tree head first (head_first)."""
    import jax
    import jax.numpy as jnp

    def init():
        params = head_first(module.init(jax.random.key(seed), jnp.zeros((1, seq_len), jnp.int32))["params"])
        return params, optim.init(params)

    shardings = strategy.state(jax.eval_shape(init))
    return jax.jit(init, out_shardings=shardings)(), shardings


# ------------------------------------------------------------------------------ the arms


class Arm:
    """A compiled step, its initial state on the host and its tokens: `block()` resets the
    state, runs the warm-up steps, then times the measured ones (tokens/s)."""

    def __init__(self, name, compiled, state, tokens, args):
        import jax
        import numpy as np

        self.name, self.compiled, self.tokens, self.args = name, compiled, tokens, args
        self.shardings = jax.tree.map(lambda x: x.sharding, state)
        self.host = jax.tree.map(np.asarray, state)
        self.losses = []

    def fresh(self):
        import jax

        return jax.device_put(self.host, self.shardings)

    def block(self) -> float:
        args, step, tokens = self.args, self.compiled, self.tokens
        state = self.fresh()
        for _ in range(args.warmup):
            state, loss = step(state, tokens)
        loss.block_until_ready()
        start = time.perf_counter()
        for _ in range(args.steps):
            state, loss = step(state, tokens)
        loss.block_until_ready()
        elapsed = time.perf_counter() - start
        self.losses = [float(loss)]
        return args.steps * args.batch * args.seq_len / elapsed

    def start(self) -> None:
        """Interleaved rounds: the initial state and the warm-up steps, untimed."""
        self.state = self.fresh()
        for _ in range(self.args.warmup):
            self.state, loss = self.compiled(self.state, self.tokens)
        loss.block_until_ready()

    def one(self) -> float:
        """Interleaved rounds: one step, synced, in seconds."""
        start = time.perf_counter()
        self.state, loss = self.compiled(self.state, self.tokens)
        loss.block_until_ready()
        return time.perf_counter() - start

    def first_losses(self, n: int = 3) -> list[float]:
        state, losses = self.fresh(), []
        for _ in range(n):
            state, loss = self.compiled(state, self.tokens)
            losses.append(float(loss))
        return losses

    def faults(self, n: int = 3) -> tuple[float, float]:
        """(minor page faults, kernel CPU ms) per step over `n` steps after one warm-up step."""
        import resource

        state, loss = self.compiled(self.fresh(), self.tokens)
        loss.block_until_ready()
        before = resource.getrusage(resource.RUSAGE_SELF)
        for _ in range(n):
            state, loss = self.compiled(state, self.tokens)
        loss.block_until_ready()
        after = resource.getrusage(resource.RUSAGE_SELF)
        return (after.ru_minflt - before.ru_minflt) / n, (after.ru_stime - before.ru_stime) / n * 1e3

    def hlo(self) -> str:
        return self.compiled.as_text()


class RunnerArm(Arm):
    """The dlbench runner through the worker's timed loop (tokens/s over its measured window)."""

    def __init__(self, runner, args, name="runner"):
        super().__init__(name, runner.step_fn, runner.state, runner.inputs[0], args)
        self.runner = runner

    def block(self) -> float:
        from dlbench.launch.worker import time_steps

        self.runner.state = self.fresh()
        self.runner._last = None
        steps = time_steps(self.runner, self.args.warmup, self.args.steps, 0, 0)
        measured = [s for s in steps if s["phase"] == "measure"]
        self.losses = [measured[-1]["loss"]]
        return sum(s["samples"] for s in measured) / (measured[-1]["t_end"] - measured[0]["t_start"])

    def start(self) -> None:
        runner = self.runner
        runner.state, runner._last = self.fresh(), None
        for _ in range(self.args.warmup):
            runner.step(runner.next_batch())
        runner.sync()

    def one(self) -> float:  # the worker's per-step loop (_per_step_sync): batch, step, sync, clock
        runner = self.runner
        start = time.perf_counter()
        runner.step(runner.next_batch())
        runner.sync()
        return time.perf_counter() - start


def bare_step(logits_of, optim):
    """llm_bare_loop.jax_trainer's step: the runner's loss and AdamW, jitted, the state donated."""
    import jax
    import jax.numpy as jnp
    import optax

    def loss_fn(params, tokens):
        logits = logits_of(params, tokens[:, :-1]).astype(jnp.float32)
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    def train_step(state, tokens):
        params, opt_state = state
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        updates, opt_state = optim.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    return jax.jit(train_step, donate_argnums=(0,))


def build_arms(args) -> dict[str, Arm]:
    import jax
    import jax.numpy as jnp
    import llm_bare_loop

    from dlbench.runners.jax import llm

    optim = llm.optimizer()
    spec = SimpleNamespace(coords=SimpleNamespace(model=args.model), batch=args.batch, local_devices=1,
                           seq_len=args.seq_len, seed=1)  # fmt: skip
    tokens = jnp.asarray(llm.tokens(spec, 1, 0))
    arms = {}

    def add(name, logits_of, params, options=None):
        step = bare_step(logits_of, optim)
        state = (params, optim.init(params))
        started = time.perf_counter()
        arms[name] = Arm(name, step.lower(state, tokens).compile(options), state, tokens, args)
        print(f"{name}: compiled in {time.perf_counter() - started:.1f} s", flush=True)

    params, logits_of = llm_bare_loop.flax_transformers_llama(args.model, jnp.float32, args.seq_len)
    add("flax", logits_of, params)
    if "flax-memsched" in args.arms:
        add("flax-memsched", logits_of, params, MEMORY_SCHEDULER)
    ours = llm.Llama(args.model, jnp.float32)
    params = ours.init(jax.random.key(1), jnp.zeros((1, args.seq_len), jnp.int32))["params"]
    if "ours" in args.arms:
        add("ours", lambda p, t, m=ours: m.apply({"params": p}, t), params)
    if "ours-memsched" in args.arms:
        add("ours-memsched", lambda p, t, m=ours: m.apply({"params": p}, t), params, MEMORY_SCHEDULER)
    if "head-first" in args.arms:  # the same parameters, the head's leaves first
        add("head-first", lambda p, t, m=ours: m.apply({"params": p}, t), head_first(params))
    for name, options in VARIANTS.items():
        if name in args.arms:
            module = scoped_llama(args.model, options)
            tree = head_first(params) if options.get("head_first") else params
            add(name, lambda p, t, m=module: m.apply({"params": p}, t), tree)
    if {"runner", "runner-step", "runner-fix"} & set(args.arms):
        import llm_gpu_check

        options = SimpleNamespace(framework="jax", model=args.model, precision="fp32", batch=args.batch,
                                  seq_len=args.seq_len, threads=args.threads, device="cpu", compile=False)  # fmt: skip
        if "runner" in args.arms or "runner-step" in args.arms:
            runner = llm_gpu_check.build_runner(options)
            print(f"runner: built, step compiled in {runner.compile_record['seconds']} s", flush=True)
            if "runner" in args.arms:
                arms["runner"] = RunnerArm(runner, args)
            if "runner-step" in args.arms:
                arms["runner-step"] = Arm("runner-step", runner.step_fn, runner.state, runner.inputs[0], args)
        if "runner-fix" in args.arms:
            originals = llm.initial_state, llm.Llama
            llm.initial_state, llm.Llama = head_first_initial_state, proposed_llama
            try:
                runner = llm_gpu_check.build_runner(options)
            finally:
                llm.initial_state, llm.Llama = originals
            print(f"runner-fix: built, step compiled in {runner.compile_record['seconds']} s", flush=True)
            arms["runner-fix"] = RunnerArm(runner, args, "runner-fix")
    return {name: arms[name] for name in args.arms}


# ---------------------------------------------------------------------------- the figures


def cost(arm: Arm) -> dict:
    analysis = arm.compiled.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, list) else analysis
    result = {k: analysis.get(k, float("nan")) for k in ("flops", "bytes accessed", "transcendentals")}
    return result | {"temp": arm.compiled.memory_analysis().temp_size_in_bytes}


PARTS = (  # (part, pattern on the op's metadata path inside the model), first match wins
    ("embedding", r"/embed(_tokens)?/"),
    ("head", r"/(lm_)?head/"),
    ("rope", r"rotary_emb|/rope/|jvp\(\w+\)/(sin|cos)$"),
    ("q/k/v/o matmuls", r"/(q|k|v|o)(_proj)?/"),
    ("gate/up/down matmuls", r"/(gate|up|down)(_proj)?/"),
    ("rms norms", r"/(attention_norm|ffn_norm|input_layernorm|post_attention_layernorm|norm)/"),
    ("attention", r"/attention/|self_attn/"),
    ("swiglu", r"/swiglu/|/mlp/"),
)


def part_of(op_name: str) -> str:
    """The part of the step an XLA op's metadata `op_name` belongs to."""
    path = op_name.split(";")[0]
    if not path:
        return "unnamed (copies, XLA's own)"
    if "jvp(" not in path:
        return "AdamW update"
    if not re.search(r"jvp\(\w*Llama\w*\)", path):
        return "loss (cross-entropy)"
    for part, pattern in PARTS:
        if re.search(pattern, path):
            return part
    return "residual adds, other"


def op_parts(hlo: str) -> dict[str, str]:
    """HLO instruction name -> part, from the compiled module's text."""
    parts = {}
    for line in hlo.splitlines():
        match = re.match(r"\s*(?:ROOT )?%?([^\s=]+) = ", line)
        if match:
            found = re.search(r'op_name="([^"]*)"', line)
            parts[match.group(1)] = part_of(found.group(1) if found else "")
    return parts


def profile(arm: Arm, steps: int) -> tuple[dict[str, list[float]], float]:
    """Each XLA op's thunk times (seconds, one per execution) over `steps` traced steps, and
    the wall seconds per step."""
    import jax

    state = arm.fresh()
    for _ in range(arm.args.warmup):
        state, loss = arm.compiled(state, arm.tokens)
    loss.block_until_ready()
    where = tempfile.mkdtemp(prefix="jax_llama_ablation_")
    try:
        with jax.profiler.trace(where):
            start = time.perf_counter()
            for _ in range(steps):
                state, loss = arm.compiled(state, arm.tokens)
            loss.block_until_ready()
            wall = (time.perf_counter() - start) / steps
        data = jax.profiler.ProfileData.from_file(glob.glob(f"{where}/**/*.xplane.pb", recursive=True)[0])
        durations = collections.defaultdict(list)
        for plane in data.planes:
            for line in plane.lines:
                for event in line.events:
                    durations[event.name].append(event.duration_ns / 1e9)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    return durations, wall


def by_part(arm: Arm, traces: list, steps: int) -> dict[str, tuple[float, float]]:
    """Seconds per step by part of the model: (the sum of each op's fastest execution, the sum
    of each op's median one) × its executions per step. The fastest is what contention from
    other work on the host leaves least changed."""
    parts = op_parts(arm.hlo())
    ops = collections.defaultdict(list)
    for durations, _ in traces:
        for name, seconds in durations.items():
            if name in parts:
                ops[name] += seconds
    result = collections.defaultdict(lambda: [0.0, 0.0])
    for name, seconds in ops.items():
        per_step = len(seconds) / (steps * len(traces))
        result[parts[name]][0] += min(seconds) * per_step
        result[parts[name]][1] += statistics.median(seconds) * per_step
    return {part: tuple(v) for part, v in result.items()}


def print_steps(arms: dict) -> None:
    print(
        "Each compiled step: HLO cost (cost_analysis), XLA's temporary buffer (memory_analysis), minor "
        "page faults and kernel CPU ms per step (getrusage over 3 steps), its first three losses:"
    )
    for name, arm in arms.items():
        c, (faults, kernel) = cost(arm), arm.faults()
        losses = ", ".join(f"{x:.6f}" for x in arm.first_losses())
        print(
            f"  {name:13s} {c['flops'] / 1e9:7.3f} GFLOP {c['bytes accessed'] / 1e9:6.4f} GB "
            f"{c['transcendentals'] / 1e6:6.2f} M transc. temp {c['temp'] / 2**20:6.1f} MiB "
            f"{faults:7.0f} faults {kernel:5.1f} ms sys; losses {losses}",
            flush=True,
        )


def cpu_seconds() -> tuple[float, float]:
    """(user + kernel, kernel) CPU seconds of this process so far, all its threads."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, usage.ru_stime


def time_rounds(args, arms: dict) -> tuple[dict, dict, dict]:
    """Tokens/s of every arm in every round, each arm's fastest step (seconds), and (interleaved
    rounds) each arm's CPU seconds per step in every round, (user + kernel, kernel)."""
    names = list(arms)
    tokens = {name: [] for name in names}
    cpu = {name: [] for name in names}
    fastest = {name: float("inf") for name in names}  # a step (interleaved) or a block's mean step
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        if args.blocks:
            for name in order:
                tokens[name].append(arms[name].block())
                fastest[name] = min(fastest[name], args.batch * args.seq_len / tokens[name][-1])
        else:  # step by step, the arms in turn: a change of load falls on all of them
            for name in order:
                arms[name].start()
            seconds = dict.fromkeys(names, 0.0)
            used = {name: [0.0, 0.0] for name in names}
            for _ in range(args.steps):
                for name in order:
                    before = cpu_seconds()
                    step = arms[name].one()
                    after = cpu_seconds()
                    seconds[name] += step
                    used[name] = [u + a - b for u, a, b in zip(used[name], after, before, strict=True)]
                    fastest[name] = min(fastest[name], step)
            for name in names:
                tokens[name].append(args.steps * args.batch * args.seq_len / seconds[name])
                cpu[name].append(tuple(u / args.steps for u in used[name]))
                arms[name].state = None
        line = ", ".join(f"{n} {tokens[n][-1]:.1f}" for n in names)
        print(f"round {r + 1} (load {os.getloadavg()[0]:.2f}): {line} tokens/s", flush=True)
    return tokens, fastest, cpu


def print_ratios(tokens: dict, fastest: dict, cpu: dict) -> None:
    from dlbench.analysis import stats

    print(
        f"arm ÷ flax over {len(tokens['flax'])} rounds: the median of the rounds' ratios [95 % bootstrap "
        "interval, paired: stats.bootstrap_ci]; the ratio of the medians [stats.ratio_ci, unpaired, as "
        "llm_overhead.py]; flax's fastest step ÷ the arm's"
    )
    flax = statistics.median(tokens["flax"])
    for name, values in tokens.items():
        ratios = [a / f for a, f in zip(values, tokens["flax"], strict=True)]
        paired, unpaired = stats.bootstrap_ci("median", ratios), stats.ratio_ci("median", tokens["flax"], values)
        print(
            f"  {name:13s} {statistics.median(values):7.1f} tokens/s  {statistics.median(ratios):.3f} "
            f"[{paired[0]:.3f}, {paired[1]:.3f}]  {statistics.median(values) / flax:.3f} "
            f"[{unpaired[0]:.3f}, {unpaired[1]:.3f}]  {fastest['flax'] / fastest[name]:.3f}",
            flush=True,
        )
    if not cpu["flax"]:
        return
    print(
        "CPU time per step (user + kernel, all threads; getrusage around each step): median ms, kernel ms, "
        "and flax's ÷ the arm's, the median of the rounds' ratios [paired 95 % bootstrap interval]"
    )
    for name, values in cpu.items():
        ratios = [f[0] / a[0] for a, f in zip(values, cpu["flax"], strict=True)]
        low, high = stats.bootstrap_ci("median", ratios)
        total, kernel = (statistics.median(v[i] for v in values) * 1e3 for i in (0, 1))
        print(
            f"  {name:13s} {total:7.1f} ms  kernel {kernel:6.1f} ms  {statistics.median(ratios):.3f} "
            f"[{low:.3f}, {high:.3f}]",
            flush=True,
        )


def print_profile(args, arms: dict) -> None:
    names = list(arms)
    traces = {name: [] for name in names}
    for r in range(args.profile_rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            traces[name].append(profile(arms[name], args.profile))
    results = {name: by_part(arms[name], traces[name], args.profile) for name in names}
    parts = sorted({p for r in results.values() for p in r}, key=lambda p: -results["flax"].get(p, (0, 0))[0])
    print(
        f"ms per step by part, {args.profile_rounds} traces of {args.profile} steps per arm: each XLA op's "
        "fastest execution (its median in brackets), summed over the part's ops:"
    )
    print("  " + f"{'part':30s}" + "".join(f"{n[:15]:>16s}" for n in names))
    for part in parts:
        cells = [results[n].get(part, (0, 0)) for n in names]
        print("  " + f"{part:30s}" + "".join(f"{a * 1e3:8.1f} ({b * 1e3:5.1f})" for a, b in cells))
    sums = [[sum(x) for x in zip(*results[n].values(), strict=True)] for n in names]
    print("  " + f"{'sum of ops':30s}" + "".join(f"{a * 1e3:8.1f} ({b * 1e3:5.1f})" for a, b in sums))
    walls = [min(wall for _, wall in traces[n]) * 1e3 for n in names]
    print("  " + f"{'wall per step (fastest trace)':30s}" + "".join(f"{w:16.1f}" for w in walls))


def main(argv=None) -> int:
    args = parse_args(argv)
    allowed = sorted(os.sched_getaffinity(0))
    if args.threads < len(allowed):  # XLA:CPU sizes its pool by the CPUs it may use
        os.sched_setaffinity(0, allowed[: args.threads])
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    mode = f"{args.warmup} + {args.steps} steps a block" if args.blocks else f"{args.steps} interleaved steps"
    print(
        f"jax {jax.__version__}, {args.model} fp32 batch {args.batch} x {args.seq_len}, {args.threads} threads, "
        f"{mode} a round, {time.strftime('%Y-%m-%d %H:%M')}, load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    arms = build_arms(args)
    print_steps(arms)
    if args.rounds:
        print_ratios(*time_rounds(args, arms))
    if args.profile:
        print_profile(args, arms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
