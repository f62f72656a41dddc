"""The communication prescreen's all-reduce in PyTorch (docs/slurm.md, Communication
prescreen): gloo on the CPU, NCCL on CUDA, timed as nccl-tests time theirs (a few untimed
operations, then the mean time of `iterations` back to back); and `counted`, the bytes a
step's collectives move (benchmarks/fsdp_precision.py). Importing it does not import torch."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import time

INIT_TIMEOUT_S = 120


def allreduce_times(dist, device: str, sizes: list[int], warmup: int, iterations: int, threads: int) -> dict:
    """Per size, this rank's mean seconds per all-reduce over every rank (`scope: all`) and,
    where ranks share nodes and there are several nodes, over its node's ranks, all nodes at
    once (`scope: node`): a slow node shows in its own number. `dist`: a runners.base.Distributed."""
    import torch
    import torch.distributed as td

    torch.set_num_threads(max(1, threads))
    cuda = device == "cuda"
    if cuda:
        torch.cuda.set_device(dist.local_rank)
    os.environ.setdefault("MASTER_ADDR", dist.master_addr)
    os.environ.setdefault("MASTER_PORT", str(dist.master_port))
    backend = "nccl" if cuda else "gloo"
    td.init_process_group(
        backend=backend, rank=dist.rank, world_size=dist.world_size, timeout=dt.timedelta(seconds=INIT_TIMEOUT_S)
    )
    try:
        nodes: list = [None] * dist.world_size
        td.all_gather_object(nodes, dist.node)
        groups = _node_groups(td, nodes)
        on = torch.device("cuda", dist.local_rank) if cuda else torch.device("cpu")
        records = []
        for size in sizes:
            records.append(_timed(torch, td, on, size, warmup, iterations, None, "all", dist.world_size))
            if groups:  # every rank calls it, its node's group only
                group, ranks = groups[dist.node]
                records.append(_timed(torch, td, on, size, warmup, iterations, group, "node", ranks))
        return {"backend": backend, "nodes": sorted(set(nodes)), "records": records}
    finally:
        td.destroy_process_group()


def _node_groups(td, nodes: list[str]) -> dict:
    """node → (its ranks' process group, their count) when there are several nodes with more
    than one rank each; {} otherwise (a node of one rank has nothing to reduce with)."""
    by_node: dict[str, list[int]] = {}
    for rank, node in enumerate(nodes):
        by_node.setdefault(node, []).append(rank)
    if len(by_node) < 2 or min(len(r) for r in by_node.values()) < 2:
        return {}
    # new_group is collective: every rank creates every group, in the same order.
    return {node: (td.new_group(ranks), len(ranks)) for node, ranks in sorted(by_node.items())}


def _timed(torch, td, device, size: int, warmup: int, iterations: int, group, scope: str, ranks: int) -> dict:
    elements = max(1, size // 4)  # float32
    buffer = torch.ones(elements, dtype=torch.float32, device=device)
    td.all_reduce(buffer, group=group)
    _sync(torch, device)
    # Every rank contributed its ones: the sum says the collective reached them all.
    correct = bool((buffer == ranks).all().item())
    for _ in range(warmup):
        td.all_reduce(buffer, group=group)
    td.barrier(group=group)
    _sync(torch, device)
    start = time.perf_counter()
    for _ in range(iterations):
        td.all_reduce(buffer, group=group)
    _sync(torch, device)
    seconds = (time.perf_counter() - start) / iterations
    return {"scope": scope, "bytes": elements * 4, "ranks": ranks, "seconds": seconds, "correct": correct}


def _sync(torch, device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# torch.distributed's collectives whose bytes `counted` adds up, by kind, and which of their
# tensors is the count: the gathered output, the reduced input, the all-reduced tensor.
COUNTED = {
    "all_gather_single": ("all_gather", 0),
    "all_gather_into_tensor": ("all_gather", 0),
    "reduce_scatter_single": ("reduce_scatter", 1),
    "reduce_scatter_tensor": ("reduce_scatter", 1),
    "all_reduce": ("all_reduce", 0),
}


@contextlib.contextmanager
def counted(td):
    """Within it, the bytes each kind of collective moves through `td` (torch.distributed)
    on this rank, as {kind: bytes}: all_gather the gathered (unsharded) tensor, reduce_scatter
    the tensor reduced (before scattering), all_reduce the tensor. FSDP2 calls these by
    module attribute, so they are seen; tensor parallelism's functional collectives are not.
    A collective that calls another through `td` counts once."""
    import inspect

    totals: dict[str, int] = {}
    depth = [0]
    originals = {name: getattr(td, name) for name in COUNTED if hasattr(td, name)}

    def wrap(name, original):
        kind, which = COUNTED[name]
        signature = inspect.signature(original)

        def call(*args, **kwargs):
            if depth[0] == 0:
                tensor = list(signature.bind(*args, **kwargs).arguments.values())[which]
                totals[kind] = totals.get(kind, 0) + tensor.numel() * tensor.element_size()
            depth[0] += 1
            try:
                return original(*args, **kwargs)
            finally:
                depth[0] -= 1

        return call

    for name, original in originals.items():
        setattr(td, name, wrap(name, original))
    try:
        yield totals
    finally:
        for name, original in originals.items():
            setattr(td, name, original)
