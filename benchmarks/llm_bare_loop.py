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
    return p.parse_args()


def report(framework: str, args, elapsed: float, loss: float, threads: int) -> None:
    print(
        f"{framework} bare loop {args.model} batch {args.batch} seq {args.seq_len} threads "
        f"{threads}: {args.steps * args.batch * args.seq_len / elapsed:.1f} tokens/s "
        f"({elapsed / args.steps:.3f} s/step, loss {loss:.4f})",
        flush=True,
    )


def jax_loop(args) -> None:
    """Flax Llama, optax AdamW, one jitted step with the state donated; the runner's tokens."""
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
        params, logits_of = flax_transformers_llama(args.model, dtype)
    else:
        module = llm.Llama(args.model, dtype)
        params = module.init(jax.random.key(1), jnp.zeros((1, args.seq_len), jnp.int32))["params"]

        def logits_of(params, inputs):
            return module.apply({"params": params}, inputs)

    optim = llm.optimizer()
    state = (params, optim.init(params))
    spec = SimpleNamespace(coords=SimpleNamespace(model=args.model), batch=args.batch, local_devices=1,
                           seq_len=args.seq_len, seed=1)  # fmt: skip
    tokens = jnp.asarray(llm.tokens(spec, 1, 0))

    def loss_fn(params, tokens):
        logits = logits_of(params, tokens[:, :-1]).astype(jnp.float32)
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    def step(state, tokens):
        params, opt_state = state
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        updates, opt_state = optim.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    step = jax.jit(step, donate_argnums=(0,))
    for _ in range(args.warmup):
        state, loss = step(state, tokens)
    loss.block_until_ready()
    start = time.perf_counter()
    for _ in range(args.steps):
        state, loss = step(state, tokens)
    loss.block_until_ready()
    report(f"jax {jax.__version__}", args, time.perf_counter() - start, float(loss), args.threads)


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


def flax_transformers_llama(model: str, dtype):
    """transformers' FlaxLlamaForCausalLM of `model`'s shape, random init: (params, logits
    function). Its rotary embedding knows no Llama 3.1 frequency scaling: llama_small only."""
    import jax
    from transformers import FlaxLlamaForCausalLM

    config = llama_config(model)
    if config.rope_scaling:
        raise SystemExit(f"FlaxLlamaForCausalLM has no llama3 rope scaling: {model} needs it")
    network = FlaxLlamaForCausalLM(config, seed=1, dtype=dtype)
    params = network.params
    check_parameters("FlaxLlamaForCausalLM", model, sum(x.size for x in jax.tree_util.tree_leaves(params)))

    def logits_of(params, inputs):
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


def main() -> None:
    import contextlib
    from types import SimpleNamespace

    args = parse_args()
    if args.framework == "jax":
        return jax_loop(args)
    import torch

    from dlbench.runners.pytorch import llm

    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    model = (llm.Llama(args.model) if args.definition == "dlbench" else transformers_llama(args.model)).train()
    model.to(args.device)
    optimizer, schedule = llm.optimizer(model.parameters(), compiled=False)
    spec = SimpleNamespace(
        coords=SimpleNamespace(model=args.model),
        batch=args.batch,
        local_devices=1,
        seq_len=args.seq_len,
        dist=SimpleNamespace(world_size=1, rank=0),
    )
    tokens = llm.tokens(spec, torch.Generator().manual_seed(1)).to(args.device)
    sync = torch.cuda.synchronize if args.device == "cuda" else lambda: None

    def step():
        optimizer.zero_grad(set_to_none=True)
        autocast = torch.autocast(args.device, dtype=torch.bfloat16) if args.bf16 else contextlib.nullcontext()
        with autocast:
            loss = llm.loss(model, tokens)
        loss.backward()
        optimizer.step()
        schedule.step()
        return loss

    for _ in range(args.warmup):
        step()
    sync()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    sync()
    report(f"pytorch {torch.__version__}", args, time.perf_counter() - start, loss.item(), torch.get_num_threads())


if __name__ == "__main__":
    main()
