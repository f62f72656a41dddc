"""The JAX runner for real, in its own environment (built by tools/test.sh)."""

import json
import subprocess
import sys

import pytest

from dlbench.steplog import read_steplog
from tests.conftest import REPO, SHARED_CORES_ENV, framework_python
from tests.frameworks import equivalence

PYTHON = framework_python("jax")
needs_env = pytest.mark.skipif(not PYTHON.exists(), reason="the jax environment is not built")


def launch(run_dir, model="resnet50", scale="1x1", strategy="single", batch=4, size=32, precision="fp32", steps=(2, 6),
           env=None):  # fmt: skip
    cmd = [
        str(PYTHON), "-m", "dlbench.launch",
        "--framework", "jax", "--model", model, "--precision", precision, "--data", "synthetic",
        "--batch", str(batch), "--scale", scale, "--strategy", strategy, "--repeat", "1",
        "--run-dir", str(run_dir), "--preset", "caict2020",
        "--warmup-steps", str(steps[0]), "--measured-steps", str(steps[1]), "--statistic", "mean",
        "--image-size", str(size), "--threads", "2", "--time-limit", "500",
        "--env-lock", str(REPO / "envs/jax.txt"),
    ]  # fmt: skip
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", **SHARED_CORES_ENV, **(env or {})}
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)


def test_module_declares_capabilities_without_importing_jax():
    code = (
        "import sys; from dlbench.runners import capabilities; c = capabilities('jax');"
        "assert not {'jax', 'flax', 'optax'} & set(sys.modules); print(c)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert "sharded" in out and "resnet50" in out


@pytest.fixture(scope="module")
def single_run(tmp_path_factory):
    """The equivalence CASE (AlexNet, 64 px) with batch 8 on one device, 12 steps: the global
    batch of the sharded run below (2 devices x 4; tests/frameworks/equivalence.py)."""
    run_dir = tmp_path_factory.mktemp("jax") / "single"
    case = equivalence.CASE
    result = launch(run_dir, model=case["model"], size=case["image_size"], batch=2 * case["batch"], steps=(0, 12))
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


@needs_env
def test_single_device_run_trains_and_writes_a_valid_log(single_run):
    log = read_steplog(single_run / "rank0.steps.jsonl")
    assert log.valid and log.status == "ok", (log.problems, log.footer)
    header = log.header["framework"]
    assert header["trainable_params"] == 61_100_840  # torchvision's AlexNet
    assert header["backend"] == "cpu" and header["compute_dtype"] == "float32"
    assert header["step_compile"]["persistent_cache"] == "off" and header["step_compile"]["seconds"] > 0
    # XLA's memory analysis of the step: at least AlexNet's fp32 weights and momentum (489 MB).
    memory = header["step_compile"]["memory"]
    assert memory["peak"] == memory["argument"] + memory["output"] + memory["temp"] - memory["alias"]
    assert memory["argument"] >= 2 * 4 * 61_100_840 and memory["alias"] > 0  # the donated state
    assert len(log.header["provenance"]["env_lock_sha256"]) == 64
    losses = [s["loss"] for s in log.steps]
    assert sum(losses[-4:]) < sum(losses[:4])  # a fixed batch is learnt (measured: 24.5 -> 22.3)
    assert json.loads((single_run / "launch.json").read_text())["rank_exit_codes"] == [0]


@needs_env
def test_sharded_reproduces_the_single_device_losses(tmp_path, single_run):
    """`sharded` splits one global batch over the devices and computes the step of the whole
    batch (gradients all-reduced by XLA): the same first loss, first update and losses as one
    device with the global batch and the same learning rate (tests/frameworks/equivalence.py);
    a missing all-reduce would change the first update."""
    single = equivalence.losses(single_run / "rank0.steps.jsonl")[: equivalence.STEPS[1]]
    (sharded,) = equivalence.multi_device("jax", tmp_path / "run", "sharded")
    equivalence.assert_equivalent(sharded, single)


@needs_env
def test_sharded_drives_two_devices_from_one_process_in_bfloat16(tmp_path):
    result = launch(
        tmp_path / "run", model="alexnet", scale="1x2", strategy="sharded", batch=2, size=64, precision="amp"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    log = read_steplog(tmp_path / "run/rank0.steps.jsonl")
    assert log.valid and log.status == "ok", (log.problems, log.footer)
    assert not (tmp_path / "run/rank1.steps.jsonl").exists()  # one process per node
    assert log.header["framework"]["devices"] == ["cpu:0", "cpu:1"]
    assert log.header["framework"]["compute_dtype"] == "bfloat16"
    assert {s["samples"] for s in log.steps} == {4}  # batch 2 on each of 2 devices


@needs_env
def test_a_second_process_takes_the_step_from_the_persistent_compilation_cache(tmp_path):
    """JAX_COMPILATION_CACHE_DIR set by the caller: the first run compiles and writes the step,
    the next (a cell's next repeat) reads it, says so in its header and trains the same."""
    # Every compile written, however fast this machine compiles (the default floor is 1 s).
    env = {"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "cache"), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    headers, losses = [], []
    for run in ("first", "second"):
        result = launch(tmp_path / run, model="alexnet", size=64, batch=2, steps=(0, 2), env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        log = read_steplog(tmp_path / run / "rank0.steps.jsonl")
        assert log.valid and log.status == "ok", (log.problems, log.footer)
        headers.append(log.header["framework"]["step_compile"])
        losses.append([s["loss"] for s in log.steps])
    assert [h["persistent_cache"] for h in headers] == ["miss", "hit"]
    assert headers[1]["cache_dir"] == env["JAX_COMPILATION_CACHE_DIR"]
    assert losses[0] == losses[1]


@needs_env
def test_flax_models_have_torchvisions_parameter_counts():
    code = (
        "import jax, jax.numpy as jnp; from dlbench.runners.jax import models\n"
        "for name in ('resnet152', 'vgg16', 'alexnet'):\n"
        "    m = models.build(name); key = {'params': jax.random.key(0), 'dropout': jax.random.key(1)}\n"
        "    v = jax.eval_shape(lambda: m.init(key, jnp.zeros((1, 64, 64, 3)), train=False))\n"
        "    print(name, sum(x.size for x in jax.tree_util.tree_leaves(v['params'])))"
    )
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", **SHARED_CORES_ENV, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([str(PYTHON), "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    counts = dict(line.split() for line in out.stdout.splitlines())
    assert counts == {"resnet152": "60192808", "vgg16": "138357544", "alexnet": "61100840"}


@needs_env
@pytest.mark.slow
def test_sharded_across_two_nodes_started_like_srun(tmp_path):
    """Two "nodes" on this host, each a task started as srun would: jax.distributed joins
    them (rank 0 coordinates; Gloo all-reduces), one step log per node, the same loss in both."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    args = [
        "--framework", "jax", "--model", "alexnet", "--precision", "fp32", "--data", "synthetic",
        "--batch", "2", "--scale", "2x1", "--strategy", "sharded", "--repeat", "1",
        "--run-dir", str(run_dir), "--preset", "caict2020", "--warmup-steps", "1", "--measured-steps", "3",
        "--statistic", "mean", "--image-size", "64", "--threads", "1", "--time-limit", "400", "--progress-every", "0",
    ]  # fmt: skip
    procs = []
    for rank in (0, 1):
        env = {
            "PYTHONPATH": str(REPO),
            "PATH": "/usr/bin:/bin",
            **SHARED_CORES_ENV,
            "DLBENCH_RANK": str(rank),
            "DLBENCH_WORLD_SIZE": "2",
            "DLBENCH_LOCAL_RANK": "0",
            "DLBENCH_LOCAL_WORLD_SIZE": "1",
            "DLBENCH_MASTER_ADDR": "127.0.0.1",
            "DLBENCH_MASTER_PORT": str(port),
            "DLBENCH_NODES": "127.0.0.1,127.0.0.1",
        }
        command = [str(PYTHON), "-m", "dlbench.launch", *args]
        procs.append(subprocess.Popen(command, cwd=REPO, env=env, stderr=subprocess.PIPE))
    codes = [p.wait(timeout=600) for p in procs]
    assert codes == [0, 0], procs[0].stderr.read()[-3000:]
    logs = [read_steplog(run_dir / f"rank{r}.steps.jsonl") for r in (0, 1)]
    assert all(log.valid and log.status == "ok" for log in logs), [log.footer for log in logs]
    assert [log.header["framework"]["processes"] for log in logs] == [2, 2]
    assert [s["loss"] for s in logs[0].steps] == [s["loss"] for s in logs[1].steps]  # one global loss


@needs_env
@pytest.mark.slow
def test_through_the_pipeline_with_na_cells_named(tmp_path):
    """plan → train → aggregate → report with JAX alone: numbers for AlexNet (the cheapest model
    to compile) on one and two devices; InceptionV3 and real data stay in the tables as N/A with
    the runner's reasons."""
    import pandas as pd
    import yaml

    from tests.tiny_pipeline import snakemake

    grid = {
        "frameworks": ["jax"],
        "models": ["alexnet", "inception_v3"],
        "precision": ["fp32"],
        "data": ["synthetic", "real"],
        "batch_per_device": [4],
        "scales": ["1x1", "1x2"],
        "strategies": {"jax": ["sharded"]},
        "exclude": [],
    }
    tiny = {
        "grid": grid,
        "protocol": {"preset": "mlperf", "warmup_steps": 1, "measured_steps": 3, "repeats": 1},
        "run": {"image_size": 64, "threads": 2, "progress_every": 1},
    }
    (tmp_path / "config").mkdir()
    (tmp_path / "config/config.yaml").write_text((REPO / "config/config.yaml").read_text())
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(tiny))
    result = snakemake(tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    cells = pd.read_csv(tmp_path / "results/tables/cells.csv", dtype={"batch": str})
    measured = cells[(cells["model"] == "alexnet") & (cells["data"] == "synthetic")]
    assert (measured["status"] == "ok").all() and (measured["throughput"] > 0).all(), measured["reason"]
    na = cells[cells["status"] == "unavailable"]
    assert len(na) == 6 and na["reason"].str.contains("Flax InceptionV3|real-data input pipeline").all()
    assert "JAX jit over a device mesh" in (tmp_path / "results/report/index.html").read_text()
