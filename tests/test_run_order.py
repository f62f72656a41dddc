"""Runs start interleaved across cells in a seeded order: Snakemake priorities per run."""

import re

from dlbench.coords import RunCoords
from dlbench.planning import run_order
from tests.test_config_validation import dry_run

GRID = {
    "grid": {
        "frameworks": ["pytorch"],
        "models": ["resnet50", "vgg16"],
        "batch_per_device": [8],
        "scales": ["1x1", "1x2"],
        "data": ["synthetic"],
    },
    "protocol": {"preset": "caict2020", "repeats": 3},
}


def runs(cells: int = 4, repeats: int = 3) -> list[RunCoords]:
    return [
        RunCoords("pytorch", "resnet50", "fp32", "synthetic", str(2**c), "1x1", "single", r)
        for c in range(cells)
        for r in range(1, repeats + 1)
    ]


def test_rounds_by_repeat_each_shuffled_and_seeded():
    planned = run_order.ordered(runs(), "interleaved", seed=0)
    assert [r.repeat for r in planned] == [1] * 4 + [2] * 4 + [3] * 4
    assert len({r.batch for r in planned[:4]}) == 4  # every cell once per round
    assert planned == run_order.ordered(list(reversed(runs())), "interleaved", seed=0)  # the seed decides
    assert planned != run_order.ordered(runs(), "interleaved", seed=1)
    assert run_order.ordered(runs(), "grid", seed=0) == runs()
    csv = run_order.order_csv(runs(), "interleaved", 0).splitlines()
    assert csv[0].startswith("position,framework") and csv[1].endswith(f",{planned[0].repeat},interleaved,0")


def test_snakemake_gives_each_run_its_place_as_priority(tmp_path):
    result = dry_run(tmp_path, {**GRID, "run": {"order_seed": 3}})
    assert result.returncode == 0, result.stderr[-2000:]
    jobs = re.findall(r"rule train_\S+:\n(?:    .*\n)*?    wildcards: (.*)\n    priority: (\d+)", result.stdout)
    assert len(jobs) == 12
    by_priority = [dict(kv.split("=") for kv in w.split(", ")) for w, _ in sorted(jobs, key=lambda j: -int(j[1]))]
    started = [RunCoords.from_dict(w) for w in by_priority]
    assert started == run_order.ordered(started, "interleaved", seed=3)


def test_run_spread_nodes_pins_each_repeat_in_the_slurm_resources(tmp_path):
    override = {**GRID, "protocol": {"preset": "caict2020", "repeats": 2}, "run": {"spread_nodes": ["n1", "n2"]}}
    override["grid"] = {**GRID["grid"], "models": ["resnet50"], "scales": ["1x1", "2x1"]}
    result = dry_run(tmp_path, override)
    assert result.returncode == 0, result.stderr[-2000:]
    jobs = re.findall(
        r"    wildcards: .*scale=(\S+), strategy=\S+, training=\S*, repeat=(\d)\n(?:    .*\n)*?    resources: (.*)",
        result.stdout,
    )
    pinned = {(scale, repeat): re.search(r"slurm_extra=([^,]*)", res) for scale, repeat, res in jobs}
    assert pinned[("1x1", "1")].group(1) == "--nodelist=n1" and pinned[("1x1", "2")].group(1) == "--nodelist=n2"
    assert pinned[("2x1", "1")].group(1) == "--ntasks-per-node=1"  # needs both nodes: Slurm places it
