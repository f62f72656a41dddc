"""The PyTorch runner for real, in its own environment (built by tools/test.sh)."""

import json
import math
import subprocess

import pytest

from dlbench.steplog import read_steplog
from tests.conftest import REPO, SHARED_CORES_ENV, framework_python

PYTHON = framework_python("pytorch")
needs_env = pytest.mark.skipif(not PYTHON.exists(), reason="the pytorch environment is not built")


def launch(
    run_dir,
    *extra,
    model="resnet50",
    scale="1x1",
    strategy="single",
    batch=4,
    steps=(2, 6),
    framework="pytorch",
    environment=(),
):
    """The launcher in the PyTorch environment; `framework="toy"`: the toy plug-in (its numpy is
    there). `environment`: more (name, value) pairs for it."""
    cmd = [
        str(PYTHON),
        "-m",
        "dlbench.launch",
        "--framework",
        framework,
        "--model",
        model,
        "--precision",
        "fp32",
        "--data",
        "synthetic",
        "--batch",
        str(batch),
        "--scale",
        scale,
        "--strategy",
        strategy,
        "--repeat",
        "1",
        "--run-dir",
        str(run_dir),
        "--preset",
        "caict2020",
        "--warmup-steps",
        str(steps[0]),
        "--measured-steps",
        str(steps[1]),
        "--statistic",
        "mean",
        "--image-size",
        "32",
        "--threads",
        "2",
        "--time-limit",
        "300",
        "--env-lock",
        str(REPO / "envs/pytorch.txt"),
        *extra,
    ]
    return subprocess.run(
        cmd,
        cwd=REPO,
        env={
            "PYTHONPATH": str(REPO),
            "PATH": "/usr/bin:/bin",
            **SHARED_CORES_ENV,
            "DLBENCH_FRAMEWORK_PATH": str(REPO / "tests/plugins"),
            **dict(environment),
        },
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@needs_env
def test_single_device_run_writes_valid_log_with_provenance(tmp_path):
    result = launch(tmp_path / "run")
    assert result.returncode == 0, result.stderr[-3000:]
    log = read_steplog(tmp_path / "run/rank0.steps.jsonl")
    assert log.valid and log.status == "ok", (log.problems, log.footer)
    assert len(log.measured_steps()) == 6
    assert log.header["framework"]["version"].startswith("2.")
    assert log.header["framework"]["trainable_params"] == 25_557_032  # torchvision ResNet-50
    assert len(log.header["provenance"]["env_lock_sha256"]) == 64
    assert json.loads((tmp_path / "run/launch.json").read_text())["rank_exit_codes"] == [0]


@needs_env
def test_loss_decreases_on_a_fixed_batch(tmp_path):
    result = launch(tmp_path / "run", steps=(0, 30), batch=4)
    assert result.returncode == 0, result.stderr[-3000:]
    losses = [s["loss"] for s in read_steplog(tmp_path / "run/rank0.steps.jsonl").steps]
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5


@needs_env
def test_ddp_two_processes_each_write_a_log(tmp_path):
    result = launch(tmp_path / "run", scale="1x2", strategy="ddp")
    assert result.returncode == 0, result.stderr[-3000:]
    logs = [read_steplog(tmp_path / f"run/rank{r}.steps.jsonl") for r in (0, 1)]
    assert all(log.valid and log.status == "ok" for log in logs)
    assert [log.header["world_size"] for log in logs] == [2, 2]
    assert logs[0].header["threads"] == 1  # 2 threads split over 2 local ranks


@needs_env
def test_existing_raw_logs_are_never_overwritten(tmp_path):
    # The launcher's doing, whatever the framework: the toy plug-in's run takes a second.
    assert launch(tmp_path / "run", framework="toy").returncode == 0
    before = (tmp_path / "run/rank0.steps.jsonl").read_bytes()
    (tmp_path / "run/launch.json").unlink()  # as an interrupted attempt leaves it
    again = launch(tmp_path / "run", framework="toy")
    assert again.returncode == 0 and "kept in attempt1/" in again.stderr
    assert (tmp_path / "run/attempt1/rank0.steps.jsonl").read_bytes() == before
    assert read_steplog(tmp_path / "run/rank0.steps.jsonl").status == "ok"  # the new attempt's


@needs_env
def test_memory_cap_makes_a_real_cpu_oom(tmp_path):
    # Batch 256 runs out in the forward pass at any cap from 450 to 1000 MB here; batch 64 at
    # 560-620 MB reached the backward, where oneDNN's convolution may crash (SIGSEGV) instead.
    result = launch(tmp_path / "run", "--memory-cap-mb", "600", batch=256, steps=(1, 1))
    assert result.returncode == 0, result.stderr[-3000:]
    log = read_steplog(tmp_path / "run/rank0.steps.jsonl")
    assert log.valid and log.status == "oom", log.footer
    # The allocator's message, or oneDNN's for a refused scratchpad (the runner's is_oom says why).
    assert "allocate" in log.footer["error"] or "could not create a primitive" in log.footer["error"]


@needs_env
def test_a_build_that_runs_out_under_the_cap_still_leaves_its_log(tmp_path):
    # The header's library versions load cuDNN: read under the cap, the refused mapping ended
    # the process with no step log at all.
    result = launch(tmp_path / "run", "--memory-cap-mb", "50", steps=(1, 1))
    assert result.returncode == 0, result.stderr[-3000:]
    log = read_steplog(tmp_path / "run/rank0.steps.jsonl")
    assert log.valid and log.status == "oom" and log.footer["steps_completed"] == 0, log.footer
    assert "can't allocate memory" in log.footer["error"]


@pytest.mark.slow
@needs_env
def test_batch_max_search_finds_the_edge(tmp_path):
    from dlbench.planning import batch_search

    # 64 px: at 32 px ResNet-50 ends in a 1x1 map, where batch 1 cannot train (BatchNorm).
    request = batch_search.probe_request(
        "pytorch",
        "resnet50",
        "fp32",
        "cpu",
        preset="caict2020",
        statistic="mean",
        image_size=64,
        seq_len=0,
        threads=2,
        # 580 MB: batch 14 here, 8 probes (700 MB: 27, 10 probes); 450 MB fits batch 1 only.
        memory_cap_mb=580,
    )
    probe = batch_search.launcher_probe(str(PYTHON), str(REPO), request)
    best, history = batch_search.search(probe, limit=1024)
    assert 1 < best < 1024, history
    statuses = {p["batch"]: p["status"] for p in history}
    assert statuses[best] == "ok"
    # the search's own probes show best+1 ran out of memory (or a smaller failing bound did)
    too_large = ("oom", batch_search.CRASHED_UNDER_CAP)
    assert statuses.get(best + 1) in too_large or probe(best + 1) in too_large


def test_dali_only_on_cuda_when_installed_and_not_switched_off(monkeypatch):
    """DALI cannot run here (no GPU, no wheel); which pipeline a run chooses is tested."""
    import importlib.util

    from dlbench.runners.pytorch import pipeline

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if name == "nvidia.dali" else None)
    assert pipeline.use_dali("cuda") is True
    assert pipeline.use_dali("cpu") is False
    assert pipeline.use_dali("cuda", enabled=False) is False  # framework_options.pytorch.dali: false
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert pipeline.use_dali("cuda") is False


@needs_env
def test_compiled_run_compiles_the_model_and_the_optimizer_step(tmp_path):
    # AlexNet: the smallest graph to compile (about 20 s here); 64 px is its smallest size.
    result = launch(tmp_path / "run", "--compile", "--image-size", "64", model="alexnet", batch=2, steps=(1, 4))
    assert result.returncode == 0, result.stderr[-3000:]
    log = read_steplog(tmp_path / "run/rank0.steps.jsonl")
    assert log.valid and log.status == "ok", (log.problems, log.footer)
    assert log.header["framework"]["torch_compile"] == "model and optimizer step"
    losses = [s["loss"] for s in log.steps]
    assert all(math.isfinite(loss) for loss in losses) and len(set(losses)) > 1  # it trains
