"""Per-device environments (issue 16): run.device picks each framework's hash lock
(envs/<framework>-cuda.txt on CUDA) at planning time, and a framework with no build for the
device is an N/A cell with its reason, never a failed run."""

import re
import subprocess
import sys

import pytest

from dlbench.planning import grid as dlbench_grid
from dlbench.runners import capabilities, env_name, framework_names
from dlbench.runners.plugin import Capabilities
from tests.conftest import REPO

PLUGINS = REPO / "tests" / "plugins"
BUILT_IN = ("jax", "mxnet", "paddle", "pytorch", "tensorflow")
# The package that makes each CUDA lock a CUDA build (envs/<framework>-cuda.in).
CUDA_PACKAGE = {
    "pytorch": "nvidia-dali-cuda130",
    "tensorflow": "nvidia-cudnn-cu12",
    "mxnet": "mxnet-cu112",
    "jax": "jax-cuda12-plugin",
    "paddle": "paddlepaddle-gpu",
}


def _dry_run(tmp_path, *args, env=None):
    (tmp_path / "config").mkdir(exist_ok=True)
    (tmp_path / "config" / "config.yaml").write_text((REPO / "config/config.yaml").read_text())
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout + result.stderr


def _venvs_used(text: str) -> set[str]:
    return set(re.findall(r"\.venvs/([a-z0-9_-]+)/\.dlbench-env", text))


@pytest.mark.parametrize("framework", BUILT_IN)
def test_each_framework_has_a_hash_locked_cuda_environment(framework):
    env = env_name(framework, "cuda")
    assert env == f"{framework}-cuda" and env_name(framework) == framework
    lock = (REPO / "envs" / f"{env}.txt").read_text()
    pins = re.findall(r"^([a-z0-9_.-]+)==\S+ \\\n((?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)", lock, re.M)
    names = {name for name, _ in pins}
    assert len(pins) == len(re.findall(r"^[a-z0-9_.-]+==", lock, re.M)), "a pin without hashes"
    assert CUDA_PACKAGE[framework] in names and "nvidia-ml-py" in names
    assert (REPO / "envs" / f"{env}.yaml").read_text().count(f"-r {env}.txt") == 1


def test_the_caict_grid_on_cuda_plans_every_framework_with_its_cuda_environment(tmp_path):
    text = _dry_run(
        tmp_path, "--configfile", str(REPO / "config/grids/caict2020.yaml"), "--config", "run={device: cuda}"
    )
    used = _venvs_used(text)
    for framework in ("pytorch", "tensorflow", "mxnet"):
        assert f"{framework}-cuda" in used
    # The CPU environments appear only for the FLOPs count (PyTorch on the host), never a run.
    assert used - {"pytorch"} == {"pytorch-cuda", "tensorflow-cuda", "mxnet-cuda"}
    # `batch: max`'s search is submitted with a 1-device run's request: one GPU.
    search = text.split("rule find_max_batch:", 1)[1].split("\n\n", 1)[0]
    assert "gpu=1" in search and "tasks=1" in search


def test_on_cuda_each_framework_runs_in_its_cuda_image_built_from_its_cuda_lock(tmp_path):
    from dlbench.images import podman as images
    from dlbench.launch.container import image_name

    grid = str(REPO / "config/grids/caict2020.yaml")
    text = _dry_run(tmp_path, "--configfile", grid, "--config", "run={device: cuda, container: podman}")
    for framework in ("pytorch", "tensorflow", "mxnet"):
        assert f"/{framework}-cuda.lock.json" in text and f"/{framework}.lock.json" not in text
        assert f"envs/{framework}-cuda.txt" in text  # the podman_image rule's input
        assert images.env_lock(image_name(framework, "cuda")) == f"envs/{framework}-cuda.txt"
    assert image_name("pytorch") == "pytorch" and images.env_lock("pytorch") == "envs/pytorch.txt"


def test_the_default_run_on_cpu_builds_no_cuda_environment(tmp_path):
    used = _venvs_used(_dry_run(tmp_path, "--forceall"))
    assert used and not any(env.endswith("-cuda") for env in used)


def test_a_framework_without_a_cuda_build_is_na_at_planning_time(monkeypatch):
    monkeypatch.setenv("DLBENCH_FRAMEWORK_PATH", str(PLUGINS))
    assert "toy" in framework_names()
    config = {
        "grid": {
            "frameworks": ["toy", "pytorch"],
            "models": ["resnet50"],
            "batch_per_device": [8],
            "data": ["synthetic"],
            "precision": ["fp32"],
            "scales": ["1x1", "1x2"],
            "strategies": {"toy": ["replicas"], "pytorch": ["ddp"]},
        },
        "protocol": {"preset": "caict2020"},
        "run": {"device": "cuda"},
    }
    planned = dlbench_grid.expand(config)
    assert {run.framework for run in planned.runs} == {"pytorch"}
    reasons = {cell.framework: why for cell, why in planned.unavailable.items()}
    assert reasons == {"toy": "Toy (numpy) declares no cuda environment"}
    config["run"]["device"] = "cpu"
    assert {run.framework for run in dlbench_grid.expand(config).runs} == {"pytorch", "toy"}


def test_device_fields_refuse_an_unknown_device_and_a_bad_name():
    base = {"label": "X", "colour": "#000000", "models": ("resnet50",), "precisions": ("fp32",)}
    with pytest.raises(ValueError, match="device_envs: unknown device 'rocm'"):
        Capabilities(**base, device_envs={"rocm": "x-rocm"})
    with pytest.raises(ValueError, match="device_envs: 'x cuda' is not an environment name"):
        Capabilities(**base, device_envs={"cuda": "x cuda"})
    caps = Capabilities(**base, unavailable_devices={"cuda": "no CUDA wheel for Python 3.11"})
    assert caps.device_unavailable("cuda") == "no CUDA wheel for Python 3.11"
    assert caps.device_unavailable("cpu") is None
    assert capabilities("pytorch").device_unavailable("cuda") is None


# The wheel that provides each CUDA 11 library MXNet's CUDA build needs.
MXNET_CUDA_WHEELS = {
    "libcudart.so.11.0": "nvidia-cuda-runtime-cu11",
    "libnvrtc.so.11.2": "nvidia-cuda-nvrtc-cu11",
    "libcublasLt.so.11": "nvidia-cublas-cu11",
    "libcublas.so.11": "nvidia-cublas-cu11",
    "libcusparse.so.11": "nvidia-cusparse-cu11",
    "libcusolver.so.11": "nvidia-cusolver-cu11",
    "libcufft.so.10": "nvidia-cufft-cu11",
    "libcurand.so.10": "nvidia-curand-cu11",
    "libcudnn.so.8": "nvidia-cudnn-cu11",
    "libnccl.so.2": "nvidia-nccl-cu11",
    "libnvToolsExt.so.1": "nvidia-nvtx-cu11",
}


def test_mxnet_cuda_libraries_come_from_locked_wheels_and_load_from_site_packages(tmp_path):
    from dlbench.runners import _cuda_wheels
    from dlbench.runners.mxnet import CUDA_LIBRARIES

    lock = (REPO / "envs" / "mxnet-cuda.txt").read_text()
    assert set(CUDA_LIBRARIES) == set(MXNET_CUDA_WHEELS)
    for wheel in MXNET_CUDA_WHEELS.values():
        assert re.search(rf"^{wheel}==", lock, re.M), wheel
    # A real shared library laid out as a wheel lays out its own: nvidia/<name>/lib/<soname>.
    lib = tmp_path / "site" / "nvidia" / "zlib" / "lib"
    lib.mkdir(parents=True)
    (lib / "libz.so.1").write_bytes(open("/lib/x86_64-linux-gnu/libz.so.1", "rb").read())
    loaded = _cuda_wheels.preload(("libz.so.1", "libcudart.so.11.0"), [str(tmp_path / "site")])
    assert loaded == [str(lib / "libz.so.1")]
