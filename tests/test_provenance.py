"""dlbench.provenance on this machine (real values), and its container / Slurm / GPU paths."""

import hashlib
import json
import os
import platform
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlbench import provenance
from dlbench.images import apptainer as containers
from dlbench.steplog import read_steplog
from tests.conftest import REPO, SHARED_CORES_ENV, framework_python

CONTAINER_VARIABLES = (
    "APPTAINER_CONTAINER",
    "SINGULARITY_CONTAINER",
    "DLBENCH_IMAGE_RECORD",
    "DLBENCH_HASH_IMAGE",
    "DLBENCH_CONFIG_SHA256",
)


@pytest.fixture
def clean_env(monkeypatch):
    for name in (*CONTAINER_VARIABLES, *provenance.SLURM_VARIABLES, "SLURM_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def git(*args) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


def test_collect_on_this_machine_returns_its_real_values(clean_env):
    lock = REPO / "envs" / "pytorch.txt"
    started = time.perf_counter()
    p = provenance.collect(str(lock))
    elapsed = time.perf_counter() - started
    assert elapsed < 5, f"collect() took {elapsed:.2f} s; it runs once per rank"
    assert p["cpu_count"] == os.cpu_count()
    assert p["cpus_allowed"] == len(os.sched_getaffinity(0))
    meminfo = Path("/proc/meminfo").read_text().split("\n")[0].split()
    assert p["memory_gb"] == round(int(meminfo[1]) / 1024**2, 1)
    cpuinfo = Path("/proc/cpuinfo").read_text()
    assert p["cpu_model"] in cpuinfo
    assert p["hostname"] == socket.gethostname()
    assert p["python"]["version"] == platform.python_version()
    assert p["python"]["executable"] == sys.executable
    assert p["os"] == platform.platform() and p["kernel"] == platform.release()
    if Path("/etc/os-release").exists():
        assert p["os_release"] and p["os_release"] in Path("/etc/os-release").read_text()
    assert p["env_lock"] == "pytorch.txt"
    assert p["env_lock_sha256"] == hashlib.sha256(lock.read_bytes()).hexdigest()
    assert p["git"]["commit"] == git("rev-parse", "HEAD")
    assert isinstance(p["git"]["dirty"], bool)
    assert p["git"]["source"] == "checkout"
    assert p["slurm"] is None or p["slurm"]["source"].startswith("cgroup")
    assert p["container"] is None and p["container_image"] is None
    assert p["config_sha256"] is None
    if not any((Path(d) / "nvidia-smi").exists() for d in os.environ["PATH"].split(os.pathsep)):
        assert p["gpu"] is None
    json.dumps(p)  # goes into a JSON header line as it is


def test_config_hash_is_canonical_and_read_from_the_environment(clean_env):
    a = {"grid": {"frameworks": ["pytorch"], "models": ["resnet50"]}, "run": {"threads": 2}}
    b = {"run": {"threads": 2}, "grid": {"models": ["resnet50"], "frameworks": ["pytorch"]}}
    assert provenance.config_sha256(a) == provenance.config_sha256(b)
    assert provenance.config_sha256(a) != provenance.config_sha256({**a, "run": {"threads": 4}})
    clean_env.setenv("DLBENCH_CONFIG_SHA256", provenance.config_sha256(a))
    assert provenance.collect()["config_sha256"] == provenance.config_sha256(a)


def test_slurm_from_the_environment_and_from_the_cgroup(clean_env):
    clean_env.setenv("SLURM_JOB_ID", "4242")
    clean_env.setenv("SLURM_JOB_NODELIST", "gpu[01-02]")
    clean_env.setenv("SLURM_CLUSTER_NAME", "hpc")
    info = provenance.slurm_info()
    assert info["slurm_job_id"] == "4242" and info["slurm_job_nodelist"] == "gpu[01-02]"
    assert info["slurm_cluster_name"] == "hpc" and info["source"] == "environment"
    for name in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_CLUSTER_NAME"):
        clean_env.delenv(name)
    # apptainer --cleanenv: no SLURM_* inside the container, but the cgroup path names the job
    clean_env.setattr(provenance, "_cgroup_paths", lambda: {"": "/system.slice/slurmstepd.scope/job_777/step_0/user"})
    assert provenance.slurm_info() == {"slurm_job_id": "777", "source": "cgroup (SLURM_* not in the environment)"}
    clean_env.setattr(provenance, "_cgroup_paths", lambda: {"memory": "/slurm/uid_1000/job_31/step_batch"})
    assert provenance.slurm_info()["slurm_job_id"] == "31"
    clean_env.setattr(provenance, "_cgroup_paths", lambda: {"": "/user.slice"})
    assert provenance.slurm_info() is None


@pytest.fixture
def image(tmp_path) -> Path:
    path = tmp_path / "images" / "pytorch.sif"
    path.parent.mkdir()
    path.write_bytes(os.urandom(1 << 16))
    return path


def test_container_digest_from_the_verification_record(clean_env, tmp_path, image):
    lock = tmp_path / "images.lock"
    lock.write_text((REPO / "containers" / "images.lock").read_text())
    digest = hashlib.sha256(image.read_bytes()).hexdigest()
    containers.set_pinned_sha256("pytorch", digest, lock)
    record = tmp_path / "record.json"
    containers.verify_image("pytorch", image, lock, record)
    clean_env.setenv("APPTAINER_CONTAINER", str(image))
    clean_env.setenv("DLBENCH_IMAGE_RECORD", str(record))
    p = provenance.collect()
    assert p["container_image"] == str(image)
    assert p["container"]["sha256"] == digest
    assert p["container"]["sha256_source"].startswith("verified against the lock")
    # the image changed after verification: the record no longer vouches for it
    image.write_bytes(os.urandom(1 << 16))
    c = provenance.container_info()
    assert c["sha256"] is None and "changed" in c["sha256_source"]


def test_container_digest_without_a_record(clean_env, image):
    clean_env.setenv("SINGULARITY_CONTAINER", str(image))
    c = provenance.container_info()
    assert c["path"] == str(image) and c["sha256"] is None and "not computed" in c["sha256_source"]
    clean_env.setenv("DLBENCH_HASH_IMAGE", "1")
    assert provenance.container_info()["sha256"] == hashlib.sha256(image.read_bytes()).hexdigest()
    clean_env.delenv("DLBENCH_HASH_IMAGE")
    Path(f"{image}.sha256").write_text("ab" * 32 + f"  {image.name}\n")
    c = provenance.container_info()
    assert c["sha256"] == "ab" * 32 and c["sha256_source"].startswith("sidecar")


NVIDIA_SMI_Q = """
==============NVSMI LOG==============

Timestamp                                 : Sat Nov 21 10:00:00 2026
Driver Version                            : 580.65.06
CUDA Version                              : 13.0

Attached GPUs                             : 2
GPU 00000000:07:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Persistence Mode                      : Enabled
    Clocks
        Graphics                          : 345 MHz
    Processes                             : None
GPU 00000000:0F:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Processes
        Process ID                        : 1234
"""


def test_nvidia_smi_q_parses_into_nested_sections():
    parsed = provenance.parse_nvidia_smi_q(NVIDIA_SMI_Q)
    assert parsed["Driver Version"] == "580.65.06" and parsed["CUDA Version"] == "13.0"
    assert parsed["GPU 00000000:07:00.0"]["Clocks"]["Graphics"] == "345 MHz"
    assert "Timestamp" not in parsed
    assert "Processes" not in parsed["GPU 00000000:0F:00.0"]  # other users' jobs stay out


def test_gpu_details_only_on_local_rank_zero(clean_env, tmp_path):
    """Parsing of nvidia-smi's output, fed by a script (this machine has no GPU)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "q.txt").write_text(NVIDIA_SMI_Q)
    script = bin_dir / "nvidia-smi"
    row = "0, NVIDIA H100 80GB HBM3, GPU-1, 00000000:07:00.0, 580.65.06, 96.00, 81559, 700.00, 1980, 2619, "
    row += "Enabled, Default, Enabled, 5, 16"
    script.write_text(
        f'#!/bin/sh\ncase "$1" in -q) cat {tmp_path / "q.txt"} ;; topo) echo "GPU0 X" ;; *) echo "{row}" ;; esac\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    clean_env.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    clean_env.setenv("DLBENCH_LOCAL_RANK", "0")
    info = provenance.gpu_info()
    assert info["gpus"] == ["NVIDIA H100 80GB HBM3, 580.65.06, 81559 MiB"]
    assert info["devices"][0]["pci.bus_id"] == "00000000:07:00.0"
    assert info["cuda_driver_version"] == "13.0" and info["topology"] == "GPU0 X"
    clean_env.setenv("DLBENCH_LOCAL_RANK", "1")
    info = provenance.gpu_info()
    assert "nvidia_smi_q" not in info and "topology" not in info and info["gpus"]


def test_git_state_inside_an_image_comes_from_its_build_record(clean_env, tmp_path):
    code = tmp_path / "opt" / "dlbench"
    code.mkdir(parents=True)
    (code / "BUILD_INFO.json").write_text(json.dumps({"git_commit": "c0ffee", "git_dirty": True}))
    clean_env.setattr(provenance, "REPO_ROOT", code)
    assert provenance.git_state() == {"commit": "c0ffee", "dirty": True, "source": "image build"}


PYTORCH = framework_python("pytorch")


@pytest.mark.skipif(not PYTORCH.exists(), reason="the pytorch environment is not built")
def test_the_step_log_header_carries_it_from_a_real_run(tmp_path, image):
    """A real launch in the pytorch venv (stdlib-only provenance there), posing as a container job."""
    lock = tmp_path / "images.lock"
    lock.write_text((REPO / "containers" / "images.lock").read_text())
    containers.set_pinned_sha256("pytorch", hashlib.sha256(image.read_bytes()).hexdigest(), lock)
    record = tmp_path / "record.json"
    containers.verify_image("pytorch", image, lock, record)
    run_dir = tmp_path / "run"
    args = "--framework pytorch --model alexnet --precision fp32 --data synthetic --batch 2 --scale 1x1"
    args += " --strategy single --repeat 1 --preset caict2020 --warmup-steps 1 --measured-steps 1"
    args += f" --statistic mean --image-size 64 --threads 1 --run-dir {run_dir} --env-lock {REPO}/envs/pytorch.txt"
    env = {
        "PYTHONPATH": str(REPO),
        "PATH": "/usr/bin:/bin",
        **SHARED_CORES_ENV,
        "APPTAINER_CONTAINER": str(image),
        "DLBENCH_IMAGE_RECORD": str(record),
        "DLBENCH_CONFIG_SHA256": "cd" * 32,
    }
    head_before = git("rev-parse", "HEAD")
    result = subprocess.run(
        [str(PYTORCH), "-m", "dlbench.launch", *args.split()],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    header = read_steplog(run_dir / "rank0.steps.jsonl").header
    p = header["provenance"]
    assert p["container"]["sha256"] == hashlib.sha256(image.read_bytes()).hexdigest()
    assert p["config_sha256"] == "cd" * 32
    assert p["cpu_count"] == os.cpu_count()
    assert p["git"]["commit"] in {head_before, git("rev-parse", "HEAD")}  # someone may commit meanwhile
    assert p["python"]["executable"] == str(PYTORCH)
    assert header["framework"]["version"].startswith("2.")


def test_git_commit_and_dirty_flag_of_a_checkout(clean_env, tmp_path):
    def run(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    run("init", "-q")
    (tmp_path / "a.txt").write_text("one\n")
    run("add", "a.txt")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    clean_env.setattr(provenance, "REPO_ROOT", tmp_path)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    assert provenance.git_state() == {"commit": head, "dirty": False, "source": "checkout"}
    (tmp_path / "untracked.txt").write_text("not part of the code\n")
    assert provenance.git_state()["dirty"] is False
    (tmp_path / "a.txt").write_text("two\n")
    assert provenance.git_state() == {"commit": head, "dirty": True, "source": "checkout"}
