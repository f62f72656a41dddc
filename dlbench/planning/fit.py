"""Fit before launch: each rank's memory for an LLM cell, estimated at planning from the
model's shapes, the precision, the strategy's sharding, the micro-batch and the sequence
length, against the device's memory. A cell that cannot fit is an N/A cell naming both
figures before anything runs (dlbench.planning.grid); docs/memory.md states the formula and
its error measured against the runs' peaks. Stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlbench import devices, llm, pipelining
from dlbench.coords import MIXED_PRECISIONS, SINGLE_DEVICE, CellKey, Scale
from dlbench.models import CATALOGUE, kind_of
from dlbench.runners import capabilities

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
# Under activation checkpointing a block keeps its fp32 input, and (selective) in the compute
# dtype the outputs of its matmuls and of attention: q, the attention's output, o and down
# (4 × hidden), k and v (2 × kv width), gate and up (2 × ffn); the block being recomputed
# holds its whole set once.
CHECKPOINT_INPUT_BYTES_PER_HIDDEN = 4
SELECTIVE_SAVED_HIDDEN, SELECTIVE_SAVED_KV, SELECTIVE_SAVED_FFN = 4, 2, 2


@dataclass(frozen=True)
class StepShape:
    """A rank's step: micro-batches of `batch` sequences of `seq_len` tokens under
    `activation_checkpointing`, `grad_accum` of them before each update (each micro-batch's
    activations are freed by its own backward)."""

    batch: int
    seq_len: int
    activation_checkpointing: str = "none"
    grad_accum: int = 1


@dataclass(frozen=True)
class Sharding:
    """How a strategy splits an LLM over `devices`: its blocks by tensor parallelism `tp` ways
    (a node's devices, or 1; embeddings, norms and head stay whole), and, where `shards_state`,
    every parameter with its gradient and optimizer state over the data-parallel ranks (FSDP)."""

    devices: int
    tp: int = 1
    shards_state: bool = False
    pp: int = 1  # pipeline ranks: each holds its stages' share of the model (Pipeline)

    @classmethod
    def of(cls, scale: str, tensor_parallel: bool, shards_state: bool, pp: int = 1) -> Sharding:
        s = Scale.parse(scale)
        return cls(s.devices, s.devices_per_node if tensor_parallel else 1, shards_state, max(pp, 1))

    @property
    def state_shards(self) -> int:
        """The data-parallel ranks a sharded state is split over (1: each holds it whole)."""
        return self.devices // (self.tp * self.pp) if self.shards_state else 1


@dataclass(frozen=True)
class Pipeline:
    """A pipeline-parallel cell's schedule and micro-batches (dlbench.pipelining)."""

    schedule: str
    microbatches: int

    def in_flight(self, ranks: int, rank: int) -> float:
        """The micro-batches pipeline rank `rank` keeps at its peak (dlbench.pipelining)."""
        return pipelining.schedule(self.schedule).in_flight(ranks, rank, self.microbatches)


def _activation_bytes_per_token(
    s: llm.LlamaShape, compute: int, amp: bool, tp: int, checkpointing: str, layers: int | None = None
) -> float:
    """Bytes per token that the blocks (`layers` of them: all by default) keep for backward (docs/memory.md)."""
    layers = s.layers if layers is None else layers
    kv = s.kv_heads * s.head_dim
    per_block = RESIDUAL_BYTES_PER_HIDDEN * s.hidden + compute * (
        (COMPUTE_TENSORS_HIDDEN * s.hidden + COMPUTE_TENSORS_KV * kv + COMPUTE_TENSORS_FFN * s.ffn) / tp
        + (AMP_CASTS_HIDDEN * s.hidden if amp else 0)
    )
    if checkpointing == "none":
        return layers * per_block
    kept = CHECKPOINT_INPUT_BYTES_PER_HIDDEN * s.hidden
    if checkpointing == "selective":
        kept += (
            compute * (SELECTIVE_SAVED_HIDDEN * s.hidden + SELECTIVE_SAVED_KV * kv + SELECTIVE_SAVED_FFN * s.ffn) / tp
        )
    return layers * kept + per_block


def _cast_bytes(s: llm.LlamaShape, whole: float, amp: bool, sharding: Sharding) -> float:
    """amp's copies of the weights in the compute dtype, held through the step. Unsharded
    (single, DDP): autocast's cast of every weight, kept for the whole forward and saved for
    the backward. Sharded (FSDP2 under its MixedPrecisionPolicy): the weights are gathered in
    the compute dtype and a block's copy is freed with its unit (the `gathered` term holds
    two); what stays for the whole step is the root's (embeddings, final norm, head), whole,
    which FSDP2 does not reshard between the forward and the backward."""
    if not amp:
        return 0.0
    if not sharding.shards_state:
        return CAST_BYTES * whole
    return CAST_BYTES * (whole - s.layers * llm.block_parameters(s) / sharding.tp)


def estimate_bytes(model: str, precision: str, step: StepShape, sharding: Sharding, device: str) -> dict:
    """Each term of one rank's peak memory (bytes) and their `total` (docs/memory.md)."""
    s = llm.shape(model)
    blocks = s.layers * llm.block_parameters(s)
    whole = blocks / sharding.tp + llm.parameter_count(model) - blocks  # a rank's share of each weight
    # fp8 as amp: its float8 copies of a block's weights and activations are transient (the
    # casts for one matmul), below what this estimate resolves.
    amp = precision in MIXED_PRECISIONS
    compute = 2 if amp else 4
    tokens = step.batch * step.seq_len
    replicated = sharding.devices > 1 and not sharding.shards_state
    terms = {
        "state": STATE_BYTES * whole / sharding.state_shards,
        "gathered": GATHERED_BLOCKS * llm.block_parameters(s) * 4 / sharding.tp if sharding.shards_state else 0.0,
        "casts": _cast_bytes(s, whole, amp, sharding),
        "reduced_gradients": REDUCED_GRADIENT_BYTES * whole if replicated else 0.0,
        # FSDP2 accumulating without syncing keeps each gradient whole until the last micro-batch
        "unsynced_gradients": (
            REDUCED_GRADIENT_BYTES * whole * (1 - 1 / sharding.state_shards)
            if sharding.shards_state and step.grad_accum > 1
            else 0.0
        ),
        "activations": tokens
        * _activation_bytes_per_token(s, compute, amp, sharding.tp, step.activation_checkpointing),
        "logits": tokens * s.vocab * (compute + 4 * LOGIT_FP32_TENSORS),
        "runtime": CUDA_RUNTIME_GIB * GIB if device == "cuda" else 0.0,
    }
    return {**terms, "total": sum(terms.values())}


def pipeline_estimate_bytes(
    model: str, precision: str, step: StepShape, sharding: Sharding, pipeline: Pipeline, device: str
) -> dict:
    """The terms of the pipeline rank that needs the most (docs/memory.md, "Pipeline stages"):
    its stages' parameters with their gradients and AdamW state (sharded over a stage's data
    ranks under fsdp_pp), the activations of its in-flight micro-batches through its blocks,
    and on the last stage their logits (1F1B: one micro-batch's; GPipe: every one's)."""
    s, plan = llm.shape(model), pipelining.schedule(pipeline.schedule)
    p, block = sharding.pp, llm.block_parameters(s)
    counts = pipelining.stage_parameters(model, p * plan.stages_per_rank)
    ranges = pipelining.split_layers(model, p * plan.stages_per_rank)
    amp = precision in MIXED_PRECISIONS
    compute = 2 if amp else 4
    tokens = step.batch * p * step.seq_len / pipeline.microbatches  # one micro-batch's
    per_rank = []
    for rank in range(p):
        stages = range(rank, p * plan.stages_per_rank, p)
        held = sum(counts[i] for i in stages)
        blocks = sum(ranges[i][1] - ranges[i][0] for i in stages)
        per_token = _activation_bytes_per_token(s, compute, amp, 1, step.activation_checkpointing, blocks)
        terms = {
            "state": STATE_BYTES * held / sharding.state_shards,
            "gathered": GATHERED_BLOCKS * block * 4 if sharding.shards_state else 0.0,
            "casts": (CAST_BYTES * (held - blocks * block if sharding.shards_state else held)) if amp else 0.0,
            "activations": pipeline.in_flight(p, rank) * tokens * per_token,
            # the last stage's logits for as many micro-batches as it keeps (1F1B: one)
            "logits": (
                pipeline.in_flight(p, rank) * tokens * s.vocab * (compute + 4 * LOGIT_FP32_TENSORS)
                if len(counts) - 1 in stages
                else 0.0
            ),
            "runtime": CUDA_RUNTIME_GIB * GIB if device == "cuda" else 0.0,
        }
        per_rank.append({**terms, "total": sum(terms.values())})
    return max(per_rank, key=lambda terms: terms["total"])


def estimate_gib(
    model: str, precision: str, step: StepShape, sharding: Sharding, device: str, pipeline: Pipeline | None = None
) -> float:
    if pipeline is not None:
        return pipeline_estimate_bytes(model, precision, step, sharding, pipeline, device)["total"] / GIB
    return estimate_bytes(model, precision, step, sharding, device)["total"] / GIB


def cell_estimate_gib(cell: CellKey, seq_len: int, device: str) -> float | None:
    """Each rank's estimated memory for an LLM cell trained at `seq_len` on `device` (its
    strategy's sharding read from the framework's capabilities); None for other models or a
    searched batch."""
    if cell.model not in CATALOGUE or not kind_of(cell.model).memory_estimate or not str(cell.batch).isdigit():
        return None
    strategy = None if cell.strategy == SINGLE_DEVICE else capabilities(cell.framework).strategy(cell.strategy)
    ranks = strategy.pipeline_ranks(Scale.parse(cell.scale)) if strategy else 0
    sharding = Sharding.of(
        cell.scale, bool(strategy and strategy.tensor_parallel), bool(strategy and strategy.shards_state), ranks
    )
    step = StepShape(int(cell.batch), seq_len, cell.activation_checkpointing, int(cell.grad_accum))
    pipeline = Pipeline(cell.pp_schedule, int(cell.pp_microbatches)) if ranks > 1 else None
    return estimate_gib(cell.model, cell.precision, step, sharding, device, pipeline)


def device_memory_gib(run: dict) -> float | None:
    """The memory of one device: run.device_memory_gib, else run.gpu_type's known figure on
    CUDA; None: unknown (no cell is refused)."""
    if run.get("device_memory_gib"):
        return float(run["device_memory_gib"])
    if run.get("device") == "cuda":
        return devices.MEMORY_GIB.get(str(run.get("gpu_type", "")).lower())
    return None


FORMULA = "the formula of docs/memory.md"


def unfit_reason(needed_gib: float, device_gib: float | None, basis: str = FORMULA) -> str | None:
    """The N/A cell's reason where the estimate exceeds the device, naming the estimate used
    (`basis`); None where it fits or the device's memory is unknown."""
    if device_gib is None or needed_gib <= device_gib:
        return None
    return (
        f"does not fit: needs ≈ {needed_gib:.1f} GiB per rank (estimated at planning: {basis}); "
        f"the device has {device_gib:g} GiB"
    )
