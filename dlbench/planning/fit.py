"""Fit before launch: each rank's memory for an LLM cell, estimated at planning from the
model's shapes, the precision, the strategy's sharding, the micro-batch and the sequence
length, against the device's memory. A cell that cannot fit is an N/A cell naming both
figures before anything runs (dlbench.planning.grid); docs/memory.md states the formula and
its error measured against the runs' peaks. Stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlbench import devices, llm
from dlbench.coords import Scale

GIB = 2**30
# Bytes a parameter holds for the whole run: fp32 weights, fp32 gradients and AdamW's two fp32
# moments (every runner keeps fp32 master weights; amp only computes in bfloat16).
STATE_BYTES = 16
# Bytes of the compute dtype a parameter is copied into per step under amp (autocast's and
# XLA's bfloat16 casts of the weights), and of a replicated strategy's reduced gradients.
CAST_BYTES, REDUCED_GRADIENT_BYTES = 2, 4
# Per token of each block, the tensors kept for the backward pass (docs/memory.md counts them):
# four fp32 tensors of the residual stream and its norms (16 bytes × hidden), and in the
# compute dtype q and its rotated copies (4 × hidden), k and v with theirs (4 × kv width), the
# FFN's gate, up, SiLU and product (4 × ffn), and under amp the casts of two norm outputs.
RESIDUAL_BYTES_PER_HIDDEN = 16
COMPUTE_TENSORS_HIDDEN, AMP_CASTS_HIDDEN, COMPUTE_TENSORS_KV, COMPUTE_TENSORS_FFN = 4, 2, 4, 4
# Per token, the output layer's logits in the compute dtype and two fp32 vocab-sized tensors
# (the log-softmax the loss keeps and its gradient), alive together at the backward's start.
LOGIT_FP32_TENSORS = 2
# Blocks whose full parameters a sharded strategy gathers at once (the current and the next).
GATHERED_BLOCKS = 2
# What a CUDA process holds beyond its tensors: context, cuBLAS/cuDNN workspaces, allocator slack.
CUDA_RUNTIME_GIB = 1.0


@dataclass(frozen=True)
class Sharding:
    """How a strategy splits an LLM over `devices`: its blocks by tensor parallelism `tp` ways
    (a node's devices, or 1; embeddings, norms and head stay whole), and, where `shards_state`,
    every parameter with its gradient and optimizer state over the data-parallel ranks (FSDP)."""

    devices: int
    tp: int = 1
    shards_state: bool = False

    @classmethod
    def of(cls, scale: str, tensor_parallel: bool, shards_state: bool) -> Sharding:
        s = Scale.parse(scale)
        return cls(s.devices, s.devices_per_node if tensor_parallel else 1, shards_state)

    @property
    def state_shards(self) -> int:
        """The data-parallel ranks a sharded state is split over (1: each holds it whole)."""
        return self.devices // self.tp if self.shards_state else 1


def estimate_bytes(model: str, precision: str, batch: int, seq_len: int, sharding: Sharding, device: str) -> dict:
    """Each term of one rank's peak memory (bytes) and their `total` (docs/memory.md)."""
    s = llm.shape(model)
    blocks = s.layers * llm.block_parameters(s)
    whole = blocks / sharding.tp + llm.parameter_count(model) - blocks  # a rank's share of each weight
    amp = precision == "amp"
    compute = 2 if amp else 4
    kv = s.kv_heads * s.head_dim
    per_token_block = RESIDUAL_BYTES_PER_HIDDEN * s.hidden + compute * (
        (COMPUTE_TENSORS_HIDDEN * s.hidden + COMPUTE_TENSORS_KV * kv + COMPUTE_TENSORS_FFN * s.ffn) / sharding.tp
        + (AMP_CASTS_HIDDEN * s.hidden if amp else 0)
    )
    tokens = batch * seq_len
    replicated = sharding.devices > 1 and not sharding.shards_state
    terms = {
        "state": STATE_BYTES * whole / sharding.state_shards,
        "gathered": GATHERED_BLOCKS * llm.block_parameters(s) * 4 / sharding.tp if sharding.shards_state else 0.0,
        # autocast keeps its casts of the gathered weights for the whole forward: not sharded
        "casts": CAST_BYTES * whole if amp else 0.0,
        "reduced_gradients": REDUCED_GRADIENT_BYTES * whole if replicated else 0.0,
        "activations": tokens * s.layers * per_token_block,
        "logits": tokens * s.vocab * (compute + 4 * LOGIT_FP32_TENSORS),
        "runtime": CUDA_RUNTIME_GIB * GIB if device == "cuda" else 0.0,
    }
    return {**terms, "total": sum(terms.values())}


def estimate_gib(model: str, precision: str, batch: int, seq_len: int, sharding: Sharding, device: str) -> float:
    return estimate_bytes(model, precision, batch, seq_len, sharding, device)["total"] / GIB


def device_memory_gib(run: dict) -> float | None:
    """The memory of one device: run.device_memory_gib, else run.gpu_type's known figure on
    CUDA; None: unknown (no cell is refused)."""
    if run.get("device_memory_gib"):
        return float(run["device_memory_gib"])
    if run.get("device") == "cuda":
        return devices.MEMORY_GIB.get(str(run.get("gpu_type", "")).lower())
    return None


def unfit_reason(needed_gib: float, device_gib: float | None) -> str | None:
    """The N/A cell's reason where the estimate exceeds the device; None where it fits or the
    device's memory is unknown."""
    if device_gib is None or needed_gib <= device_gib:
        return None
    return (
        f"does not fit: needs ≈ {needed_gib:.1f} GiB per rank (estimated at planning, docs/memory.md); "
        f"the device has {device_gib:g} GiB"
    )
