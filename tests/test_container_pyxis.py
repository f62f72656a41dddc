"""run.container: pyxis for real: srun → pyxis → enroot starts every rank from the pinned
squashfs on the local Slurm cluster, which loads pyxis whenever it is installed
(tools/slurm-local/up.sh). enroot and pyxis are in no package registry and dlbench does not
build them: they run here where installed by hand from their own guides. Where they are not (a
fresh CI machine) those tests skip, naming what is missing. What runs everywhere: the cluster's
pyxis set-up with stand-ins, and the mounts inside a podman rank (tools/test.sh installs podman)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dlbench.images import podman as images
from dlbench.images import squashfs
from dlbench.launch import LaunchRequest
from dlbench.launch.container import IMAGE_PYTHON
from dlbench.launch.launchers import LocalLauncher, SrunLauncher
from dlbench.protocol import RunProtocol
from dlbench.steplog import read_steplog
from tests.conftest import REPO, make_coords
from tests.test_container_podman import tampered_squashfs
from tests.test_slurm import cluster_answers

PYXIS_PLUGIN = Path(os.environ.get("DLBENCH_PYXIS_PLUGIN", "/usr/local/lib/slurm/spank_pyxis.so"))
STORE = images.images_dir()
INSTALL = (
    "in no package registry; install by their own guides: https://github.com/NVIDIA/enroot/blob/master/doc/"
    "installation.md, https://github.com/NVIDIA/pyxis#installation"
)


def pyxis_unavailable() -> str | None:
    """Why the real tests cannot run here (None: they can)."""
    missing = [name for name, ok in (("enroot", shutil.which("enroot")), ("pyxis", PYXIS_PLUGIN.is_file())) if not ok]
    if missing:
        return f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed ({INSTALL})"
    if not cluster_answers():
        return "no Slurm cluster answers (tools/slurm-local/up.sh)"
    said = subprocess.run(["srun", "--help"], capture_output=True, text=True, timeout=30).stdout
    return None if "--container-image" in said else "pyxis is installed but not loaded (tools/slurm-local/up.sh)"


UNAVAILABLE = pyxis_unavailable()
needs_pyxis = pytest.mark.skipif(UNAVAILABLE is not None, reason=str(UNAVAILABLE))


def request(run_dir: Path, framework: str = "mxnet", **coords) -> LaunchRequest:
    coords = make_coords(**{"framework": framework, "batch": "2", **coords})
    return LaunchRequest(
        coords, RunProtocol("mlperf", 1, 2, "mean"), str(run_dir), image_size=32, threads=2, progress_every=0,
        time_limit=240, env_lock=f"/opt/dlbench/envs/{framework}.txt", container="pyxis", launcher="srun",
        images=str(STORE),
    )  # fmt: skip


def salloc(nodes: int, tasks_per_node: int, cmd: list[str], cwd: Path, timeout: int = 420):
    cpus = max(1, 2 // tasks_per_node)  # the launcher's srun asks threads (2) ÷ tasks per node
    alloc = ["salloc", f"-N{nodes}", f"--ntasks-per-node={tasks_per_node}", f"--cpus-per-task={cpus}"]
    alloc += ["--mem=3000", "-t", "8"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([*alloc, *cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------ everywhere


def configure_pyxis(tmp_path: Path, plugin: Path, enroot_dir: Path, options: str = "") -> dict:
    """tools/slurm-local/pyxis.sh in a scratch ETC and STATE: what up.sh gets from it."""
    script = (
        'log() { :; }; die() { echo "$*" >&2; exit 1; }\n'
        f"source {REPO / 'tools/slurm-local/pyxis.sh'}\n"
        'pyxis_configure; echo "$PYXIS_STATUS"; echo "$PYXIS_CHANGED"; node_path n2\n'
    )
    env = dict(os.environ, STATE=str(tmp_path / "state"), ETC=str(tmp_path / "etc"), NNODES="2")
    env |= {"DLBENCH_PYXIS_PLUGIN": str(plugin), "PATH": f"{enroot_dir}:{os.environ['PATH']}"}
    env["DLBENCH_SLURM_PYXIS_OPTIONS"] = options
    (tmp_path / "state/etc").mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=True)
    status, changed, path = done.stdout.splitlines()
    return {"status": status, "changed": changed, "path": path}


def test_the_local_cluster_loads_pyxis_when_installed_with_each_nodes_own_enroot_paths(tmp_path):
    """Stand-ins for the plug-in and enroot: the plugstack line, and per node a wrapper that
    every enroot call pyxis makes goes through (slurmd's PATH), whatever the step's environment."""
    plugin, bin_dir = tmp_path / "spank_pyxis.so", tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "enroot").write_text('#!/bin/sh\n[ "$1" = version ] && echo 4.1.2 || echo "$ENROOT_DATA_PATH"\n')
    (bin_dir / "enroot").chmod(0o755)
    absent = configure_pyxis(tmp_path, plugin, bin_dir)
    assert absent["status"].startswith("pyxis: not installed") and not (tmp_path / "etc/plugstack.conf.d").exists()
    plugin.write_bytes(b"\0pyxis: version v0.24.0\0")
    loaded = configure_pyxis(tmp_path, plugin, bin_dir)
    conf = tmp_path / "etc/plugstack.conf.d/dlbench-pyxis.conf"
    assert f"required {plugin} runtime_path={tmp_path}/state/pyxis" in conf.read_text()
    assert loaded["status"].startswith("pyxis 0.24.0 loaded") and "enroot 4.1.2" in loaded["status"]
    assert loaded["changed"] == "1" and loaded["path"].startswith(f"{tmp_path}/state/enroot/n2/bin:")
    wrapper = tmp_path / "state/enroot/n2/bin/enroot"
    data = subprocess.run([wrapper, "create"], env={"PATH": str(bin_dir)}, capture_output=True, text=True).stdout
    assert data.strip() == f"{tmp_path}/state/enroot/n2/data"
    assert configure_pyxis(tmp_path, plugin, bin_dir)["changed"] == "0"  # unchanged: no restart
    assert configure_pyxis(tmp_path, plugin, bin_dir, "use_squashfuse=1")["changed"] == "1"
    assert conf.read_text().splitlines()[-1].endswith(f"runtime_path={tmp_path}/state/pyxis use_squashfuse=1")
    plugin.unlink()
    assert configure_pyxis(tmp_path, plugin, bin_dir)["changed"] == "1" and not conf.exists()


# What a rank sees: every mount from /proc/self/mountinfo (point, mode, file system type) and
# which writes succeed.
PROBE = """
import json, os, sys
mounts = []
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    fstype = fields[fields.index("-") + 1]
    mounts.append((fields[4], "rw" if "rw" in fields[5].split(",") else "ro", fstype))
writable = {}
for place in sys.argv[1:]:
    try:
        with open(os.path.join(place, ".dlbench-probe"), "w"):
            pass
        os.unlink(os.path.join(place, ".dlbench-probe"))
        writable[place] = True
    except OSError:
        writable[place] = False
seen = {"mounts": mounts, "writable": writable, "python": sys.executable, "home": os.environ["HOME"]}
print("PROBE " + json.dumps(seen))
"""
# Mounts not backed by a host directory: the container's own /proc, /sys, /dev and tmpfs.
VIRTUAL = {"proc", "sysfs", "devtmpfs", "devpts", "tmpfs", "cgroup", "cgroup2", "mqueue", "overlay", "shm"}


def probe_command(cmd: list[str], places: list[Path]) -> list[str]:
    """The rank's own command line with the probe in place of dlbench's launcher."""
    at = cmd.index(IMAGE_PYTHON)
    return [*cmd[: at + 1], "-c", PROBE, *map(str, places)]


def probe_result(output: str) -> dict:
    found = re.search(r"^PROBE (.*)$", output, re.M)
    assert found, output[-3000:]
    return json.loads(found.group(1))


def assert_only_results_writable(seen: dict, results: Path, data: Path, allowed: set[str] = frozenset()) -> None:
    host_rw = {point for point, mode, fstype in seen["mounts"] if mode == "rw" and fstype not in VIRTUAL}
    assert host_rw - allowed == {str(results)}, seen["mounts"]
    assert (str(data), "ro") in {(point, mode) for point, mode, _ in seen["mounts"]}
    assert seen["writable"] == {str(results): True, str(data): False, "/": False, "/opt/dlbench": False}
    assert (seen["python"], seen["home"]) == (IMAGE_PYTHON, "/tmp")


def probe_places(tmp_path: Path) -> tuple[Path, Path, list[Path]]:
    results, data = tmp_path / "results", tmp_path / "datasets"
    (results / "runs/x").mkdir(parents=True)
    data.mkdir()
    return results, data, [results, data, Path("/"), Path("/opt/dlbench")]


@pytest.mark.skipif(shutil.which("podman") is None, reason="podman not installed (bash tools/containers.sh)")
def test_inside_a_podman_rank_only_results_is_writable(tmp_path, monkeypatch):
    """The mounts the code names, seen from inside a rank: results read-write, data read-only,
    the image read-only (≈ 2 s, the MXNet image the podman tests build)."""
    monkeypatch.chdir(tmp_path)
    images.ensure("mxnet", STORE)
    results, data, places = probe_places(tmp_path)
    req = dataclasses.replace(request(results / "runs/x"), container="podman", launcher="local", data_dir=str(data))
    done = subprocess.run(probe_command(LocalLauncher(req).command(), places), capture_output=True, text=True)
    # podman's own per-container files (hosts, resolv.conf, hostname, .containerenv) are
    # written by podman into its run directory, not a user's path.
    podman_files = {"/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/run/.containerenv"}
    assert_only_results_writable(probe_result(done.stdout + done.stderr), results, data, podman_files)


# ------------------------------------------------------------------ for real, where installed


@pytest.fixture(scope="module")
def mxnet_squashfs() -> dict:
    return squashfs.ensure("mxnet", STORE)


def check_headers(run_dir: Path, ranks: int, lock: dict) -> list[dict]:
    headers = []
    for rank in range(ranks):
        log = read_steplog(run_dir / f"rank{rank}.steps.jsonl")
        assert log.status == "ok", (run_dir, rank, log.footer)
        prov = log.header["provenance"]
        pinned = ("pyxis", f"sha256:{lock['squashfs_sha256']}")
        assert (prov["container"]["runtime"], prov["container"]["digest"]) == pinned
        assert prov["python"]["executable"] == IMAGE_PYTHON and "Debian" in prov["os_release"]
        headers.append(log.header)
    return headers


@pytest.mark.slurm
@needs_pyxis
def test_two_nodes_two_ranks_each_start_in_the_squashfs(tmp_path, mxnet_squashfs):
    """MXNet dist_sync, 2 nodes × 2 ranks, each rank in its own node's container (≈ 40 s)."""
    run_dir = tmp_path / "results/runs/mxnet"
    req = request(run_dir, scale="2x2", strategy="dist_sync")
    out = salloc(2, 2, [sys.executable, "-m", "dlbench.launch", *req.to_argv()], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    record = json.loads((run_dir / "launch.json").read_text())
    assert record["rank_exit_codes"] == [0, 0, 0, 0], out.stderr[-3000:]
    assert {h["node"] for h in check_headers(run_dir, 4, mxnet_squashfs)} == {"n1", "n2"}


@pytest.mark.slurm
@needs_pyxis
def test_inside_a_pyxis_rank_only_results_is_writable(tmp_path, mxnet_squashfs, monkeypatch):
    """The srun step the launcher builds, the probe in place of dlbench (≈ 10 s): the image and
    every other host path read-only; /tmp, /run and /dev/shm are the container's own tmpfs."""
    monkeypatch.chdir(tmp_path)
    results, data, places = probe_places(tmp_path)
    req = dataclasses.replace(request(results / "runs/x"), data_dir=str(data))
    cmd = probe_command(SrunLauncher(req).command(), places)
    monkeypatch.setenv("DLBENCH_EXIT_DIR", str(tmp_path))
    done = salloc(1, 1, cmd, tmp_path, timeout=120)
    assert_only_results_writable(probe_result(done.stdout), results, data)


@pytest.mark.slurm
@needs_pyxis
def test_a_changed_squashfs_is_refused_before_any_srun_step(tmp_path, mxnet_squashfs):
    """One byte changed in a copy: the launcher refuses it inside the allocation, and Slurm
    records no step of the job (sacct), so no container and no rank started."""
    store = tampered_squashfs(tmp_path, mxnet_squashfs)
    run_dir = tmp_path / "results/runs/x"
    req = dataclasses.replace(request(run_dir, scale="1x2", strategy="dist_sync"), images=str(store))
    out = salloc(1, 2, [sys.executable, "-m", "dlbench.launch", *req.to_argv()], tmp_path)
    job = re.search(r"Granted job allocation (\d+)", out.stderr).group(1)
    reason = json.loads((run_dir / "launch.json").read_text())["verdict"]["reason"]
    assert f"sha256:{mxnet_squashfs['squashfs_sha256']}" in reason and "refusing" in reason, reason
    assert not list(run_dir.glob("rank*")) and not (run_dir / "slurm.json").exists()
    steps = subprocess.run(["sacct", "-n", "-P", "-j", job, "-o", "JobID"], capture_output=True, text=True).stdout
    assert f"{job}.0" not in steps.split(), steps


PIPELINE_GRID = {
    "grid": {
        "frameworks": ["pytorch"],
        "models": ["resnet50"],
        "batch_per_device": [2],
        "scales": ["2x2"],
        "strategies": {"pytorch": ["ddp"]},
        "exclude": [],
    },
    "protocol": {"preset": "mlperf", "warmup_steps": 1, "measured_steps": 3, "repeats": 1},
    "run": {"image_size": 32, "threads": 2, "progress_every": 0, "launcher": "srun", "container": "pyxis"}
    | {"mem_mb": 6000, "time_limit_s": 600},
    "prescreen": {"sizes": [65536, 1048576], "iterations": 5},
}


@pytest.fixture(scope="module")
def pytorch_pipeline(tmp_path_factory) -> dict:
    """PyTorch DDP on 2 nodes × 2 ranks through pyxis, the communication prescreen first, to the
    report; then the audit (minutes: the PyTorch image is 6 GB, its squashfs ≈ 2 GB)."""
    lock = squashfs.ensure("pytorch", STORE)
    workdir = tmp_path_factory.mktemp("pyxis")
    (workdir / "config").mkdir()
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(PIPELINE_GRID))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir)]
    cmd += ["--profile", str(REPO / "profiles/slurm-local")]
    done = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=1500)
    audit = subprocess.run([*cmd, "-f", "audit"], cwd=workdir, capture_output=True, text=True, timeout=600)
    return {"workdir": workdir, "lock": lock, "done": done, "audit": audit}


@pytest.mark.slow
@pytest.mark.slurm
@needs_pyxis
def test_pytorch_ddp_and_the_prescreen_run_through_pyxis_to_the_report_and_the_audit(pytorch_pipeline):
    workdir, done = pytorch_pipeline["workdir"], pytorch_pipeline["done"]
    assert done.returncode == 0, done.stderr[-4000:]
    run_dir = workdir / "results/runs/pytorch/resnet50/fp32/synthetic/bs2/2x2/ddp/rep1"
    assert {h["node"] for h in check_headers(run_dir, 4, pytorch_pipeline["lock"])} == {"n1", "n2"}
    prescreen = workdir / "results/prescreen/2x2"
    srun = json.loads((prescreen / "slurm.json").read_text())["srun"]
    assert any(option.startswith("--container-image=") for option in srun), srun
    assert json.loads((prescreen / "launch.json").read_text())["rank_exit_codes"] == [0, 0, 0, 0]
    software = json.loads((workdir / "results/tables/environment.json").read_text())["software"]
    assert software[0]["container"].startswith("pyxis "), software
    assert (workdir / "results/report/index.html").exists()
    assert pytorch_pipeline["audit"].returncode == 0, pytorch_pipeline["audit"].stderr[-3000:]
