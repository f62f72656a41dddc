"""Profiled runs (config `profile`): planned apart from the measured repeats, traced by the
framework's own profiler over a cut window, and ranked by self time from the Chrome trace."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from dlbench.analysis import profiles
from dlbench.coords import PROFILE_REPEAT, RunCoords
from dlbench.launch import LaunchRequest
from dlbench.planning import config as dlbench_config
from dlbench.protocol import RunProtocol
from dlbench.steplog import read_steplog
from tests.conftest import framework_python

REPO = Path(__file__).resolve().parent.parent


def event(name, ts, dur, tid=1, cat="cpu_op"):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "cat": cat}


def test_self_time_is_what_an_operation_does_itself(tmp_path):
    events = [
        event("ProfilerStep#1", 0, 100, cat="user_annotation"),  # no operation: its time goes to none
        event("aten::linear", 0, 60),
        event("aten::addmm", 10, 45),  # inside linear
        event("aten::t", 56, 2),  # inside linear
        event("aten::addmm", 70, 20),
        event("aten::addmm", 0, 30, tid=2),  # another thread: no nesting across threads
        event("$train.py:10 step", 0, 100, tid=3, cat="python_function"),
        event("ThunkExecutor::Execute (wait for completion)", 0, 100, tid=4),
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
    ]
    times = profiles.self_times_us(events)
    assert times == {"aten::linear": 13.0, "aten::addmm": 95.0, "aten::t": 2.0}
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    top = profiles.top_operations(path, steps=2, top=2)
    assert [(r["operation"], r["self_ms_per_step"]) for r in top] == [("aten::addmm", 0.0475), ("aten::linear", 0.0065)]
    assert top[0]["share"] == pytest.approx(95 / 110)


def test_profiling_plans_one_run_per_cell_apart_from_the_measured_ones():
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    plain = dlbench_config.checked_grid(config)
    profiled = dlbench_config.checked_grid({**config, "profile": True})
    assert profiled.runs == plain.runs and not plain.profiled  # no table or statistic changes
    cells = {r.cell for r in plain.runs}
    assert {r.cell for r in profiled.profiled} == cells and len(profiled.profiled) == len(cells)
    assert {r.repeat for r in profiled.profiled} == {PROFILE_REPEAT}


@pytest.mark.parametrize("framework", ["pytorch", "jax"])
def test_a_profiled_run_leaves_a_trace_its_top_operations_come_from(tmp_path, framework):
    """llama_small, 8 tokens: the launcher as the train rule starts it, repeat 0 (≈ 15 s)."""
    python = framework_python(framework)
    if not python.exists():
        pytest.skip(f"the {framework} environment is not built")
    coords = RunCoords(framework, "llama_small", "fp32", "synthetic", "2", "1x1", "single", PROFILE_REPEAT)
    run_dir = tmp_path / coords.run_dir
    request = LaunchRequest(coords, RunProtocol("mlperf", 1, 8, "mean"), str(run_dir), seq_len=8, progress_every=0)
    cmd = [str(python), "-m", "dlbench.launch", *request.to_argv()]
    done = subprocess.run(cmd, cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, capture_output=True)
    assert done.returncode == 0, done.stderr[-3000:]
    log = read_steplog(run_dir / "rank0.steps.jsonl")
    assert log.status == "ok" and log.header["protocol"]["measured_steps"] == 5  # cut to PROFILE_STEPS
    assert log.footer["profile"]["traced"] and log.footer["profile"]["profiler"] == f"{framework}.profiler".replace(
        "pytorch", "torch"
    )
    rows = profiles.cell_rows(run_dir, {"framework": framework})
    assert len(rows) == profiles.TOP and not rows[0]["reason"] and rows[0]["trace"].startswith("profile/rank0/")
    assert sum(r["share"] for r in rows) <= 1.0 and rows[0]["self_ms_per_step"] >= rows[-1]["self_ms_per_step"] > 0
