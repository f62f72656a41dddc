"""A rank's peak memory before launch: the runner's own step on fake tensors (FakeTensorMode:
shapes and dtypes, no storage) under PyTorch's memory tracker (torch.distributed._tools:
`FSDPMemTracker` where the strategy shards, else `MemTracker`), with no device and no peers
(a fake process group of the run's world size). Planning starts it in the pytorch environment
(dlbench.planning.compiled): shape requests as a JSON list on stdin, one JSON result per
request on stdout. Stdlib and torch only.

    python -m dlbench.runners.pytorch.memory_estimate < requests.json

Each result: `tensors` (the tracker's peak over a steady step, the second, bytes), `runtime` (on the CPU
the resident set this process holds after the runner's imports, before any fake work: what a
rank holds besides its tensors), or `error`.
"""

from __future__ import annotations

import contextlib
import json
import sys

from dlbench.runners.base import status_kb

GRADIENT_BYTES = 4  # DDP's reducer buckets: a float32 copy of every gradient (not views)
# What torch's gloo backend (the CPU's) allocates while FSDP2's collectives run, beside their
# outputs (measured at 2 and 4 ranks: docs/memory.md): an all-gather a copy of its output, a
# reduce-scatter one of its input and one of its output. NCCL works in the buffers it is given.
GLOO_WORKSPACE = {
    "all_gather_single": lambda output, input: output.nbytes,
    "reduce_scatter_single": lambda output, input: input.nbytes + output.nbytes,
}


def _spec(request: dict):
    from dlbench.coords import RunCoords, Scale
    from dlbench.runners.base import Distributed, RunSpec

    coords = RunCoords(**request["coords"])
    scale = Scale.parse(coords.scale)
    dist = Distributed(world_size=scale.devices, local_world_size=scale.devices_per_node)
    return RunSpec(coords, int(coords.batch), 0, request["seq_len"], 1, "cpu", dist=dist)


@contextlib.contextmanager
def _fake_world(torch, world_size: int, rank: int = 0):
    """A fake process group of `world_size` ranks seen from `rank` (collectives do nothing), device meshes built
    outside fake mode (their rank tables are real tensors: the strategy's and those FSDP2 makes
    of a TP mesh), and the strategy's own init_process_group a no-op for the while."""
    import torch.distributed as dist
    import torch.distributed.device_mesh as device_mesh
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.testing._internal.distributed.fake_pg import FakeStore

    real_init, real_mesh = dist.init_process_group, device_mesh.init_device_mesh
    real_mesh_init = device_mesh.DeviceMesh.__init__

    def outside_fake_mode(function):
        def call(*args, **kwargs):
            with unset_fake_temporarily():
                return function(*args, **kwargs)

        return call

    if world_size > 1:
        real_init("fake", store=FakeStore(), rank=rank, world_size=world_size)
    dist.init_process_group, device_mesh.init_device_mesh = (lambda *a, **k: None), outside_fake_mode(real_mesh)
    device_mesh.DeviceMesh.__init__ = outside_fake_mode(real_mesh_init)
    try:
        yield
    finally:
        dist.init_process_group, device_mesh.init_device_mesh = real_init, real_mesh
        device_mesh.DeviceMesh.__init__ = real_mesh_init
        if dist.is_initialized():
            dist.destroy_process_group()


@contextlib.contextmanager
def _gloo_workspaces(torch, device: str):
    """On the CPU, each of FSDP2's collectives allocates gloo's workspace (GLOO_WORKSPACE) as it
    is issued and frees it, so that the tracker's peak holds it where the rank's would; the fake
    process group allocates nothing. Put back after."""
    import torch.distributed as dist

    if device != "cpu":
        yield
        return
    kept = {name: getattr(dist, name) for name in GLOO_WORKSPACE}

    def with_workspace(name):
        def call(output, input, *args, **kwargs):
            workspace = torch.empty(GLOO_WORKSPACE[name](output, input), dtype=torch.uint8, device=input.device)
            try:
                return kept[name](output, input, *args, **kwargs)
            finally:
                del workspace

        return call

    for name in GLOO_WORKSPACE:
        setattr(dist, name, with_workspace(name))
    try:
        yield
    finally:
        for name, collective in kept.items():
            setattr(dist, name, collective)


@contextlib.contextmanager
def _unwrapped_ddp(strategies):
    """DDP's reducer cannot run on fake tensors: the step runs on the local model and the
    reducer's buckets are added as GRADIENT_BYTES a parameter (they live the whole run).
    Put back after, for the next shape in this process."""
    ddp = strategies.DDP
    kept = ddp.wrap_model, ddp.gradient_sync
    ddp.wrap_model, ddp.gradient_sync = strategies.Single.wrap_model, strategies.Single.gradient_sync
    try:
        yield
    finally:
        ddp.wrap_model, ddp.gradient_sync = kept


def tensor_peak(request: dict) -> int:
    """The tracker's peak (bytes) of one rank's steps for `request`."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from dlbench.runners.pytorch import Runner, strategies

    spec = _spec(request)
    if strategies.for_run(spec).schedules_micro_batches:
        return pipeline_tensor_peak(spec, request["device"])
    ddp = spec.coords.strategy == "ddp"
    runner = Runner(spec)
    runner.import_framework()
    unwrapped = _unwrapped_ddp(strategies) if ddp else contextlib.nullcontext()
    workspaces = _gloo_workspaces(torch, request["device"])
    with unwrapped, workspaces, _fake_world(torch, spec.dist.world_size), FakeTensorMode():
        runner.build()
        runner.step()  # AdamW's state made, as before a run's measured steps
        tracker = _tracker(runner)
        backward = runner._backward

        def micro_batch(batch, micro_batches):
            # The tracker refuses a module called twice per step: each micro-batch is a call
            # of its own (its peak snapshot is kept apart, across them).
            tracker.reset_mod_stats()
            return backward(batch, micro_batches)

        runner._backward = micro_batch
        with tracker:
            runner.step()
        (peak,) = tracker.get_tracker_snapshot("peak").values()
        buckets = GRADIENT_BYTES * runner.params if ddp else 0
    return int(peak["Total"]) + buckets


@contextlib.contextmanager
def _stages_only(pipeline_parallel):
    """A pipeline strategy builds its rank's stages, not torch's schedule, whose stages talk to
    their peers at the first step (a fake process group has none): the estimate steps the
    stages itself. torch's pipelining is imported all the same, as a rank imports it (the
    runtime `main` reads). Put back after."""
    import torch.distributed.pipelining  # noqa: F401

    kept = pipeline_parallel._schedule
    pipeline_parallel._schedule = lambda self, modules, stages, device, microbatches: None
    try:
        yield
    finally:
        pipeline_parallel._schedule = kept


def pipeline_tensor_peak(spec, device: str) -> int:
    """The peak of the pipeline rank that needs the most: each rank's stages built as its
    runner builds them, one micro-batch's forward and backward through them under the tracker,
    its kept activations counted as many times as the schedule keeps micro-batches in flight
    at that rank's peak (dlbench.pipelining), then the optimizer's step."""
    from dlbench.runners.pytorch import strategies

    ranks = strategies.for_run(spec).pipeline_ranks(spec)
    per_pipeline_rank = spec.dist.world_size // ranks
    return max(_pipeline_rank_peak(spec, index, index * per_pipeline_rank, device) for index in range(ranks))


def _pipeline_rank_peak(spec, index: int, rank: int, device: str) -> int:
    """Pipeline rank `index` (global rank `rank`): its tracked micro-batch composed with the
    schedule's in-flight count, or its optimizer step, whichever is higher (bytes)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    from dlbench.runners.pytorch import Runner
    from dlbench.runners.pytorch.pipeline_parallel import PipelineParallel

    runner = Runner(spec)
    runner.import_framework()
    stages_only, workspaces = _stages_only(PipelineParallel), _gloo_workspaces(torch, device)
    with stages_only, workspaces, _fake_world(torch, spec.dist.world_size, rank), FakeTensorMode():
        runner.build()
        plan = runner.strategy.plan
        microbatches = spec.coords.pp_microbatches
        sequences = spec.batch * runner.strategy.ranks // microbatches
        tokens = torch.randint(0, _llm_shape(spec).vocab, (sequences, spec.seq_len + 1))
        _stage_passes(runner, tokens)  # AdamW's state made, as before a run's measured steps
        runner.optimizer_step()
        runner.optimizer.zero_grad(set_to_none=True)
        tracker = MemTracker()
        tracker.track_external(runner.distributed_model, runner.optimizer)
        with tracker:
            kept = _stage_passes(runner, tokens, tracker)
            (passes,) = tracker.get_tracker_snapshot("peak").values()
            runner.optimizer_step()
            (step,) = tracker.get_tracker_snapshot("peak").values()
    in_flight = plan.in_flight(runner.strategy.ranks, index, microbatches)
    return int(max(passes["Total"] + (in_flight - 1) * kept, step["Total"]))


def _llm_shape(spec):
    from dlbench import llm

    return llm.shape(spec.coords.model)


def _stage_passes(runner, tokens, tracker=None) -> int:
    """One micro-batch's forward through each of the rank's stages (the first takes token ids,
    the others a residual stream, as a peer would send it), then their backward passes, the
    last stage's from its loss; the bytes the forwards kept (with a tracker, else 0)."""
    import torch

    from dlbench.runners.pytorch import llm

    strategy, hidden = runner.strategy, _llm_shape(runner.spec).hidden
    last = len(strategy.split) - 1

    def current() -> int:
        return next(iter(tracker.get_tracker_snapshot("current").values()))["Total"] if tracker else 0

    before, outputs = current(), []
    dtype = runner.autocast_dtype
    with torch.autocast(runner.device.type, dtype=dtype) if dtype else contextlib.nullcontext():
        for module, stage in zip(runner.distributed_model, strategy.stage_ids, strict=True):
            x = tokens[:, :-1] if stage == 0 else torch.randn(*tokens[:, :-1].shape, hidden, requires_grad=True)
            outputs.append((stage, module(x)))
    kept = current() - before
    for stage, out in reversed(outputs):
        if stage == last:
            llm.logits_loss(out, tokens[:, 1:]).backward()
        else:
            out.backward(torch.ones_like(out))
    return kept


def _tracker(runner):
    from dlbench.runners.pytorch import strategies

    if isinstance(runner.strategy, strategies.FSDP):
        from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

        return FSDPMemTracker(runner.distributed_model, runner.optimizer)
    from torch.distributed._tools.mem_tracker import MemTracker

    tracker = MemTracker()
    tracker.track_external(runner.distributed_model, runner.optimizer)
    return tracker


def main() -> None:
    requests = json.load(sys.stdin)
    from dlbench.runners.pytorch import Runner

    if requests:  # what a rank imports (torch, its workload's)
        Runner(_spec(requests[0])).import_framework()
    results = []
    for request in requests:
        try:
            results.append({"tensors": tensor_peak(request)})
        except Exception as error:  # noqa: BLE001 (one shape's failure is reported, not fatal)
            results.append({"error": f"{type(error).__name__}: {str(error).strip()[:300]}"})
    # A rank's resident set besides its tensors: read once the steps have imported what a
    # rank's strategy imports (torch.distributed, FSDP, dynamo); fake tensors hold no storage.
    runtime = (status_kb("VmRSS") or 0) * 1024
    json.dump([r if "error" in r else {**r, "runtime": runtime} for r in results], sys.stdout)


if __name__ == "__main__":
    main()
