"""Spreading a cell's repeats over nodes (`run.spread_nodes`, Slurm only): a run that needs
fewer nodes than listed is pinned to a window of them that moves with the repeat, so a cell's
repeats land on different nodes and a slow node shows as a split (dlbench.analysis.placement
finds it) instead of biasing the whole cell. Stdlib only: train.smk asks it at planning time."""

from __future__ import annotations


def spread_nodelist(nodes_needed: int, repeat: int, nodes: list[str]) -> str:
    """`--nodelist=…` for a run of `nodes_needed` nodes: repeat 1 on the first nodes listed,
    repeat 2 on the next ones, and so on round the list; "" where it needs them all."""
    if not nodes or nodes_needed >= len(nodes):
        return ""
    start = (repeat - 1) * nodes_needed % len(nodes)
    chosen = [nodes[(start + i) % len(nodes)] for i in range(nodes_needed)]
    return "--nodelist=" + ",".join(chosen)


def spread_resources(resources: dict, nodes_needed: int, nodes: list[str]) -> dict:
    """A training rule's Slurm resources with `slurm_extra` per job (its repeat's
    `spread_nodelist` after the shape's own flags); unchanged when nothing is spread."""
    if not nodes or nodes_needed >= len(nodes):
        return resources
    static = resources.get("slurm_extra", "")

    def slurm_extra(wildcards) -> str:
        spread = spread_nodelist(nodes_needed, int(wildcards.repeat), nodes)
        return " ".join(part for part in (static, spread) if part)

    return {**resources, "slurm_extra": slurm_extra}
