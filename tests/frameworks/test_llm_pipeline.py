"""Pipeline parallelism (`pp`, `fsdp_pp`; docs/frameworks/llm.md, "Pipeline parallelism"):
planning without a framework (the schedule and micro-batches as coordinates of pipeline cells
only, one error naming the key for each bad combination, JAX's cells N/A, the memory estimate
by stage), and PyTorch's runner at 1x2 and 2x2 (four ranks started as srun starts them: the
local launcher runs one node) against one device's losses of the same global batch, with the
measured bubble per step beside the schedule's theory."""

from __future__ import annotations

import copy
import re
import socket
import subprocess

import pandas as pd
import pytest

from dlbench import llm, pipelining
from dlbench.analysis import pipeline, tables
from dlbench.analysis.columns import col
from dlbench.coords import CellKey, RunCoords, Scale
from dlbench.planning import config as dlbench_config
from dlbench.planning import fit
from dlbench.planning.grid import ConfigError, expand
from dlbench.steplog import read_steplog
from tests.conftest import REPO, SHARED_CORES_ENV, framework_python
from tests.frameworks import equivalence, estimates

CASE = {"model": "llama_small", "batch": 4}  # the global batch
SEQ = ("--seq-len", "16")
STEPS = (1, 3)  # one warm-up step (its bubble is the shape inference's), three measured
# The compilers' estimate against a pipeline's largest rank's peak (docs/memory.md, "Pipeline
# stages"), the ranks on jemalloc: glibc's heap keeps the gathered blocks' freed memory.
COMPILED_TOLERANCE = 0.15
ALLOCATOR = ("--allocator", "jemalloc")

needs_torch = pytest.mark.skipif(
    not framework_python("pytorch").exists(), reason="the pytorch environment is not built"
)

BASE = {
    "grid": {
        "frameworks": ["pytorch", "jax"],
        "models": ["llama_small"],
        "precision": ["fp32"],
        "data": ["synthetic"],
        "batch_per_device": [2],
        "scales": ["1x1", "1x2"],
        "strategies": {"pytorch": ["ddp", "pp"], "jax": ["pp"]},
        "pp_schedule": ["1f1b", "interleaved_1f1b"],
        "pp_microbatches": [0, 2],
    },
    "protocol": {"preset": "caict2020"},
    "run": {"seq_len": 64},
}


def _grid(**changes):
    config = copy.deepcopy(BASE)
    config["grid"].update(changes)
    return config


def test_schedule_and_micro_batches_are_coordinates_of_pipeline_cells_only():
    planned = expand(_grid())
    cells = {(r.framework, r.scale, r.strategy, r.pp_schedule, r.pp_microbatches) for r in planned.runs}
    pipelines = {("pytorch", "1x2", "pp", s, m) for s in ("1f1b", "interleaved_1f1b") for m in (4, 2)}
    singles = {(fw, "1x1", "single", "none", 1) for fw in ("pytorch", "jax")}
    assert cells == pipelines | singles | {("pytorch", "1x2", "ddp", "none", 1)}  # 0: one sequence each
    run = next(r for r in planned.runs if r.pp_schedule == "interleaved_1f1b" and r.pp_microbatches == 4)
    assert run.run_dir.endswith("/1x2/pp+pp_interleaved_1f1b_m4/rep1")
    assert RunCoords.from_wildcards(run.wildcards()) == run
    jax = {c.pp_schedule: why for c, why in planned.unavailable.items() if c.framework == "jax"}
    assert set(jax) == {"1f1b", "interleaved_1f1b"} and all(
        "JAX has no pipeline-parallel API" in w for w in jax.values()
    )


@pytest.mark.parametrize(
    "changes,expected",
    [
        (
            {"scales": ["1x4"], "pp_microbatches": [0]},
            "grid.pp_schedule: interleaved_1f1b on 4 pipeline ranks makes 8 stages",
        ),
        ({"pp_microbatches": [3]}, "grid.pp_microbatches: 3 does not divide the pipeline's batch of 4 sequences"),
        ({"models": ["llama3_1b"]}, "grid.models: llama3_1b ties its head to its embedding"),
        ({"pp_schedule": ["1f1b"], "pp_microbatches": [1]}, "grid.pp_microbatches: 1f1b needs at least as many"),
    ],
)
def test_a_bad_pipeline_is_one_planning_error_naming_the_key(changes, expected):
    with pytest.raises(ConfigError, match="^" + re.escape(expected)):
        expand(_grid(**changes))


def test_an_unknown_schedule_is_refused_by_the_config_schema_and_the_coordinates():
    assert "pp_schedule" in dlbench_config.schema_problem(_grid(pp_schedule=["zigzag"]))
    with pytest.raises(ValueError, match="pp_schedule='zigzag' is not one of"):
        RunCoords("pytorch", "llama_small", "fp32", "synthetic", "2", "1x2", "pp", pp_schedule="zigzag", repeat=1)


def test_memory_estimate_holds_a_stages_share_and_its_micro_batches_in_flight():
    """A rank's state is its stages' parameters (stage 0: the embedding and three blocks of
    llama_small, balanced against the head's 5.2 blocks); 1F1B keeps p micro-batches in flight
    on the first rank, so more micro-batches mean fewer tokens kept; GPipe keeps them all."""
    assert pipelining.split_layers("llama_small", 2) == ((0, 3), (3, 4))
    assert sum(pipelining.stage_parameters("llama_small", 4)) == llm.parameter_count("llama_small")
    step, sharding = fit.StepShape(2, 64), fit.Sharding(2, pp=2)

    def terms(schedule, microbatches):
        return fit.pipeline_estimate_bytes(
            "llama_small", "fp32", step, sharding, fit.Pipeline(schedule, microbatches), "cpu"
        )

    one_f_one_b = {m: terms("1f1b", m) for m in (2, 4)}
    assert one_f_one_b[2]["state"] == 16 * max(pipelining.stage_parameters("llama_small", 2))
    assert one_f_one_b[4]["activations"] == pytest.approx(one_f_one_b[2]["activations"] / 2)
    assert terms("gpipe", 4)["activations"] == pytest.approx(terms("gpipe", 2)["activations"])
    # the last rank keeps one micro-batch's logits under 1F1B, every one's under GPipe
    assert terms("gpipe", 4)["logits"] == pytest.approx(4 * one_f_one_b[4]["logits"])
    whole = fit.estimate_bytes("llama_small", "fp32", fit.StepShape(4, 64), fit.Sharding(1), "cpu")
    assert one_f_one_b[4]["total"] < whole["total"]


# ------------------------------------------------------------------ PyTorch
def _launch_nodes(run_dir, strategy: str, *extra, nodes: int = 2, per_node: int = 2) -> None:
    """A multi-node run on this host, each rank started as srun starts it (DLBENCH_* variables)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run_dir.mkdir(parents=True)
    world = nodes * per_node
    args = [
        "--framework", "pytorch", "--model", CASE["model"], "--precision", "fp32", "--data", "synthetic",
        "--batch", str(CASE["batch"] // world), "--scale", f"{nodes}x{per_node}", "--strategy", strategy,
        "--repeat", "1", "--run-dir", str(run_dir), "--preset", "caict2020", "--warmup-steps", str(STEPS[0]),
        "--measured-steps", str(STEPS[1]), "--statistic", "mean", "--threads", str(per_node), "--time-limit", "400",
        "--progress-every", "0", "--env-lock", str(REPO / "envs/pytorch.txt"), *SEQ, *extra,
    ]  # fmt: skip
    procs = []
    for rank in range(world):
        env = {
            "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": "/tmp", **SHARED_CORES_ENV,
            "DLBENCH_RANK": str(rank), "DLBENCH_WORLD_SIZE": str(world),
            "DLBENCH_LOCAL_RANK": str(rank % per_node), "DLBENCH_LOCAL_WORLD_SIZE": str(per_node),
            "DLBENCH_MASTER_ADDR": "127.0.0.1", "DLBENCH_MASTER_PORT": str(port),
            "DLBENCH_NODE": f"node{rank // per_node}", "DLBENCH_NODES": ",".join(["127.0.0.1"] * nodes),
        }  # fmt: skip
        command = [str(framework_python("pytorch")), "-m", "dlbench.launch", *args]
        procs.append(subprocess.Popen(command, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True))
    codes = [p.wait(timeout=600) for p in procs]
    assert codes == [0] * world, procs[0].stderr.read()[-3000:]


# (name, scale, strategy, schedule, micro-batches): 1x2 under 1F1B, and 2x2 as two nodes' stages
# of two FSDP2 ranks each, interleaved (four stages). The other schedules, pp at 2x2 (four
# stages) and its 1x4 twin are checked by hand and by config/grids/llm_pp_cpu.yaml (docs).
RUNS = (
    ("pp_1f1b_1x2", "1x2", "pp", "1f1b", 4),
    ("fsdp_pp_interleaved_2x2", "2x2", "fsdp_pp", "interleaved_1f1b", 2),
)


@pytest.fixture(scope="module")
def pipeline_runs(tmp_path_factory):
    """The single device's run of the global batch (one thread, as each rank below) and each
    of RUNS: name → (its step logs, the step log of the single run)."""
    root = tmp_path_factory.mktemp("pipelines")
    equivalence.launch("pytorch", root / "single", *SEQ, steps=STEPS, threads=1, **CASE)
    done = {}
    for name, scale, strategy, schedule, microbatches in RUNS:
        extra = ("--pp-schedule", schedule, "--pp-microbatches", str(microbatches), *ALLOCATOR)
        if scale == "1x2":
            equivalence.launch("pytorch", root / name, *SEQ, *extra, scale=scale, strategy=strategy, steps=STEPS,
                               threads=2, model=CASE["model"], batch=CASE["batch"] // 2)  # fmt: skip
        else:
            _launch_nodes(root / name, strategy, *extra)
        done[name] = [read_steplog(p) for p in sorted((root / name).glob("rank*.steps.jsonl"))]
    return done, read_steplog(root / "single" / "rank0.steps.jsonl")


@needs_torch
@pytest.mark.parametrize("name,scale,strategy,schedule,microbatches", RUNS)
def test_pipeline_reproduces_the_single_device_losses(pipeline_runs, name, scale, strategy, schedule, microbatches):
    """Every rank's loss is its pipeline's (the last stage's, broadcast); their mean is the
    global batch's, which the single device computes in one pass: the same losses within the
    equivalence tolerances (the micro-batches' sums round differently from one batch's)."""
    runs, single = pipeline_runs
    logs = runs[name]
    assert len(logs) == (4 if scale == "2x2" else 2)
    assert all(log.valid and log.status == "ok" for log in logs), [log.footer for log in logs]
    per_rank = [[s["loss"] for s in log.steps] for log in logs]
    mean = [sum(step) / len(step) for step in zip(*per_rank, strict=True)]
    equivalence.assert_equivalent(mean, [s["loss"] for s in single.steps])
    layout = logs[0].header["framework"]["parallel_layout"]
    ranks = 4 if strategy == "pp" and scale == "2x2" else 2
    assert layout["mesh"] == {"pp": ranks, "data": len(logs) // ranks}
    pipeline = layout["pipeline"]
    stages = ranks * pipelining.SCHEDULES[schedule].stages_per_rank
    assert pipeline["stages"] == stages and sum(pipeline["blocks_per_stage"]) == 4
    assert pipeline["theoretical_bubble"] == pytest.approx(pipelining.SCHEDULES[schedule].bubble(ranks, microbatches))


@needs_torch
def test_each_rank_records_its_bubble_and_every_stage_waits(pipeline_runs):
    """Each step record of a pipeline rank has its bubble, in [0, 1); every rank idles for a
    part of each measured step (the pipeline fills and drains: waiting on a neighbour is not
    counted as work), the last rank too, though it sets the pace."""
    runs, _ = pipeline_runs
    for name, logs in runs.items():
        assert all(0 <= s["bubble"] < 1 for log in logs for s in log.steps), name
        means = [sum(s["bubble"] for s in log.measured_steps()) / STEPS[1] for log in logs]
        assert min(means) > 0.01, (name, means)


@needs_torch
def test_the_tables_take_the_pipelines_bubble_its_theory_and_each_ranks_peak(pipeline_runs):
    """runs.csv's pipeline columns from the same logs: the least idle rank's bubble, the theory
    from the header, each rank's bubble and peak; cells.md's table shows them."""
    runs, _ = pipeline_runs
    logs = runs["pp_1f1b_1x2"]
    row = pipeline.run_pipeline(logs)
    means = [sum(s["bubble"] for s in log.measured_steps()) / STEPS[1] for log in logs]
    assert row[col.bubble_fraction] == pytest.approx(min(means))
    assert row[col.bubble_theory] == pytest.approx(1 / 5)  # (p - 1) / (m + p - 1), p = 2, m = 4
    assert row[col.stage_bubbles] == ";".join(f"{m:.3f}" for m in means)
    assert len(row[col.stage_peaks_gib].split(";")) == 2
    coords = RunCoords.from_dict(logs[0].header["run"])
    cells = pd.DataFrame([{**coords.cell.as_dict(), col.status: "ok", col.repeat: 1, **row}])
    cells = cells.assign(**pipeline.cell_pipeline(cells))
    table = "\n".join(tables.pipeline_lines(cells))
    assert "## Pipeline bubbles" in table and row[col.stage_bubbles] in table


@needs_torch
def test_the_compilers_estimate_knows_the_stages(pipeline_runs, tmp_path):
    """Planning's estimate of each pipeline cell (each rank's stages as the runner builds them,
    one micro-batch through them on fake tensors under torch's tracker, its kept activations
    times the schedule's micro-batches in flight, or the optimizer's step) against the largest
    rank's measured peak, torch's resident runtime and gloo's workspaces for FSDP2's collectives
    included: within COMPILED_TOLERANCE."""
    runs, _ = pipeline_runs
    cells = {
        name: CellKey(
            "pytorch", CASE["model"], "fp32", "synthetic", str(CASE["batch"] // Scale.parse(scale).devices), scale,
            strategy, pp_schedule=schedule, pp_microbatches=microbatches,
        )
        for name, scale, strategy, schedule, microbatches in RUNS
    }  # fmt: skip
    made = estimates.compiler_estimates(tmp_path, cells, int(SEQ[1]))
    measured = {name: estimates.measured_peak_gib(runs[name]) for name in cells}
    for name in cells:
        assert "MemTracker" in made[name].basis, made
        assert made[name].gib == pytest.approx(measured[name], rel=COMPILED_TOLERANCE), (made, measured)
