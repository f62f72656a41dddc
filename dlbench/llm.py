"""LLM pretraining, in numbers: the Llama shapes every framework builds, the
parameter and FLOP counts, RoPE's frequencies, the AdamW settings and the planning-time
checks. Stdlib only (imported inside the framework environments); docs/frameworks/llm.md.

Throughput of an LLM counts tokens: a step's `samples` in the step log are its tokens
(batch × seq_len × local devices), so samples/s is tokens/s and the FLOPs per sample that
dlbench.analysis.flops gives an LLM are its training FLOPs per token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

KIND = "llm"  # its descriptor's name (dlbench.model_kinds)


@dataclass(frozen=True)
class LlamaShape:
    """A Llama decoder: pre-norm blocks of grouped-query attention (RoPE) and a SwiGLU FFN."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    tied_embeddings: bool
    max_positions: int
    rope_theta: float = 500_000.0
    # Llama 3.1's RoPE frequency scaling (factor, low_freq_factor, high_freq_factor,
    # original_max_position_embeddings); None: plain RoPE.
    rope_scaling: tuple[float, float, float, int] | None = None
    norm_eps: float = 1e-5
    init_std: float = 0.02  # Hugging Face's initializer_range for Llama

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


# Llama 3.1 8B and Llama 3.2 1B (Meta's config.json of each), and a small one for tests and
# the default CPU grid: its numbers are its own, never an 8B's.
SHAPES: dict[str, LlamaShape] = {
    "llama3_8b": LlamaShape(32, 4096, 32, 8, 14336, 128256, False, 131072, rope_scaling=(8.0, 1.0, 4.0, 8192)),
    "llama3_1b": LlamaShape(16, 2048, 32, 8, 8192, 128256, True, 131072, rope_scaling=(32.0, 1.0, 4.0, 8192)),
    "llama_small": LlamaShape(4, 512, 8, 4, 1536, 32000, False, 8192),
}

# AdamW as Llama 3 was pre-trained (β 0.9 / 0.95, weight decay 0.1, peak lr 3e-4), with a
# linear warm-up from peak / WARMUP_STEPS to the peak over WARMUP_STEPS steps, then constant
# (a benchmark's few hundred steps never reach a decay phase). Weight decay applies to every
# parameter, as torch.optim.AdamW and optax.adamw do by default.
ADAMW_LR = 3e-4
ADAMW_BETAS = (0.9, 0.95)
ADAMW_EPSILON = 1e-8
ADAMW_WEIGHT_DECAY = 0.1
WARMUP_STEPS = 100
# Synthetic tokens are drawn from every id of the vocabulary but these first ones (kept for
# special tokens, as BERT's synthetic batch keeps its first 1000 ids out).
FIRST_TOKEN = 10


def shape(model: str) -> LlamaShape:
    if model not in SHAPES:
        raise KeyError(f"{model!r} is not an LLM; known: {sorted(SHAPES)}")
    return SHAPES[model]


def lr_at(step: int) -> float:
    """The learning rate of the `step`-th update (0-based): peak × min(1, (step + 1) / warm-up)."""
    return ADAMW_LR * min(1.0, (step + 1) / WARMUP_STEPS)


def block_parameters(s: LlamaShape) -> int:
    """One decoder block: q, k, v, o projections (no biases), gate/up/down, two RMSNorms."""
    kv = s.kv_heads * s.head_dim
    return s.hidden * (2 * s.hidden + 2 * kv) + 3 * s.hidden * s.ffn + 2 * s.hidden


def parameter_count(model: str) -> int:
    """Every trainable parameter (a tied output projection counted once)."""
    s = shape(model)
    embedding = s.vocab * s.hidden
    head = 0 if s.tied_embeddings else embedding
    return embedding + s.layers * block_parameters(s) + s.hidden + head


def matmul_parameters(model: str) -> int:
    """The parameters a token multiplies with: all but the input embedding table (a lookup),
    the output projection included whether tied or not (it is a vocab × hidden matmul)."""
    s = shape(model)
    return s.layers * block_parameters(s) + s.hidden + s.vocab * s.hidden


def train_flops_per_token(model: str, seq_len: int) -> float:
    """Training FLOPs per token, PaLM's appendix B: 6 N + 12 L H T, N the matmul parameters
    (forward 2 N, backward 4 N), L layers, H hidden, T seq_len: attention's scores and
    weighted values over the whole T × T square (a causal mask's skipped half counted)."""
    s = shape(model)
    return 6.0 * matmul_parameters(model) + 12.0 * s.layers * s.hidden * seq_len


def rope_inv_freq(model: str) -> list[float]:
    """RoPE's inverse frequencies per rotated pair (head_dim / 2 of them), with Llama 3.1's
    scaling where the model has it (Hugging Face's `_compute_llama3_parameters`)."""
    s = shape(model)
    inv_freq = [1.0 / s.rope_theta ** (2 * i / s.head_dim) for i in range(s.head_dim // 2)]
    if s.rope_scaling is None:
        return inv_freq
    factor, low, high, original = s.rope_scaling
    low_wavelen, high_wavelen = original / low, original / high
    scaled = []
    for f in inv_freq:
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            scaled.append(f)
        elif wavelen > low_wavelen:
            scaled.append(f / factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            scaled.append((1 - smooth) * f / factor + smooth * f)
    return scaled


def sequence_problem(model: str, seq_len: int) -> str | None:
    """What `model` cannot train at `seq_len` (as planned: dlbench.planning.grid.planned_sizes):
    a sequence longer than its positions, or shorter than two tokens (one input, one target).
    None: nothing."""
    limit = shape(model).max_positions
    if seq_len > limit:
        return f"run.seq_len: {seq_len} exceeds {model}'s {limit} positions"
    if seq_len < 2:
        return f"run.seq_len: {seq_len} is too short for next-token prediction (at least 2)"
    return None


def tensor_parallel_problem(model: str, size: int) -> str | None:
    """Why `model`'s blocks cannot be split `size` ways by heads (each rank whole query and
    key/value heads, GQA's groups kept together) and FFN units; None: they can."""
    s = shape(model)
    if size < 2:
        return f"a tensor-parallel size of {size}: tensor parallelism needs at least 2 devices per node"
    for what, count in (("heads", s.heads), ("KV heads", s.kv_heads), ("FFN units", s.ffn)):
        if count % size:
            return f"a tensor-parallel size of {size} does not divide {model}'s {count} {what}"
    return None
