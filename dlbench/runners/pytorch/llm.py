"""A compact Llama for PyTorch (transformers' LlamaForCausalLM of the same shape is
the independent reference it is measured against, benchmarks/llm_bare_loop.py): RMSNorm,
RoPE (Llama 3.1 scaling), grouped-query attention through scaled_dot_product_attention
(is_causal), SwiGLU; the shapes of dlbench.llm.SHAPES, random initialisation. Also its
synthetic tokens, loss and AdamW with linear warm-up.
docs/frameworks/llm.md. Imports torch: only the runner's build imports this module."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

from dlbench import llm
from dlbench.runners.base import run_training_options


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        # Normalised in float32 and cast back, as Meta's and Hugging Face's Llama do.
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


def rotate(x, cos, sin):
    """RoPE on (batch, heads, seq, head_dim), halves rotated (Hugging Face's layout)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos + rotated * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, s: llm.LlamaShape):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = s.heads, s.kv_heads, s.head_dim
        self.q = nn.Linear(s.hidden, s.heads * s.head_dim, bias=False)
        self.k = nn.Linear(s.hidden, s.kv_heads * s.head_dim, bias=False)
        self.v = nn.Linear(s.hidden, s.kv_heads * s.head_dim, bias=False)
        self.o = nn.Linear(s.heads * s.head_dim, s.hidden, bias=False)

    def forward(self, x, cos, sin):
        batch, seq, _ = x.shape
        # -1 heads: under tensor parallelism a rank holds its share of the heads (fsdp_tp).
        q = self.q(x).view(batch, seq, -1, self.head_dim).transpose(1, 2)
        k = self.k(x).view(batch, seq, -1, self.head_dim).transpose(1, 2)
        v = self.v(x).view(batch, seq, -1, self.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o(out.transpose(1, 2).reshape(batch, seq, -1))


class FeedForward(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, s: llm.LlamaShape):
        super().__init__()
        self.gate = nn.Linear(s.hidden, s.ffn, bias=False)
        self.up = nn.Linear(s.hidden, s.ffn, bias=False)
        self.down = nn.Linear(s.ffn, s.hidden, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


# Selective activation checkpointing keeps these ops' outputs and recomputes the rest of a
# block (norms, RoPE, SiLU, the gating product, views): the matmuls, every fused attention
# kernel (the CPU's and CUDA's), and tensor parallelism's collectives, so that the backward
# pass neither redoes a matmul nor communicates twice. torchtitan's "op" policy also
# recomputes every second matmul; this one keeps them all.
SAVED_BY_SELECTIVE = (
    "aten.mm.default",
    "aten._scaled_dot_product_flash_attention_for_cpu.default",
    "aten._scaled_dot_product_flash_attention.default",
    "aten._scaled_dot_product_efficient_attention.default",
    "aten._scaled_dot_product_cudnn_attention.default",
    "_c10d_functional.all_reduce.default",
    "_c10d_functional.reduce_scatter_tensor.default",
)


def _op(name: str):
    """torch.ops' overload of `name` ("aten.mm.default"); None where this build has none."""
    namespace, op, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), op, None), overload, None)


def _selective_contexts():
    return create_selective_checkpoint_contexts([op for op in map(_op, SAVED_BY_SELECTIVE) if op is not None])


class Block(nn.Module):
    def __init__(self, s: llm.LlamaShape, activation_checkpointing: str = "none"):
        super().__init__()
        self.attention_norm = RMSNorm(s.hidden, s.norm_eps)
        self.attention = Attention(s)
        self.ffn_norm = RMSNorm(s.hidden, s.norm_eps)
        self.ffn = FeedForward(s)
        self.activation_checkpointing = activation_checkpointing  # dlbench.coords.ACTIVATION_CHECKPOINTING

    def forward(self, x, cos, sin):
        if self.activation_checkpointing == "none":
            return self._forward(x, cos, sin)
        # Inside the module's forward, so that FSDP2's hooks and tensor parallelism's plans
        # (on this block and its linears) see the same modules with or without it: FSDP
        # gathers the block once for its backward, the recomputation included. The Llama
        # draws no random numbers (no dropout): no RNG state to keep for the recomputation.
        # (Full: no context_fn at all; torch.compile refuses noop_context_fn passed by name.)
        selective = {"context_fn": _selective_contexts} if self.activation_checkpointing == "selective" else {}
        return checkpoint(self._forward, x, cos, sin, use_reentrant=False, preserve_rng_state=False, **selective)

    def _forward(self, x, cos, sin):
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.ffn(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self, model: str, activation_checkpointing: str = "none"):
        super().__init__()
        s = llm.shape(model)
        self.embed = nn.Embedding(s.vocab, s.hidden)
        self.blocks = nn.ModuleList(Block(s, activation_checkpointing) for _ in range(s.layers))
        self.norm = RMSNorm(s.hidden, s.norm_eps)
        self.head = nn.Linear(s.hidden, s.vocab, bias=False)
        if s.tied_embeddings:
            self.head.weight = self.embed.weight
        # A buffer, not a parameter: FSDP leaves it whole on every rank.
        self.register_buffer("inv_freq", torch.tensor(llm.rope_inv_freq(model)), persistent=False)
        self._init_weights(s.init_std)

    def shard_units(self):
        """FSDP2's units below the root (strategies.FSDP): each decoder block, its parameters
        gathered just before it runs; the root holds the embeddings, final norm and head."""
        return list(self.blocks)

    def _init_weights(self, std: float) -> None:
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=std)

    def forward(self, tokens):
        cos, sin = rope_tables(self.inv_freq, tokens.shape[1], tokens.device)
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))


def rope_tables(inv_freq, seq_len: int, device):
    """RoPE's cos and sin per position, halves repeated (rotate's layout)."""
    positions = torch.arange(seq_len, device=device, dtype=torch.float32)
    angles = torch.outer(positions, inv_freq.float())
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


class LlamaStage(nn.Module):
    """One pipeline stage of a Llama: its blocks [first, last) under their indices in the
    whole model (parameter names as the model's, as torchtitan keeps them), the embedding on
    the first stage, the final norm and head on the last. Its input is the token ids on the
    first stage, the residual stream elsewhere; its output the logits on the last."""

    def __init__(self, model: Llama, first: int, last: int):
        super().__init__()
        self.embed = model.embed if first == 0 else None
        self.blocks = nn.ModuleDict({str(i): model.blocks[i] for i in range(first, last)})
        whole = last == len(model.blocks)
        self.norm, self.head = (model.norm, model.head) if whole else (None, None)
        self.register_buffer("inv_freq", model.inv_freq, persistent=False)

    def shard_units(self):
        return list(self.blocks.values())

    def forward(self, x):
        cos, sin = rope_tables(self.inv_freq, x.shape[1], x.device)
        if self.embed is not None:
            x = self.embed(x)
        for block in self.blocks.values():
            x = block(x, cos, sin)
        return x if self.head is None else self.head(self.norm(x))


def logits_loss(logits, targets):
    """The mean cross-entropy of each next token, float32 logits over every position."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def loss(model, tokens):
    """Causal LM: the mean cross-entropy of each next token (float32 logits), over every
    position of the batch. `tokens`: (batch, seq_len + 1)."""
    return logits_loss(model(tokens[:, :-1]), tokens[:, 1:])


def tokens(spec, generator, shard=(0, 1, 1)):
    """This rank's share of the global synthetic batch: (batch × micro-batches × devices of its
    shard, seq_len + 1) token ids; `shard` is the strategy's (index, count, devices). The global
    batch (batch × micro-batches × devices sequences) is drawn once from the seed, so a single
    run of the global batch sees the same tokens as the shards of a multi-device run together,
    and one micro-batch of batch × A sequences those of A micro-batches of batch (the step's
    micro-batch i is rows [i × batch × devices, (i + 1) × batch × devices) of the share)."""
    vocab = llm.shape(spec.coords.model).vocab
    index, count, devices = shard
    share = spec.batch * run_training_options(spec.coords).grad_accum * spec.local_devices * devices
    everything = torch.randint(llm.FIRST_TOKEN, vocab, (share * count, spec.seq_len + 1), generator=generator)
    return everything[index * share : (index + 1) * share].clone()


def optimizer(params, compiled: bool):
    """AdamW and its warm-up schedule (dlbench.llm): LinearLR from peak / WARMUP_STEPS at the
    first update to the peak at update WARMUP_STEPS - 1, llm.lr_at's rates. Under torch.compile
    the learning rate is a tensor (foreach then needs `capturable`), so that the scheduler's
    changes do not recompile the compiled step (one graph, measured)."""
    adamw = torch.optim.AdamW(
        params,
        lr=torch.tensor(llm.ADAMW_LR) if compiled else llm.ADAMW_LR,
        capturable=compiled,
        betas=llm.ADAMW_BETAS,
        eps=llm.ADAMW_EPSILON,
        weight_decay=llm.ADAMW_WEIGHT_DECAY,
        foreach=True,
    )
    warmup = llm.WARMUP_STEPS
    schedule = torch.optim.lr_scheduler.LinearLR(adamw, start_factor=1 / warmup, total_iters=warmup - 1)
    return adamw, schedule
