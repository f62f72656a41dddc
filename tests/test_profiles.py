"""Profiled runs (config `profile`): planned apart from the measured repeats, traced by the
framework's own profiler over a cut window, and ranked by self time from the Chrome trace."""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from dlbench.analysis import audit, profiles
from dlbench.analysis.tables import csv_bytes
from dlbench.coords import PROFILE_REPEAT, RunCoords
from dlbench.launch import LaunchRequest
from dlbench.planning import config as dlbench_config
from dlbench.planning.grid import Grid
from dlbench.protocol import RunProtocol
from dlbench.report.profiles import profiles_section
from dlbench.steplog import read_steplog
from tests.conftest import SHARED_CORES_ENV, framework_python

REPO = Path(__file__).resolve().parent.parent
H200_LOG = (
    "campaigns/h200-llama1b-2026-11-27/results/runs/jax/llama3_1b/amp/synthetic/bs4/1x1/single/rep1/rank0.steps.jsonl"
)


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


def test_on_a_gpu_the_kernels_are_ranked_not_the_hosts_launches(tmp_path):
    """A torch trace with CUDA kernels (gzipped, as the runner writes it): the host's launch
    and sync calls outlast any kernel, yet only kernels rank; a jax trace's GPU process too."""
    events = [
        event("cudaDeviceSynchronize", 0, 500),
        event("cuLaunchKernel", 0, 300, tid=2),
        event("nvjet_sm90_gemm", 10, 80, tid=7, cat="kernel"),
        event("flash_bprop", 95, 40, tid=7, cat="kernel"),
        event("nvjet_sm90_gemm", 140, 60, tid=7, cat="kernel"),
    ]
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    assert profiles.trace_file(tmp_path) == path
    top = profiles.top_operations(path, steps=1)
    assert [(r["operation"], r["self_ms_per_step"]) for r in top] == [("nvjet_sm90_gemm", 0.14), ("flash_bprop", 0.04)]
    jax_events = [
        {"ph": "M", "name": "process_name", "pid": 9, "args": {"name": "/device:GPU:0"}},
        event("fusion.12", 0, 30, tid=1) | {"pid": 9},
        event("ThunkExecutor::Execute", 0, 90),
    ]
    assert [k["name"] for k in profiles.device_kernels(jax_events)] == ["fusion.12"]
    assert profiles.device_kernels(events[:2]) == []  # a CPU run: the host's operations rank


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
    done = subprocess.run(
        cmd, cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", **SHARED_CORES_ENV}, capture_output=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    log = read_steplog(run_dir / "rank0.steps.jsonl")
    assert log.status == "ok" and log.header["protocol"]["measured_steps"] == 5  # cut to PROFILE_STEPS
    assert log.footer["profile"]["traced"] and log.footer["profile"]["profiler"] == f"{framework}.profiler".replace(
        "pytorch", "torch"
    )
    rows = profiles.cell_rows(run_dir, {"framework": framework})
    assert len(rows) == profiles.TOP and not rows[0]["reason"] and rows[0]["trace"].startswith("profile/rank0/")
    assert sum(r["share"] for r in rows) <= 1.0 and rows[0]["self_ms_per_step"] >= rows[-1]["self_ms_per_step"] > 0


def fixture_profiles(root: Path) -> dict:
    """The report's profiles section from a profiles.csv of two frameworks' top operations (long
    names included: XLA's and CUDA kernels' are) for one cell."""
    rows = []
    for framework, strategy, prefix in (("pytorch", "single", "aten::"), ("jax", "single", "fusion.")):
        for rank in range(1, profiles.TOP + 1):
            name = prefix + ("CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice" if rank == 3 else f"op{rank}")
            trace = "profile/rank0/trace.json"
            cell = {"framework": framework, "model": "resnet50", "precision": "fp32", "data": "synthetic", "batch": "8"}
            cell |= {"activation_checkpointing": "none", "grad_accum": 1, "pp_schedule": "none", "pp_microbatches": 1}
            rows.append({**cell, "scale": "1x1", "strategy": strategy, "profiler": f"{framework}.profiler",
                         "trace": trace, "rank": rank, "operation": name, "self_ms_per_step": 10.0 / rank,
                         "share": 0.5 / rank, "reason": ""})  # fmt: skip
    tables = root / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows, columns=profiles.COLUMNS).to_csv(tables / profiles.PROFILES_FILE, index=False)
    return profiles_section(tables)


def test_the_report_shows_each_frameworks_top_operations_side_by_side(tmp_path):
    section = fixture_profiles(tmp_path)
    (group,) = section["groups"]
    assert [c["head"] for c in group["columns"]] == ["JAX (single)", "PyTorch (single)"]
    assert group["columns"][1]["ops"][0] == "aten::op1 — 10 ms (50%)"
    link = "../runs/pytorch/resnet50/fp32/synthetic/bs8/1x1/single/rep0/profile/rank0/trace.json"
    assert group["columns"][1]["link"] == link and len(group["rows"]) == profiles.TOP
    assert profiles_section(tmp_path / "none") is None  # no profile: no section


def test_the_audit_lists_the_profiles_and_catches_a_changed_ranking(tmp_path):
    coords = RunCoords("jax", "llama_small", "fp32", "synthetic", "2", "1x1", "single", PROFILE_REPEAT)
    run_dir = tmp_path / coords.run_dir
    (run_dir / "profile/rank0").mkdir(parents=True)
    trace = {"traceEvents": [event("dot.1", 0, 40), event("fusion.2", 50, 10)]}
    (run_dir / "profile/rank0/vm.trace.json.gz").write_bytes(gzip.compress(json.dumps(trace).encode()))
    # a real run's log (the H200 campaign's), its coordinates and footer made this run's
    lines = (REPO / H200_LOG).read_text().splitlines()
    header, footer = json.loads(lines[0]), json.loads(lines[-1])
    header["run"] = coords.as_dict()
    footer["profile"] = {"profiler": "jax.profiler", "steps": 2, "directory": "profile/rank0", "traced": True}
    (run_dir / "rank0.steps.jsonl").write_text("\n".join([json.dumps(header), *lines[1:-1], json.dumps(footer)]) + "\n")
    table = profiles.table([coords], tmp_path)
    assert list(table["operation"]) == ["dot.1", "fusion.2"] and list(table["self_ms_per_step"]) == [0.02, 0.005]
    listed = profiles.listed_files([coords], tmp_path)
    assert f"{coords.run_dir}/profile/rank0/vm.trace.json.gz" in listed
    experiment, tables = Grid(runs=[], unavailable={}, protocol={}, profiled=[coords]), tmp_path / "tables"
    tables.mkdir()
    (tables / profiles.PROFILES_FILE).write_bytes(csv_bytes(table))
    assert audit._profiles_problems(experiment, tables, tmp_path) == []
    (tables / profiles.PROFILES_FILE).write_bytes(csv_bytes(table.assign(self_ms_per_step=1.0)))
    assert "differs from the one ranked again" in audit._profiles_problems(experiment, tables, tmp_path)[0]
