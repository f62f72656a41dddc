"""benchmarks/gpu_check.py on this GPU-less machine: the clear failure without a GPU, and its
CPU path end to end (the runner, the bare loop, the ratio, energy's reason, MFU's)."""

import subprocess

from tests.conftest import REPO

SCRIPT = str(REPO / "benchmarks" / "gpu_check.py")
PYTHON = str(REPO / ".venvs" / "pytorch" / "bin" / "python")


def _run(*args):
    return subprocess.run([PYTHON, SCRIPT, *args], capture_output=True, text=True, timeout=300, check=False)


def test_without_a_gpu_it_exits_2_and_says_why():
    result = _run("--steps", "1")
    assert result.returncode == 2
    assert "sees no CUDA GPU; run with --device cpu" in result.stderr
    assert "traceback" not in result.stderr.lower()


def test_cpu_smoke_runs_runner_and_bare_loop_and_prints_every_figure():
    result = _run(
        "--device", "cpu", "--model", "alexnet", "--batch", "2", "--image-size", "64",
        "--warmup", "1", "--steps", "2", "--rounds", "1", "--precisions", "fp32", "--compile", "off",
        "--threads", "1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert ".venvs/pytorch/bin/python (project environment)" in out
    for line in ("window ", "per-step ", "bare ", "runner (window) ÷ bare:", "per-step sync ÷ window sync:"):
        assert line in out
    assert "energy not measured: the run is on the CPU; NVML: NVML library not found" in out
    assert "MFU: no peak known for cpu" in out
