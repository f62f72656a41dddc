"""Strategies whose processes are not one per device, on the real Slurm cluster
(tools/slurm-local/up.sh): TensorFlow MirroredStrategy (`replicated_copy`: one task driving the
node's devices), TensorFlow `parameter_server` across the two nodes (one task per node:
worker and PS servers; the coordinator on the first), MXNet kvstore `device`. Each is one
Slurm job of its job shape (`train_<scale>_p1`), end to end to the tables (≈ 3 min).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from tests.conftest import REPO, framework_python
from tests.test_slurm import assert_whole_nodes, cluster_answers

CELLS = [
    # framework, strategy, scale, expected step logs, nodes seen by the logs
    ("tensorflow", "replicated_copy", "1x2", 1, 1),
    ("tensorflow", "parameter_server", "2x2", 1, 1),
    ("mxnet", "device", "1x2", 1, 1),
]

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.slow,
    pytest.mark.skipif(not cluster_answers(), reason="no Slurm cluster answers (tools/slurm-local/up.sh)"),
    pytest.mark.skipif(
        not all(framework_python(fw).exists() for fw in ("tensorflow", "mxnet")),
        reason="the tensorflow/mxnet environments are not built",
    ),
]


def grid_config() -> dict:
    strategies: dict[str, list[str]] = {}
    for fw, strategy, _, _, _ in CELLS:
        strategies.setdefault(fw, []).append(strategy)
    return {
        "grid": {
            "frameworks": sorted(strategies),
            "models": ["alexnet"],
            "batch_per_device": [2],
            "scales": sorted({scale for _, _, scale, _, _ in CELLS}),
            "strategies": strategies,
            "only": [{"framework": fw, "strategy": s, "scale": sc} for fw, s, sc, _, _ in CELLS],
        },
        "protocol": {"preset": "mlperf", "warmup_steps": 1, "measured_steps": 3, "repeats": 1},
        "run": {
            "image_size": 64,
            "threads": 2,
            "progress_every": 1,
            "launcher": "srun",
            # parameter_server runs G + 2 TensorFlow processes on the first node (workers, PS,
            # coordinator): 4000 MB per node was OOM-killed there (seen), the node has 8000.
            "mem_mb": 7500,
            "time_limit_s": 400,
            # a site knob, for real: whole nodes (sbatch --exclusive, and --mem=0: all 8000 MB)
            "exclusive": True,
        },
    }


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("slurm-strategies")
    (workdir / "config").mkdir()
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(grid_config()))
    cmd = ["timeout", "-k", "10", "900", sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile")]
    cmd += ["-d", str(workdir), "--profile", str(REPO / "profiles/slurm-local"), "runs", "results/tables/cells.csv"]
    result = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, check=False)
    (workdir / "snakemake.log").write_text(result.stdout + result.stderr)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return workdir


def run_dir(workdir, framework, strategy, scale):
    return workdir / f"results/runs/{framework}/alexnet/fp32/synthetic/bs2/{scale}/{strategy}/rep1"


def test_each_strategy_is_one_job_of_its_shape(finished):
    log = (finished / "snakemake.log").read_text()
    assert "rule train_1x2_p1:" in log and "rule train_2x2_p1:" in log


@pytest.mark.parametrize(("framework", "strategy", "scale", "logs", "log_nodes"), CELLS)
def test_the_run_used_the_allocation_as_its_layout_says(finished, framework, strategy, scale, logs, log_nodes):
    path = run_dir(finished, framework, strategy, scale)
    launch = json.loads((path / "launch.json").read_text())
    nodes, per_node = (int(x) for x in scale.split("x"))
    assert launch["launcher"] == "srun"
    assert launch["rank_exit_codes"] == [0] * nodes  # one task per node
    headers = [json.loads((path / f"rank{r}.steps.jsonl").read_text().splitlines()[0]) for r in range(logs)]
    assert not (path / f"rank{logs}.steps.jsonl").exists()
    steps = [json.loads(x) for x in (path / "rank0.steps.jsonl").read_text().splitlines()[1:-1]]
    # samples per step: the per-device batch on every device the logging process accounts for
    assert {s["samples"] for s in steps} == {2 * nodes * per_node}
    assert len({h["node"] for h in headers}) == log_nodes
    state = json.loads((path / "slurm.json").read_text())
    assert state.get("job_id")


def test_cells_have_numbers(finished):
    cells = pd.read_csv(finished / "results/tables/cells.csv", dtype={"batch": str})
    multi = cells[cells["strategy"] != "single"]
    assert len(multi) == len(CELLS)
    assert (multi["status"] == "ok").all(), multi[["framework", "strategy", "status", "reason"]].to_string()


def test_every_job_held_whole_nodes(finished):
    jobs = {}
    for framework, strategy, scale, _, _ in CELLS:
        path = run_dir(finished, framework, strategy, scale)
        header = json.loads((path / "rank0.steps.jsonl").read_text().splitlines()[0])
        assert header["provenance"]["slurm_request"]["exclusive"] is True
        jobs[json.loads((path / "slurm.json").read_text())["job_id"]] = int(scale.split("x")[0])
    assert_whole_nodes(jobs)
    assert "--exclusive" in (finished / "snakemake.log").read_text()  # the job's resources, as -n shows them
