"""The communication prescreen's all-reduce in PyTorch (docs/slurm.md, Communication
prescreen): gloo on the CPU, NCCL on CUDA, timed as nccl-tests time theirs (a few untimed
operations, then the mean time of `iterations` back to back). Importing it does not import torch."""

from __future__ import annotations

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
