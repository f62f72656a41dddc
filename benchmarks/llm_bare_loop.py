"""A bare training loop of a runner's Llama, as a yardstick for the dlbench harness on LLMs
(issue #27), PyTorch or JAX:

    PYTHONPATH=. .venvs/pytorch/bin/python benchmarks/llm_bare_loop.py \
        --model llama_small --batch 2 --seq-len 128 --steps 10 --warmup 2 --threads 2
    PYTHONPATH=. .venvs/jax/bin/python benchmarks/llm_bare_loop.py --framework jax ...

The model, tokens, loss and AdamW are the runner's (dlbench/runners/pytorch/llm.py; JAX: the
Flax Llama and optax AdamW of dlbench/runners/jax/llm.py in one `jax.jit` step with the state
donated, written here without shardings or ahead-of-time compile): what this leaves out is
the harness (launcher, worker, per-step sync and clock, step log), so its tokens/s against a
dlbench run of the same settings is the harness's cost on an LLM step. It is not in
benchmarks/baselines/, whose loops share nothing with the runners and take the CNN command
line of harness_overhead.py. Prints tokens/s over the measured steps.

`--definition transformers` trains an independent definition of the same network instead:
transformers' LlamaForCausalLM (PyTorch, SDPA) or FlaxLlamaForCausalLM (JAX; transformers
4.57, the last release with Flax classes, is in the JAX lock for this alone).
"""

from __future__ import annotations

import argparse
import time


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--framework", choices=("pytorch", "jax"), default="pytorch")
    p.add_argument("--model", default="llama_small")
    p.add_argument(
        "--definition",
        choices=("dlbench", "transformers"),
        default="dlbench",
        help="the runner's Llama, or transformers' (Flax)LlamaForCausalLM built from a matching LlamaConfig",
    )
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast (the runner's amp)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument(
        "--plain-rope",
        action="store_true",
        help="JAX transformers definition: drop Llama 3.1's RoPE scaling (speed only)",
    )
    return p.parse_args()


def report(framework: str, args, elapsed: float, loss: float, threads: int) -> None:
    print(
        f"{framework} bare loop {args.model} batch {args.batch} seq {args.seq_len} threads "
        f"{threads}: {args.steps * args.batch * args.seq_len / elapsed:.1f} tokens/s "
        f"({elapsed / args.steps:.3f} s/step, loss {loss:.4f})",
        flush=True,
    )


def jax_trainer(args):
    """Flax Llama, optax AdamW, one jitted step with the state donated; the runner's tokens.
    Returns (step, sync): step() enqueues one step, sync() waits for the last one's loss."""
    import os

    allowed = sorted(os.sched_getaffinity(0))
    if args.device == "cpu" and args.threads < len(allowed):  # XLA:CPU sizes its pool by the CPUs it may use
        os.sched_setaffinity(0, allowed[: args.threads])
    os.environ.setdefault("JAX_PLATFORMS", args.device)
    from types import SimpleNamespace

    import jax
    import jax.numpy as jnp
    import optax

    from dlbench.runners.jax import llm

    dtype = jnp.bfloat16 if args.bf16 else jnp.float32
    if args.definition == "transformers":
        params, logits_of = flax_transformers_llama(args.model, dtype, args.seq_len, args.plain_rope)
    else:
        module = llm.Llama(args.model, dtype)
        params = module.init(jax.random.key(1), jnp.zeros((1, args.seq_len), jnp.int32))["params"]

        def logits_of(params, inputs):
            return module.apply({"params": params}, inputs)

    optim = llm.optimizer()
    spec = SimpleNamespace(coords=SimpleNamespace(model=args.model), batch=args.batch, local_devices=1,
                           seq_len=args.seq_len, seed=1)  # fmt: skip
    tokens = jnp.asarray(llm.tokens(spec, 1, 0))

    def loss_fn(params, tokens):
        logits = logits_of(params, tokens[:, :-1]).astype(jnp.float32)
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    def train_step(state, tokens):
        params, opt_state = state
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        updates, opt_state = optim.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    compiled = jax.jit(train_step, donate_argnums=(0,))
    held = {"state": (params, optim.init(params)), "loss": None}

    def step():
        held["state"], held["loss"] = compiled(held["state"], tokens)
        return held["loss"]

    def sync():
        if held["loss"] is not None:
            held["loss"].block_until_ready()

    return step, sync


def llama_config(model: str, **extra):
    """transformers' LlamaConfig of dlbench.llm's shape for `model`."""
    from transformers import LlamaConfig

    from dlbench import llm

    s = llm.shape(model)
    keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
    scaling = s.rope_scaling and dict(zip(keys, s.rope_scaling, strict=True))
    return LlamaConfig(
        vocab_size=s.vocab, hidden_size=s.hidden, intermediate_size=s.ffn, num_hidden_layers=s.layers,
        num_attention_heads=s.heads, num_key_value_heads=s.kv_heads, max_position_embeddings=s.max_positions,
        rms_norm_eps=s.norm_eps, rope_theta=s.rope_theta, initializer_range=s.init_std,
        tie_word_embeddings=s.tied_embeddings, attention_bias=False, mlp_bias=False, use_cache=False,
        rope_scaling={"rope_type": "llama3", **scaling} if scaling else None, **extra,
    )  # fmt: skip


def check_parameters(name: str, model: str, count: int) -> None:
    from dlbench import llm

    if count != llm.parameter_count(model):
        raise SystemExit(f"{name} has {count} parameters, not {model}'s {llm.parameter_count(model)}")


def flax_transformers_llama(model: str, dtype, seq_len: int, plain_rope: bool = False):
    """transformers' FlaxLlamaForCausalLM of `model`'s shape, random init: (params, logits
    function). Its rotary embedding knows no Llama 3.1 frequency scaling: a model with it is
    refused unless `plain_rope` (for speed alone: the scaling changes RoPE's constant angles,
    not one operation of the step). It has no tied head either: for a tied model (Llama 3.2
    1B) its head's kernel is dropped and the embedding's transpose passed in its place. Its
    attention keeps a causal mask of max_position_embeddings squared (131072² for the Llama 3
    shapes): the positions are cut to `seq_len` (at least twice the head size, which its
    sinusoid table slices by the positions' count), which changes nothing the step computes."""
    import jax
    from transformers import FlaxLlamaForCausalLM

    from dlbench import llm

    config = llama_config(model)
    if config.rope_scaling and not plain_rope:
        raise SystemExit(
            f"FlaxLlamaForCausalLM has no llama3 rope scaling: {model} needs it (--plain-rope: speed only)"
        )
    config.rope_scaling = None
    config.max_position_embeddings = max(seq_len, 2 * llm.shape(model).head_dim)
    network = FlaxLlamaForCausalLM(config, seed=1, dtype=dtype)
    params = dict(network.params)
    tied = config.tie_word_embeddings
    if tied:
        del params["lm_head"]
    check_parameters("FlaxLlamaForCausalLM", model, sum(x.size for x in jax.tree_util.tree_leaves(params)))

    def logits_of(params, inputs):
        if tied:
            params = {**params, "lm_head": {"kernel": params["model"]["embed_tokens"]["embedding"].T}}
        return network(inputs, params=params, train=False).logits

    return params, logits_of


def transformers_llama(model: str):
    """transformers' LlamaForCausalLM (SDPA attention) from a LlamaConfig of dlbench.llm's shape,
    random init, logits only: an independent definition of the same network (issue #27 item 2)."""
    from transformers import LlamaForCausalLM

    network = LlamaForCausalLM(llama_config(model, attn_implementation="sdpa"))
    check_parameters("LlamaForCausalLM", model, sum(p.numel() for p in network.parameters()))

    import torch

    class Logits(torch.nn.Module):  # the runner's llm.loss calls model(tokens) for the logits
        def __init__(self):
            super().__init__()
            self.network = network

        def forward(self, tokens):
            return self.network(input_ids=tokens).logits

    return Logits()


def torch_trainer(args, compiled: bool = False):
    """The runner's Llama (or transformers' LlamaForCausalLM) with the runner's AdamW, loss and
    tokens; `compiled`: torch.compile'd model and optimizer step, as the runner compiles them.
    Returns (step, sync)."""
    import contextlib
    from types import SimpleNamespace

    import torch

    from dlbench.runners.pytorch import llm

    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    model = (llm.Llama(args.model) if args.definition == "dlbench" else transformers_llama(args.model)).train()
    model.to(args.device)
    optimizer, schedule = llm.optimizer(model.parameters(), compiled=compiled)
    optimizer_step = optimizer.step
    if compiled:
        model = torch.compile(model, dynamic=False)
        optimizer_step = torch.compile(optimizer.step, dynamic=False)
    spec = SimpleNamespace(coords=SimpleNamespace(model=args.model), batch=args.batch, local_devices=1,
                           seq_len=args.seq_len, dist=SimpleNamespace(world_size=1, rank=0))  # fmt: skip
    tokens = llm.tokens(spec, torch.Generator().manual_seed(1)).to(args.device)
    device_type = torch.device(args.device).type

    def step():
        optimizer.zero_grad(set_to_none=True)
        autocast = torch.autocast(device_type, dtype=torch.bfloat16) if args.bf16 else contextlib.nullcontext()
        with autocast:
            loss = llm.loss(model, tokens)
        loss.backward()
        optimizer_step()
        schedule.step()
        return loss.detach()

    return step, (torch.cuda.synchronize if device_type == "cuda" else lambda: None)


def main() -> None:
    args = parse_args()
    if args.framework == "jax":
        import jax

        step, sync, name, threads = *jax_trainer(args), f"jax {jax.__version__}", args.threads
    else:
        import torch

        step, sync = torch_trainer(args)
        name, threads = f"pytorch {torch.__version__}", torch.get_num_threads()
    for _ in range(args.warmup):
        step()
    sync()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    sync()
    report(name, args, time.perf_counter() - start, float(loss), threads)


if __name__ == "__main__":
    main()
