"""slurm.runs_per_job: runs of one job shape packed into one Slurm job (dlbench/planning/packing.py).

The dry runs need no cluster; the cluster test (tools/slurm-local/up.sh) runs the 40-run toy
grid of benchmarks/slurm_packing.py packed and one job per run, each to its report.
"""

from __future__ import annotations

import re
import sys

import pandas as pd
import pytest
import yaml

from dlbench.coords import RUN_RECORD, RunCoords
from dlbench.planning import packing, run_order
from tests.conftest import REPO, framework_python

sys.path.insert(0, str(REPO / "benchmarks"))
import slurm_packing as bench  # noqa: E402

BATCHES = bench.GRID["grid"]["batch_per_device"]
REPEATS = bench.GRID["protocol"]["repeats"]
CLUSTER_REPEATS = 1
SHAPES = {"1x1": ("single", "train_1x1"), "1x2": ("replicas", "train_1x2")}
toy_ready = pytest.mark.skipif(not framework_python("pytorch").exists(), reason="the toy's numpy (pytorch env)")


def planned_runs() -> list[RunCoords]:
    return [
        RunCoords("toy", "resnet50", "fp32", "synthetic", str(b), scale, strategy, repeat=r)
        for b in BATCHES
        for scale, (strategy, _) in SHAPES.items()
        for r in range(1, REPEATS + 1)
    ]


def dry_run(tmp_path, runs_per_job: int) -> str:
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(bench.grid(runs_per_job)))
    result = bench.snakemake(tmp_path, "-n", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout + result.stderr


def dry_run_groups(text: str) -> dict[str, list[tuple[str, str]]]:
    """Group id → (output record, input line) of each of its jobs, as the dry run lists them."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for block in re.split(r"\] Group job ", text)[1:]:
        group = block.split(" ", 1)[0]
        for job in re.finditer(r"rule train_\S+:\n(?:\s+input: (.*)\n)?\s+output: (\S+)", block.split("\n\n[")[0]):
            groups.setdefault(group, []).append((job.group(2), job.group(1) or ""))
    return groups


def test_the_groups_are_the_planned_chunks(tmp_path):
    text = dry_run(tmp_path, 5)
    planned = packing.groups(planned_runs(), lambda run: SHAPES[run.scale][1], 5)
    found = dry_run_groups(text)
    assert {g: {out for out, _ in jobs} for g, jobs in found.items()} == {
        g: {f"{run.run_dir}/{RUN_RECORD}" for run in runs} for g, runs in planned.items()
    }
    assert len(found) == 8  # 2 shapes x 4 repeat rounds, 5 runs each
    for runs in planned.values():
        assert len({run.repeat for run in runs}) == 1 and len({run.scale for run in runs}) == 1
    # Each run waits for the one before it in the planned order (the chain that makes the group one job).
    inputs = {out: line for jobs in found.values() for out, line in jobs}
    for runs in planned.values():
        for before, run in zip(runs, runs[1:], strict=False):
            assert f"{before.run_dir}/{RUN_RECORD}" in inputs[f"{run.run_dir}/{RUN_RECORD}"]
    assert "40 training jobs in 8 Slurm jobs" in text


def test_one_run_per_job_plans_no_group(tmp_path):
    text = dry_run(tmp_path, 1)
    assert "Group job" not in text and "_r1_j0" not in text
    assert "40 training jobs (each its own Slurm job under a cluster profile)" in text


def test_chunks_stay_within_a_repeat_round_in_the_planned_order():
    runs = planned_runs()
    order = [run.run_dir for run in run_order.ordered(runs, "interleaved", 3)]
    grouped = packing.groups(runs, lambda run: SHAPES[run.scale][1], 3, "interleaved", 3)
    assert sorted(len(g) for g in grouped.values()) == [2] * 8 + [3] * 8  # 5 runs per shape and round
    for members in grouped.values():
        positions = [order.index(run.run_dir) for run in members]
        assert positions == sorted(positions)
    assert packing.job_count(runs, lambda run: run.scale, 1) == 40


# --- on the local cluster ------------------------------------------------------------------


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    from tests.test_slurm import cluster_answers

    if not cluster_answers():
        pytest.skip("no Slurm cluster answers (tools/slurm-local/up.sh)")
    root = tmp_path_factory.mktemp("packing")
    # One repeat (10 runs) where the benchmark runs four (40): the same chunks of five, a quarter of
    # the time (that chunks stay within a repeat round is the dry runs' test above).
    # To the tables this test compares (the benchmark goes on to the report).
    tables = "results/tables/cells.csv"
    return {n: (root / f"p{n}", bench.measure(root / f"p{n}", n, tables, repeats=CLUSTER_REPEATS)) for n in (5, 1)}


def tables_without_timings(workdir) -> pd.DataFrame:
    """cells.csv and runs.csv without their measured numbers (floats, and the noisy flag made from
    them), start times, node names and the step logs' hashes (a log holds its times)."""
    tables = []
    for name in ("cells.csv", "runs.csv"):
        table = pd.read_csv(workdir / "results/tables" / name)
        # noisy: the repeats' spread against a threshold, a timing too.
        timed = {*table.select_dtypes("float").columns, "start_time", "log_sha256", "noisy"}
        keep = [c for c in table.columns if c not in timed and "node" not in c]
        tables.append(table[keep].sort_values(keep).reset_index(drop=True))
    return pd.concat(tables, keys=["cells", "runs"])


@pytest.mark.slurm
@pytest.mark.slow
@toy_ready
def test_packed_jobs_on_the_cluster(measured):
    (packed_dir, packed), (single_dir, single) = measured[5], measured[1]
    assert packed["returncode"] == 0 and single["returncode"] == 0, packed["stderr_tail"] + single["stderr_tail"]
    runs = len(BATCHES) * len(SHAPES) * CLUSTER_REPEATS
    assert single["sbatch_calls"] == runs and packed["sbatch_calls"] <= single["sbatch_calls"] / 5
    assert packed["job_states"] == ["COMPLETED"]
    # One run's resources, five runs' time (each run asks run.time_limit_s + 5 min).
    assert packed["nodes"] == [1] and packed["timelimits_min"] == [5 * single["timelimits_min"][0]]
    records = bench.run_records(packed_dir)
    assert len(records) == runs
    by_job: dict[str, list] = {}
    for run_dir, record in records.items():
        assert len(record["step_logs"]) == record["launch"]["world_size"]  # its own step logs
        assert record["launch"]["rank_exit_codes"] == [0] * record["launch"]["world_size"], run_dir
        by_job.setdefault(str(record["slurm"]["job_id"]), []).append(run_dir)
    assert sorted(len(job) for job in by_job.values()) == [5] * (runs // 5)
    pd.testing.assert_frame_equal(tables_without_timings(packed_dir), tables_without_timings(single_dir))
