"""The communication prescreen (docs/slurm.md): its plan, a real gloo all-reduce through the
local launcher, its table (algbw, busbw as nccl-tests define them), the flag on slow nodes and
their multi-node cells, and the report's section. On the Slurm cluster: tests/test_slurm.py."""

from __future__ import annotations

import json
import os
import subprocess

import pandas as pd
import pytest

from dlbench.analysis import prescreen
from dlbench.analysis.stats import allreduce_bandwidth
from dlbench.launch.prescreen import SCHEMA, log_name
from dlbench.planning import prescreen as planning
from dlbench.planning.config import checked_grid
from dlbench.planning.jobs import JobShape, shapes
from dlbench.protocol import RunProtocol
from dlbench.report.page import environment_of_templates
from dlbench.report.prescreen import section
from tests.conftest import REPO, framework_python, make_coords


def config(launcher="srun", **settings) -> dict:
    config = {
        "grid": {
            "frameworks": ["tensorflow", "pytorch"],
            "models": ["resnet50"],
            "batch_per_device": [2],
            "scales": ["1x1", "1x2", "2x1", "2x2", "2x4"],
            "strategies": {"pytorch": ["ddp"], "tensorflow": ["replicated_nccl"]},
        },
        "protocol": {"preset": "mlperf"},
        "run": {"launcher": launcher},
        "prescreen": settings,
    }
    checked_grid(config)
    return config


def test_the_plan_measures_each_multi_rank_shape_in_a_framework_that_can():
    c = config()
    plan = planning.plan(c, shapes(checked_grid(c).runs))
    # replicated_nccl's one process drives its node's devices (1x2_p1: one rank, nothing to
    # measure); DDP's jobs are a rank per device.
    assert [s.scale for s in plan.shapes] == ["1x2", "2x1", "2x2", "2x4"] and plan.framework == "pytorch"
    assert plan.records[0] == "results/prescreen/1x2/launch.json"
    assert planning.plan(config(launcher="local"), shapes(checked_grid(c).runs)) is None  # auto: Slurm only
    local = config(launcher="local", enabled=True)
    assert [s.scale for s in planning.plan(local, shapes(checked_grid(local).runs)).shapes] == ["1x2"]
    assert planning.plan(config(enabled=False), shapes(checked_grid(c).runs)) is None
    with pytest.raises(planning.PrescreenError, match="^prescreen.framework: tensorflow cannot measure"):
        planning.plan(config(framework="tensorflow"), shapes(checked_grid(c).runs))


def test_busbw_is_nccl_tests_bus_bandwidth():
    algbw, busbw = allreduce_bandwidth(8e9, 2.0, 4)
    assert (algbw, busbw) == (4.0, 4.0 * 2 * 3 / 4)
    assert allreduce_bandwidth(1e9, 1.0, 1)[1] == 0  # one rank moves nothing


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """A real 1x2 prescreen (gloo) through the local launcher, as the pipeline's rule runs it."""
    if not framework_python("pytorch").exists():
        pytest.skip("the pytorch environment is not built")
    workdir = tmp_path_factory.mktemp("prescreen")
    c = config(launcher="local", enabled=True, sizes=[4096, 1 << 20], iterations=5)
    plan = planning.plan(c, shapes(checked_grid(c).runs))
    from dlbench.launch.request import LaunchRequest

    shape = plan.shapes[0]
    coords = make_coords(model="allreduce", strategy="allreduce", scale="1x2")
    base = LaunchRequest(coords, RunProtocol("mlperf", 0, 1, "mean"), "")
    request = plan.request(base, shape, c["prescreen"])
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [str(framework_python("pytorch")), "-m", "dlbench.launch", *request.to_argv()]
    done = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return workdir, request


def test_a_real_gloo_allreduce_gives_the_table(measured):
    workdir, request = measured
    run_dir = workdir / request.run_dir
    logs = [run_dir / log_name(rank) for rank in (0, 1)]
    assert all(not os.access(log, os.W_OK) or os.geteuid() == 0 for log in logs)  # made read-only
    assert all(oct(log.stat().st_mode & 0o777) == "0o444" for log in logs)
    header = json.loads(logs[0].read_text().splitlines()[0])
    assert header["schema"] == SCHEMA and header["backend"] == "gloo" and header["world_size"] == 2
    assert json.loads((run_dir / "launch.json").read_text())["ranks_without_log"] == []
    table = prescreen.table(workdir)
    assert list(table["bytes"]) == [4096, 1 << 20] and set(table["scope"]) == {"all"}
    assert (table["status"] == "ok").all() and table["correct"].all()
    assert (table["busbw_gbps"] > 0).all()
    # busbw of 2 ranks: algbw x 2(2-1)/2 = algbw
    assert (table["busbw_gbps"] == table["algbw_gbps"]).all()
    assert (table["algbw_gbps"] == table["bytes"] / (table["time_us"] / 1e6) / 1e9).all()


def write_logs(root, scale: str, seconds: dict[str, float], failed: str = "") -> None:
    """Logs of a 2-node shape whose nodes' own all-reduces took `seconds` per node."""
    directory = root / prescreen.ROOT / scale
    directory.mkdir(parents=True)
    (directory / "launch.json").write_text("{}")
    per_node = int(scale.split("x")[1])
    for rank in range(2 * per_node):
        node = sorted(seconds)[rank // per_node]
        records = [
            {"type": "header", "schema": SCHEMA, "node": node, "backend": "gloo", "rank": rank},
            {"type": "size", "scope": "all", "bytes": 1 << 20, "ranks": 2 * per_node, "seconds": 0.01, "correct": True},
            {
                "type": "size",
                "scope": "node",
                "bytes": 1 << 20,
                "ranks": per_node,
                "seconds": seconds[node],
                "correct": True,
            },
            {"type": "footer", "status": "failed" if failed else "ok", "error": failed or None},
        ]
        (directory / log_name(rank)).write_text("".join(json.dumps(r) + "\n" for r in records))


def test_a_slow_node_and_its_multi_node_cells_are_flagged_not_averaged(tmp_path):
    write_logs(tmp_path, "2x2", {"n1": 0.001, "n2": 0.002})
    table = prescreen.table(tmp_path, min_share=0.8)
    nodes = table[table["scope"] == "node"].set_index("node")
    assert nodes.loc["n1", "flag"] == "" and nodes.loc["n2", "flag"].startswith("0.50 of the best node")
    assert nodes.loc["n2", "busbw_gbps"] == pytest.approx(nodes.loc["n1", "busbw_gbps"] / 2)
    assert prescreen.table(tmp_path, min_share=0.4)["flag"].eq("").all()
    cells = pd.DataFrame(
        [{**make_coords(scale=s, strategy="ddp").cell.as_dict(), "throughput": 1.0} for s in ("2x2", "1x2")]
    )
    runs = cells.assign(nodes=["n1;n2", "n2"], repeat=1)
    flagged = prescreen.flag_cells(cells, runs, table).set_index("scale")["prescreen"]
    assert flagged["2x2"].startswith("n2: 2x2 prescreen, 0.50") and flagged["1x2"] == ""  # one node: not flagged
    (tmp_path / "tables").mkdir()
    table.to_csv(tmp_path / "tables" / "prescreen.csv", index=False)
    data = section(tmp_path / "tables", prescreen.flag_cells(cells, runs, table), 0.8)
    html = environment_of_templates().get_template("sections/prescreen.html.j2").render(prescreen=data)
    assert 'id="prescreen"' in html and "2(n−1)/n" in html and "node n2 (2)" in html
    assert "Multi-node cells that ran on a flagged node" in html and "2x2 ddp: n2" in html


def test_a_failed_shape_is_a_row_that_says_why(tmp_path):
    write_logs(tmp_path, "2x1", {"n1": 0.001, "n2": 0.001}, failed="RuntimeError: connection refused")
    table = prescreen.table(tmp_path)
    assert table["status"].tolist() == ["failed"] and "connection refused" in table["reason"][0]
    assert prescreen.table(tmp_path / "none") is None


def test_the_plan_for_a_job_shape_uses_one_rank_per_device():
    assert (
        JobShape("2x2", 2)
        .resources({"device": "cuda", "mem_mb": 1, "time_limit_s": 1, "threads": 2})["slurm_extra"]
        .endswith("--gpus-per-node=2")
    )


def test_the_one_derivation_writes_the_table_and_flags_the_cell_and_the_audit_agrees(tmp_path):
    from dlbench.analysis import audit
    from dlbench.analysis.derive import derive, pipeline_paths
    from dlbench.planning.grid import Grid
    from tests.conftest import write_run
    from tests.test_campaigns import PROTOCOL

    coords = make_coords(scale="2x1", strategy="ddp")
    write_run(tmp_path, coords, [[0.1] * 6, [0.1] * 6])  # ranks on node0 and node1
    write_logs(tmp_path, "2x2", {"node0": 0.001, "node1": 0.004})
    experiment = Grid(runs=[coords], unavailable={}, protocol=PROTOCOL)
    settings = {"prescreen": {"min_share": 0.5}}
    derive(experiment, settings, tmp_path).write(pipeline_paths(tmp_path))
    tables = tmp_path / "results/tables"
    stored = pd.read_csv(tables / "prescreen.csv", keep_default_na=False)
    assert stored[stored["node"] == "node1"]["flag"].str.startswith("0.25 of the best node").all()
    cells = pd.read_csv(tables / "cells.csv", keep_default_na=False)
    assert cells["prescreen"].iloc[0].startswith("node1: 2x2 prescreen, 0.25") and cells["throughput"].iloc[0] > 0
    result = audit.audit(experiment, settings, tables, tmp_path)
    assert result.passed, result.problems
