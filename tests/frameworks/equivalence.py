"""Loss equivalence of a multi-device strategy with the single-device run (issue #21): the
launch, the losses and the comparison every framework's test shares.

Tolerance: the same losses within rel 1e-3 / abs 1e-4 (the step's arithmetic is the same up
to reduction order; a missing or doubled reduction moves the second loss by far more).

"The same global batch": strategies whose devices each hold the same synthetic batch (DDP,
MultiWorkerMirrored, MirroredStrategy, ParameterServer, dist_sync, kvstore device) train on
two copies of the single run's batch, so the mean gradient is the single run's; the single
run takes the learning rate of the 2-device run's global batch (DLBENCH_LR_SCALE = devices,
dlbench.workload.sgd_lr). Strategies that split one global batch (JAX sharded) are compared
with a single run of the whole global batch.
"""

from __future__ import annotations

import math
import subprocess

import pytest

from dlbench.steplog import read_steplog
from tests.conftest import REPO, framework_python

REL, ABS = 1e-3, 1e-4
LR_SCALE_ENV = "DLBENCH_LR_SCALE"


def launch(framework: str, run_dir, *extra, env=None, model="resnet50", scale="1x1", strategy="single", batch=4,
           steps=(0, 5), threads=2, image_size=32, data="synthetic") -> subprocess.CompletedProcess:  # fmt: skip
    cmd = [
        str(framework_python(framework)), "-m", "dlbench.launch",
        "--framework", framework, "--model", model, "--precision", "fp32", "--data", data,
        "--batch", str(batch), "--scale", scale, "--strategy", strategy, "--repeat", "1",
        "--run-dir", str(run_dir), "--preset", "caict2020",
        "--warmup-steps", str(steps[0]), "--measured-steps", str(steps[1]), "--statistic", "mean",
        "--image-size", str(image_size), "--threads", str(threads), "--time-limit", "400",
        "--progress-every", "0", "--env-lock", str(REPO / f"envs/{framework}.txt"),
        *extra,
    ]  # fmt: skip
    base = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": "/tmp", "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run(
        cmd, cwd=REPO, env={**base, **(env or {})}, capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def run_script(python, code: str, *args: str, env=None, timeout: int = 600) -> str:
    """Run `code` with a framework environment's python; what it printed after "RESULT "."""
    base = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": "/tmp", "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run(
        [str(python), "-c", code, *args],
        cwd=REPO,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return next(x for x in result.stdout.splitlines() if x.startswith("RESULT "))[len("RESULT ") :]


def losses(path) -> list[float]:
    """The losses of an ok step log, every one finite."""
    log = read_steplog(path)
    assert log.valid and log.status == "ok", (log.problems, log.footer)
    values = [s["loss"] for s in log.steps]
    assert all(v is not None and math.isfinite(v) for v in values), values
    return values


def assert_same_trajectory(multi: list[float], single: list[float]) -> None:
    assert len(multi) == len(single)
    assert multi == pytest.approx(single, rel=REL, abs=ABS), (multi, single)


def falls(values: list[float], window: int = 5) -> float:
    """The mean of the last `window` losses over the mean of the first (< 1: it fell)."""
    return (sum(values[-window:]) / window) / (sum(values[:window]) / window)


# (framework, strategy) -> the test that compares its losses with the single-device run's
# (tests/test_strategies.py checks that every strategy offered is here or cannot run here).
_TF, _MX = "tests/frameworks/test_tensorflow.py::", "tests/frameworks/test_mxnet.py::"
_REPLICATED = _TF + "test_replicated_on_two_logical_cpu_devices_reproduces_the_single_device_losses"
TESTS = {
    ("pytorch", "ddp"): "tests/frameworks/test_pytorch.py::test_ddp_reproduces_the_single_device_losses",
    ("tensorflow", "multi_worker_mirrored"): _TF + "test_two_worker_mirrored_run_reproduces_the_single_device_losses",
    ("tensorflow", "replicated_copy"): _REPLICATED,
    ("tensorflow", "replicated_pscpu"): _REPLICATED,
    ("tensorflow", "parameter_server"): _TF
    + "test_parameter_server_coordinator_with_two_workers_reproduces_the_single_device_losses",
    ("mxnet", "dist_sync"): _MX + "test_dist_sync_two_workers",
    ("mxnet", "device"): _MX + "test_kvstore_device_drives_two_cpu_contexts_from_one_process",
    ("jax", "sharded"): "tests/frameworks/test_jax.py::test_sharded_reproduces_the_single_device_losses",
    ("paddle", "collective"): "tests/frameworks/test_paddle.py::test_collective_reproduces_the_single_device_losses",
}
