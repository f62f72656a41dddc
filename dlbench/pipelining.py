"""Pipeline parallelism in numbers: the schedules, how a Llama's blocks are split into stages,
the micro-batches' rules and each schedule's bubble in theory. Stdlib only: planning (the
grid's checks, the memory estimate) and the PyTorch runner read the same definitions;
docs/frameworks/llm.md, "Pipeline parallelism".

p pipeline ranks hold v stages each (v = 1, or 2 for the interleaved schedules: stage s on
rank s mod p, torch's loop order), S = p·v stages in all. A step splits the pipeline's batch
(batch × p sequences: the per-device batch times the devices the pipeline spans, so that a
device computes as many tokens' layers as under data parallelism) into m micro-batches.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from dlbench import llm
from dlbench.coords import NO_PIPELINE, PIPELINE_SCHEDULES


@dataclass(frozen=True)
class Schedule:
    name: str  # the grid's name (dlbench.coords.PIPELINE_SCHEDULES)
    torch_class: str  # torch.distributed.pipelining.schedules' class
    stages_per_rank: int  # v
    theory: str  # the bubble fraction's formula, in words for the header and docs

    def bubble(self, ranks: int, microbatches: int) -> float:
        """The share of a step's pipeline time a rank idles, with equal stages and (zero
        bubble) equal forward, input-gradient and weight-gradient times."""
        p, m, v = ranks, microbatches, self.stages_per_rank
        work = 3 * v * m if self.name == "zero_bubble" else v * m
        return (p - 1) / (work + p - 1)

    def in_flight(self, ranks: int, rank: int, microbatches: int) -> float:
        """The micro-batches whose activations pipeline rank `rank` keeps at its peak, in units
        of one micro-batch through all its layers: GPipe every one; 1F1B the p − rank of its
        warm-up; the interleaved schedules Megatron-LM's (p − rank)(1 + (p − 1)/(p·v))."""
        m, p, v = microbatches, ranks, self.stages_per_rank
        if self.name == "gpipe":
            return float(m)
        return min(float(m), (p - rank) * (1 + (p - 1) / (p * v) if v > 1 else 1))


SCHEDULES = {
    s.name: s
    for s in (
        Schedule("gpipe", "ScheduleGPipe", 1, "(p - 1) / (m + p - 1): every forward, then every backward"),
        Schedule(
            "1f1b", "Schedule1F1B", 1, "(p - 1) / (m + p - 1): the same bubble as GPipe, fewer micro-batches held"
        ),
        Schedule(
            "interleaved_1f1b",
            "ScheduleInterleaved1F1B",
            2,
            "(p - 1) / (v·m + p - 1): v stages a rank, each 1/v as long",
        ),
        Schedule(
            "zero_bubble",
            "ScheduleInterleavedZeroBubble",
            2,
            "(p - 1) / (3·v·m + p - 1): ZB-H1 interleaved, weight gradients fill the bubble (F = B = W assumed)",
        ),
    )
}
assert tuple(SCHEDULES) == PIPELINE_SCHEDULES


def schedule(name: str) -> Schedule:
    if name not in SCHEDULES:
        raise ValueError(f"pp_schedule {name!r} is not one of {', '.join(SCHEDULES)}")
    return SCHEDULES[name]


def _stage_costs(model: str) -> tuple[int, int]:
    """(a block's, the head's) matmul parameters: what a token's forward and backward cost
    there (the embedding is a lookup)."""
    s = llm.shape(model)
    return llm.block_parameters(s), s.vocab * s.hidden + s.hidden


@functools.cache
def split_layers(model: str, stages: int) -> tuple[tuple[int, int], ...]:
    """Each stage's blocks as [first, last) ranges, contiguous, at least one each, balanced by
    matmul parameters with the head counted on the last stage (torchtitan weighs its input
    and output layers as layer-equivalents; here the head's real size: llama_small's is 5.2
    blocks). Stage 0 also holds the embedding, the last the final norm and the head."""
    layers = llm.shape(model).layers
    if not 1 <= stages <= layers:
        raise ValueError(f"{stages} pipeline stages for {model}'s {layers} layers")
    block, head = _stage_costs(model)

    @functools.cache
    def best(first: int, count: int) -> tuple[int, tuple]:
        """(the largest stage cost, the ranges) of blocks [first, layers) over `count` stages."""
        if count == 1:
            return (layers - first) * block + head, ((first, layers),)
        options = []
        for end in range(first + 1, layers - count + 2):
            rest_cost, rest = best(end, count - 1)
            options.append((max((end - first) * block, rest_cost), ((first, end), *rest)))
        return min(options)

    return best(0, stages)[1]


def stage_parameters(model: str, stages: int) -> list[int]:
    """Each stage's parameters (the embedding on the first, final norm and head on the last)."""
    s = llm.shape(model)
    counts = [(last - first) * llm.block_parameters(s) for first, last in split_layers(model, stages)]
    counts[0] += s.vocab * s.hidden
    counts[-1] += s.hidden + (0 if s.tied_embeddings else s.vocab * s.hidden)
    return counts


def pipeline_problem(model: str, name: str, ranks: int, batch: int, microbatches: int) -> str | None:
    """Why `model` cannot be pipelined over `ranks` with schedule `name` and `microbatches`
    micro-batches of the pipeline's batch × ranks sequences, naming the grid key; None: it can.
    torch's own conditions (1F1B's m ≥ stages, the interleaved schedules' rounds) included."""
    if name == NO_PIPELINE or name not in SCHEDULES:
        return f"grid.pp_schedule: {name!r} is not one of {', '.join(SCHEDULES)}"
    plan, layers = SCHEDULES[name], llm.shape(model).layers
    stages = ranks * plan.stages_per_rank
    if llm.shape(model).tied_embeddings:
        # The embedding (first stage) and the head (last) would hold one weight on two ranks.
        return f"grid.models: {model} ties its head to its embedding, which pipeline stages would split"
    if ranks < 2:
        return f"grid.scales: a pipeline over {ranks} rank has one stage: it needs at least 2"
    if stages > layers:
        return (
            f"grid.pp_schedule: {name} on {ranks} pipeline ranks makes {stages} stages "
            f"({plan.stages_per_rank} a rank), more than {model}'s {layers} layers"
        )
    sequences = batch * ranks
    if sequences % microbatches:
        return (
            f"grid.pp_microbatches: {microbatches} does not divide the pipeline's batch of {sequences} "
            f"sequences (batch_per_device {batch} × {ranks} pipeline ranks)"
        )
    if name == "1f1b" and microbatches < stages:
        return (
            f"grid.pp_microbatches: 1f1b needs at least as many micro-batches as stages ({stages}), not {microbatches}"
        )
    rounds = max(1, microbatches // ranks)
    if plan.stages_per_rank > 1 and microbatches % rounds:
        return (
            f"grid.pp_microbatches: {name} needs a multiple of its rounds (max(1, m // p) = {rounds}), "
            f"not {microbatches}"
        )
    return None
