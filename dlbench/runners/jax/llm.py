"""The Llama of dlbench.llm in Flax linen, layer for layer the PyTorch runner's
(dlbench/runners/pytorch/llm.py): RMSNorm, RoPE (Llama 3.1 scaling), grouped-query attention
(jax.nn.dot_product_attention, causal), SwiGLU; its synthetic tokens, its real-text batches,
and the jitted step with optax AdamW and the linear warm-up. Imports JAX: only `Runner.build` imports this module."""

from __future__ import annotations

import collections
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.ad_checkpoint import checkpoint_name

from dlbench import llm
from dlbench.runners.base import run_training_options
from dlbench.runners.jax import train

OPTIMIZER = "adamw"


class RMSNorm(nn.Module):
    eps: float
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        weight = self.param("weight", nn.initializers.ones, (x.shape[-1],))
        # Normalised in float32 and cast back, as the PyTorch definition does.
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return (weight * normed.astype(x.dtype)).astype(self.dtype)


def rotate(x, cos, sin):
    """RoPE on (batch, seq, heads, head_dim), halves rotated (the PyTorch runner's layout)."""
    half = x.shape[-1] // 2
    rotated = jnp.concatenate((-x[..., half:], x[..., :half]), axis=-1)
    return (x * cos + rotated * sin).astype(x.dtype)


class Block(nn.Module):
    shape: llm.LlamaShape
    dtype: Any = jnp.float32
    attention: str = "xla"  # jax.nn.dot_product_attention's implementation (attention_implementation)

    def dense(self, features: int, name: str):
        init = nn.initializers.normal(self.shape.init_std)
        return nn.Dense(features, use_bias=False, dtype=self.dtype, kernel_init=init, name=name)

    @nn.compact
    def __call__(self, x, cos, sin):
        s = self.shape
        batch, seq, _ = x.shape
        h = RMSNorm(s.norm_eps, self.dtype, name="attention_norm")(x)
        q = self.dense(s.heads * s.head_dim, "q")(h).reshape(batch, seq, s.heads, s.head_dim)
        k = self.dense(s.kv_heads * s.head_dim, "k")(h).reshape(batch, seq, s.kv_heads, s.head_dim)
        v = self.dense(s.kv_heads * s.head_dim, "v")(h).reshape(batch, seq, s.kv_heads, s.head_dim)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        # GQA: heads share k, v.
        attended = jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=self.attention)
        attended = checkpoint_name(attended, ATTENTION_OUTPUT)  # kept by selective checkpointing
        x = x + self.dense(s.hidden, "o")(attended.reshape(batch, seq, -1))
        h = RMSNorm(s.norm_eps, self.dtype, name="ffn_norm")(x)
        gated = nn.silu(self.dense(s.ffn, "gate")(h)) * self.dense(s.ffn, "up")(h)
        return x + self.dense(s.hidden, "down")(gated)


# The name of each block's attention output, for the selective policy.
ATTENTION_OUTPUT = "attention_output"


def remat_policy(activation_checkpointing: str):
    """What a rematerialised block keeps for its backward pass (jax.checkpoint's policy):
    "full" nothing but its input; "selective" the outputs of the matmuls without batch
    dimensions (the projections: MaxText's "minimal") and of attention, recomputing norms,
    RoPE, SiLU, gating and the attention's softmax."""
    policies = jax.checkpoint_policies
    if activation_checkpointing == "full":
        return policies.nothing_saveable
    return policies.save_from_both_policies(
        policies.dots_with_no_batch_dims_saveable, policies.save_only_these_names(ATTENTION_OUTPUT)
    )


class Llama(nn.Module):
    model: str
    dtype: Any = jnp.float32
    activation_checkpointing: str = "none"  # dlbench.coords.ACTIVATION_CHECKPOINTING
    attention: str = "xla"  # attention_implementation

    @nn.compact
    def __call__(self, tokens):
        s = llm.shape(self.model)
        block = Block
        if self.activation_checkpointing != "none":
            # nn.remat keeps each block's parameter names: the strategies' rules still apply.
            block = nn.remat(Block, policy=remat_policy(self.activation_checkpointing))
        init = nn.initializers.normal(s.init_std)
        embed = nn.Embed(s.vocab, s.hidden, embedding_init=init, dtype=self.dtype, name="embed")
        cos, sin = rope_tables(self.model, tokens.shape[1])
        x = embed(tokens)
        for i in range(s.layers):
            x = block(s, self.dtype, self.attention, name=f"block{i}")(x, cos, sin)
        x = RMSNorm(s.norm_eps, self.dtype, name="norm")(x)
        if s.tied_embeddings:
            return embed.attend(x)
        return nn.Dense(s.vocab, use_bias=False, dtype=self.dtype, kernel_init=init, name="head")(x)


# What the header says of each attention implementation.
ATTENTION_RECORD = {
    "xla": "jax.nn.dot_product_attention, implementation='xla' (XLA's own: the scores materialised)",
    "cudnn": "jax.nn.dot_product_attention, implementation='cudnn' (cuDNN's fused flash attention)",
}


def attention_implementation(backend: str, dtype) -> str:
    """cuDNN's fused attention on CUDA GPUs in bf16 or fp16 (the dtypes it takes), else XLA's:
    jax.nn.dot_product_attention's default is XLA's on every backend, which keeps each
    layer's (batch, heads, seq, seq) scores for the backward pass."""
    return "cudnn" if backend == "gpu" and jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16) else "xla"


def rope_tables(model: str, seq_len: int):
    """RoPE's (cos, sin), (1, seq_len, 1, head_dim) float32, computed on the host: constants of
    the jitted step, as FlaxLlama's sinusoid table. Computed inside the step, XLA:CPU fuses cos
    and sin into each of their consumers and evaluates them per element of q and k (0.46 M more
    transcendentals a step for llama_small at 2 x 128; benchmarks/README.md, "JAX Llama against
    FlaxLlamaForCausalLM")."""
    positions = np.arange(seq_len, dtype=np.float32)
    angles = np.outer(positions, np.asarray(llm.rope_inv_freq(model), np.float32))
    angles = np.concatenate((angles, angles), axis=-1)[None, :, None, :]  # (1, seq, 1, head_dim)
    return np.cos(angles), np.sin(angles)


def warmup():
    """The linear warm-up of dlbench.llm: lr peak × (count + 1) / WARMUP_STEPS, then the peak."""
    steps = llm.WARMUP_STEPS
    return optax.linear_schedule(llm.ADAMW_LR / steps, llm.ADAMW_LR, steps - 1)


def optimizer(schedule=None):
    """AdamW on `schedule` (None: the warm-up), its settings in its state (train.injected)."""
    b1, b2 = llm.ADAMW_BETAS
    return train.injected(
        OPTIMIZER,
        learning_rate=warmup() if schedule is None else schedule,
        b1=b1,
        b2=b2,
        eps=llm.ADAMW_EPSILON,
        weight_decay=llm.ADAMW_WEIGHT_DECAY,
    )


def head_first(params):
    """The parameters with the head's leaves first, the others in jax's (sorted) order: an
    OrderedDict, whose order jax keeps (it sorts a dict's keys), so the head's kernel is the
    step's first parameter, as in FlaxLlama's tree (lm_head, model). No operation changes, but
    XLA:CPU then assigns the step a smaller temporary buffer (llama_small at 2 x 128: 219 MiB
    against 250), which it maps afresh each step: 8,000 fewer page faults a step
    (benchmarks/README.md, "JAX Llama against FlaxLlamaForCausalLM"). A tied model (no head)
    keeps jax's order."""
    return collections.OrderedDict(sorted(params.items(), key=lambda item: (item[0] != "head", item[0])))


def _init(module, seed: int, optim):
    def init():
        # One token: the parameters do not depend on the length, and the init traces no long forward.
        params = head_first(module.init(jax.random.key(seed), jnp.zeros((1, 1), jnp.int32))["params"])
        return params, optim.init(params)

    return init


def initial_state(module, seq_len: int, seed: int, strategy, optim):
    """(params, opt_state) computed on the devices of `strategy`'s mesh, each leaf where the
    strategy puts it (every process the same), and those shardings."""
    init = _init(module, seed, optim)
    shardings = strategy.state(jax.eval_shape(init))
    return jax.jit(init, out_shardings=shardings)(), shardings


def abstract_state(module, seed: int, strategy, optim):
    """initial_state's (state, shardings) with the state as shapes, dtypes and shardings only
    (ShapeDtypeStructs: nothing allocated), for compiling the step ahead of any data."""
    abstract = jax.eval_shape(_init(module, seed, optim))
    shardings = strategy.state(abstract)
    leaves = shardings if isinstance(shardings, tuple) else jax.tree_util.tree_map(lambda _: shardings, abstract)
    state = jax.tree_util.tree_map(
        lambda leaf, sharding: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding), abstract, leaves
    )
    return state, shardings


def train_step(module, optim, state_sharding, strategy, micro_batches: int = 1):
    """step(state, tokens) -> (state, loss), jitted with the state donated and its shardings
    pinned in and out (GSPMD partitions the step over `strategy`'s mesh). Causal LM: the mean
    cross-entropy (float32 logits) of each next token; `tokens`: (batch, seq_len + 1), the
    rows of `micro_batches` micro-batches whose gradients the step accumulates (accumulate)."""

    def loss_fn(params, tokens):
        logits = module.apply({"params": params}, tokens[:, :-1]).astype(jnp.float32)
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    def step(state, tokens):
        params, opt_state = state
        if micro_batches == 1:
            loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        else:
            parts = split_micro_batches(tokens, micro_batches, strategy)
            loss, grads = accumulate(loss_fn, params, parts, _params_sharding(state_sharding))
        updates, opt_state = optim.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    return jax.jit(
        step,
        in_shardings=(state_sharding, strategy.data),
        out_shardings=(state_sharding, strategy.replicated),
        donate_argnums=(0,),
    )


def split_micro_batches(tokens, count: int, strategy):
    """(count, rows / count, seq_len + 1): micro-batch i is rows [i × r, (i + 1) × r) of each
    data shard's r × count rows, so that every device keeps its own rows (no resharding) and
    one device's micro-batches are consecutive slices of its rows, as the PyTorch runner's."""
    shards = strategy.mesh.shape[strategy.axes[0]]
    rows, width = tokens.shape
    parts = tokens.reshape(shards, count, rows // (shards * count), width).transpose(1, 0, 2, 3)
    parts = parts.reshape(count, rows // count, width)
    return jax.lax.with_sharding_constraint(parts, strategy.sharding(None, strategy.axes[0]))


def accumulate(loss_fn, params, parts, params_sharding):
    """(mean loss, mean gradient) over the micro-batches `parts`, one forward and backward pass
    each in a `lax.scan` (as MaxText accumulates), each loss scaled by 1 / count so that the
    summed gradient is the whole batch's; the sum kept where the parameters are."""
    count = parts.shape[0]
    scaled_loss_and_grad = jax.value_and_grad(lambda p, tokens: loss_fn(p, tokens) / count)

    def add(carry, tokens):
        loss_sum, grad_sum = carry
        loss, grads = scaled_loss_and_grad(params, tokens)
        return (loss_sum + loss, jax.tree_util.tree_map(jnp.add, grad_sum, grads)), None

    zeros = jax.lax.with_sharding_constraint(jax.tree_util.tree_map(jnp.zeros_like, params), params_sharding)
    (loss, grads), _ = jax.lax.scan(add, (jnp.zeros((), jnp.float32), zeros), parts)
    return loss, grads


def _params_sharding(state_sharding):
    """The parameters' shardings in a state's: a strategy gives one sharding for the whole
    state (replicated) or a (params, opt_state) tree of them."""
    return state_sharding[0] if isinstance(state_sharding, tuple) else state_sharding


def tokens(spec, processes: int, rank: int):
    """This process's share of the global synthetic batch, (batch × micro-batches × its devices,
    seq_len + 1) int32: the global batch is drawn once from the seed, so one device with the
    global batch sees the tokens that the devices of a sharded run see together, and one
    micro-batch of batch × A sequences those of A micro-batches of batch (split_micro_batches)."""
    vocab = llm.shape(spec.coords.model).vocab
    share = spec.batch * run_training_options(spec.coords).grad_accum * spec.local_devices
    rng = np.random.default_rng(spec.seed)
    everything = rng.integers(llm.FIRST_TOKEN, vocab, (share * processes, spec.seq_len + 1), dtype=np.int64)
    return everything[rank * share : (rank + 1) * share].astype(np.int32)


class TokenBatches:
    """Real text (dlbench.data.tokens) as this process's share of each global batch, put on
    its devices: JAX ships no input pipeline (grain is not in the lock), so the loader is the
    one its documentation shows, host numpy batches through `make_array_from_process_local_data`.
    Each epoch visits the rows in a new seeded order (every process the same); the global
    batch of a step is consecutive rows of that order, as a single run of it would read them."""

    def __init__(self, spec, processes: int, rank: int, sharding):
        from dlbench.data import tokens as token_data

        self.rows, self.manifest = token_data.load(spec.data_dir, spec.seq_len, llm.shape(spec.coords.model).vocab)
        self.rows = np.asarray(self.rows, np.int32)  # the whole corpus, a few MB: read once
        self.share = (
            spec.batch * run_training_options(spec.coords).grad_accum * spec.local_devices
        )  # a step's micro-batches
        self.global_batch = self.share * processes
        if len(self.rows) < self.global_batch:
            raise ValueError(
                f"{spec.data_dir}: {len(self.rows)} sequences cannot fill a global batch of {self.global_batch}"
            )
        self.rank, self.seed, self.sharding = rank, spec.seed, sharding
        self.order_of = token_data.epoch_order
        self.epoch, self.position, self.order = 0, 0, self.order_of(len(self.rows), 0, spec.seed)

    def __next__(self):
        if self.position + self.global_batch > len(self.order):  # the epoch's remainder dropped
            self.epoch, self.position = self.epoch + 1, 0
            self.order = self.order_of(len(self.rows), self.epoch, self.seed)
        start = self.position + self.rank * self.share
        self.position += self.global_batch
        local = self.rows[np.sort(self.order[start : start + self.share])]
        return jax.make_array_from_process_local_data(self.sharding, local)
