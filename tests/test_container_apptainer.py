"""run.container: apptainer for real: every rank runs in the .sif built from the pinned podman
image's OCI archive, under srun on the local Slurm cluster (tools/slurm-local/up.sh). dlbench
does not build Apptainer: where `apptainer` is not on PATH (a fresh CI machine) the real tests
skip, naming its install guide. What runs everywhere: the rank's environment crossing
`--cleanenv` (a stand-in `apptainer` that prints what it was given). The lock, the refusal of
a changed .sif and the argv as strings are tests/test_container_runtime.py's."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dlbench.images import podman as images
from dlbench.images import sif as sif_images
from dlbench.launch import LaunchRequest
from dlbench.launch.container import IMAGE_PYTHON, Apptainer
from dlbench.launch.launchers import LocalLauncher, SrunLauncher
from dlbench.steplog import read_steplog
from tests.conftest import REPO
from tests.test_container_pyxis import (
    PROBE,
    VIRTUAL,
    probe_command,
    probe_places,
    probe_result,
    salloc,
)
from tests.test_container_pyxis import request as pyxis_request
from tests.test_slurm import cluster_answers

STORE = images.images_dir()
INSTALL_GUIDE = "https://apptainer.org/docs/admin/main/installation.html"
NOT_INSTALLED = f"apptainer is not installed (install it by its own guide: {INSTALL_GUIDE})"
needs_apptainer = pytest.mark.skipif(shutil.which("apptainer") is None, reason=NOT_INSTALLED)
needs_cluster = pytest.mark.skipif(not cluster_answers(), reason="no Slurm cluster answers (tools/slurm-local/up.sh)")
# Environment the probe reports besides the mounts: what the image sets and what must not leak.
ENV_PROBE = PROBE.replace(
    '"home": os.environ["HOME"]}',
    '"home": os.environ["HOME"], "env": dict(os.environ), "home_entries": os.listdir(os.environ["HOME"]), '
    '"tmp_entries": os.listdir("/tmp")}',
)


def request(run_dir: Path, framework: str = "mxnet", **coords) -> LaunchRequest:
    return dataclasses.replace(pyxis_request(run_dir, framework, **coords), container="apptainer")


# ------------------------------------------------------------------ everywhere


def test_each_ranks_own_placement_crosses_cleanenv_and_nothing_else_does(tmp_path, monkeypatch):
    """--cleanenv drops the host's environment; srun sets SLURM_PROCID & co. per task, after the
    command line is built, so they cross as APPTAINERENV_<name>, read when the rank starts. A
    stand-in `apptainer` shows what the real one would be given."""
    monkeypatch.chdir(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apptainer").write_text('#!/bin/sh\nenv | grep ^APPTAINERENV_ | sort\necho "ARGS $*"\n')
    (bin_dir / "apptainer").chmod(0o755)
    (tmp_path / "images").mkdir()
    (tmp_path / "images/mxnet.lock.json").write_text(json.dumps({"config_digest": "sha256:" + "cd" * 32}))
    (tmp_path / "images/mxnet.sif.lock.json").write_text(json.dumps({"sif_sha256": "ab" * 32}))
    req = dataclasses.replace(request(tmp_path / "results/runs/x"), images=str(tmp_path / "images"))
    cmd = Apptainer(req).command(["true"])
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_PROCID": "3", "SLURM_NODEID": "1", "DLBENCH_SRUN": "1"}
    env |= {"CUDA_VISIBLE_DEVICES": "1", "PYTHONPATH": "/host/code", "LD_LIBRARY_PATH": "/host/lib"}
    env |= {"DLBENCH_ODD": "two words; $(echo no)", "SLURMD_NODENAME": "n2"}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    passed = dict(line.removeprefix("APPTAINERENV_").split("=", 1) for line in out if line.startswith("APPTAINERENV_"))
    assert passed == {
        "CUDA_VISIBLE_DEVICES": "1",
        "DLBENCH_ODD": "two words; $(echo no)",
        "DLBENCH_SRUN": "1",
        "SLURMD_NODENAME": "n2",
        "SLURM_NODEID": "1",
        "SLURM_PROCID": "3",
    }
    args = out[-1].split()
    assert args[1:3] == ["exec", "--cleanenv"] and "--no-eval" in args
    # The site's bind paths (host files bound read-write) are off; name resolution is read-only.
    assert "--no-mount bind-paths" in out[-1] and "--bind /etc/hosts:/etc/hosts:ro" in out[-1]


# ------------------------------------------------------------------ for real, where installed


def build_sif(store: Path, framework: str) -> dict:
    """The framework's podman image and its .sif from the OCI archive, each made where not
    current (dlbench.images.sif, as the workflow's rule apptainer_sif): the .sif's lock."""
    return sif_images.ensure(framework, store)


@pytest.fixture(scope="module")
def mxnet_sif() -> dict:
    return build_sif(STORE, "mxnet")


def assert_rank_sees_only_what_the_code_names(seen: dict, results: Path, data: Path, home: str) -> None:
    """results the only writable host path, data read-only, no host /tmp or home, the image's
    environment (its PATH and PYTHONPATH, no host LD_LIBRARY_PATH or venv)."""
    mounts = seen["mounts"]
    host_rw = {point for point, mode, fstype in mounts if mode == "rw" and fstype not in VIRTUAL}
    assert host_rw == {str(results)}, mounts
    assert (str(data), "ro") in {(point, mode) for point, mode, _ in mounts}
    fstype = {point: fstype for point, _, fstype in mounts}
    assert fstype["/tmp"] == fstype[home] == "tmpfs", mounts
    # The container's own /tmp holds only the way down to the bound results (pytest's are in /tmp).
    assert seen["tmp_entries"] == ([results.parts[2]] if results.parts[1] == "tmp" else []), seen["tmp_entries"]
    assert seen["writable"] == {str(results): True, str(data): False, "/": False, "/opt/dlbench": False}
    env = seen["env"]
    assert seen["python"] == IMAGE_PYTHON and env["PATH"].startswith("/opt/venv/bin:")
    assert env["PYTHONPATH"] == "/opt/dlbench" and env["DLBENCH_IMAGE_FRAMEWORK"] == "mxnet"
    assert "VIRTUAL_ENV" not in env and "/host" not in env.get("LD_LIBRARY_PATH", "")
    assert seen["home"] == home and seen["home_entries"] == []


@needs_apptainer
def test_inside_an_apptainer_rank_only_results_is_writable_and_the_environment_is_the_images(
    tmp_path, mxnet_sif, monkeypatch
):
    """The local launcher's rank command, the probe in place of dlbench (≈ 2 s), from a host
    environment that would mislead it: a venv, a PYTHONPATH, an LD_LIBRARY_PATH."""
    monkeypatch.chdir(tmp_path)
    results, data, places = probe_places(tmp_path)
    req = dataclasses.replace(request(results / "runs/x"), launcher="local", data_dir=str(data))
    cmd = [*probe_command(LocalLauncher(req).command(), places)]
    cmd[cmd.index(IMAGE_PYTHON) + 2] = ENV_PROBE
    env = dict(os.environ, VIRTUAL_ENV="/host/venv", PYTHONPATH="/host/code", LD_LIBRARY_PATH="/host/lib")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    seen = probe_result(done.stdout + done.stderr)
    assert_rank_sees_only_what_the_code_names(seen, results, data, os.environ["HOME"])


@pytest.mark.slurm
@needs_apptainer
@needs_cluster
def test_inside_an_srun_apptainer_rank_only_results_is_writable(tmp_path, mxnet_sif, monkeypatch):
    """The same probe through the srun step the launcher builds (≈ 10 s)."""
    monkeypatch.chdir(tmp_path)
    results, data, places = probe_places(tmp_path)
    req = dataclasses.replace(request(results / "runs/x"), data_dir=str(data))
    cmd = probe_command(SrunLauncher(req).command(), places)
    cmd[cmd.index(IMAGE_PYTHON) + 2] = ENV_PROBE
    monkeypatch.setenv("DLBENCH_EXIT_DIR", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", "/host/code")
    done = salloc(1, 1, cmd, tmp_path, timeout=120)
    assert_rank_sees_only_what_the_code_names(probe_result(done.stdout), results, data, os.environ["HOME"])


def rank_headers(run_dir: Path, ranks: int, lock: dict) -> list[dict]:
    """Every rank ended ok and recorded the pinned .sif and the image's Python."""
    logs = [read_steplog(run_dir / f"rank{rank}.steps.jsonl") for rank in range(ranks)]
    assert [log.status for log in logs] == ["ok"] * ranks, [log.footer for log in logs]
    expected = ("apptainer", f"sha256:{lock['sif_sha256']}", IMAGE_PYTHON)
    for prov in (log.header["provenance"] for log in logs):
        assert (prov["container"]["runtime"], prov["container"]["digest"], prov["python"]["executable"]) == expected
    return [log.header for log in logs]


@pytest.mark.slurm
@needs_apptainer
@needs_cluster
@pytest.mark.parametrize(("nodes", "per_node"), [(1, 2), (2, 2)])
def test_mxnet_dist_sync_ranks_start_in_the_sif(tmp_path, mxnet_sif, nodes, per_node):
    """MXNet dist_sync, 1 node × 2 and 2 nodes × 2, one container per rank (≈ 40 s each)."""
    run_dir = tmp_path / "results/runs/mxnet"
    req = request(run_dir, scale=f"{nodes}x{per_node}", strategy="dist_sync")
    out = salloc(nodes, per_node, [sys.executable, "-m", "dlbench.launch", *req.to_argv()], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    ranks = nodes * per_node
    assert json.loads((run_dir / "launch.json").read_text())["rank_exit_codes"] == [0] * ranks, out.stderr[-3000:]
    assert len({h["node"] for h in rank_headers(run_dir, ranks, mxnet_sif)}) == nodes


def tampered_sif(tmp_path: Path, lock: dict) -> Path:
    """A store holding the image's lock and a copy of its .sif with one byte changed."""
    store = tmp_path / "images"
    store.mkdir()
    shutil.copy(STORE / f"{lock['framework']}.lock.json", store)
    shutil.copy(STORE / f"{lock['framework']}.sif.lock.json", store)
    shutil.copy(STORE / lock["sif"], store / lock["sif"])
    with open(store / lock["sif"], "r+b") as image:
        image.seek(-4096, os.SEEK_END)
        byte = image.read(1)
        image.seek(-4096, os.SEEK_END)
        image.write(bytes([byte[0] ^ 0xFF]))
    return store


@pytest.mark.slurm
@needs_apptainer
@needs_cluster
def test_a_changed_sif_is_refused_before_any_srun_step(tmp_path, mxnet_sif):
    """One byte changed in a copy of the real .sif: refused inside the allocation, and Slurm
    records no step of the job (sacct): no container, no rank."""
    store = tampered_sif(tmp_path, mxnet_sif)
    run_dir = tmp_path / "results/runs/x"
    req = dataclasses.replace(request(run_dir, scale="1x2", strategy="dist_sync"), images=str(store))
    out = salloc(1, 2, [sys.executable, "-m", "dlbench.launch", *req.to_argv()], tmp_path)
    job = re.search(r"Granted job allocation (\d+)", out.stderr).group(1)
    reason = json.loads((run_dir / "launch.json").read_text())["verdict"]["reason"]
    assert f"pins sha256:{mxnet_sif['sif_sha256']}" in reason, reason
    assert not list(run_dir.glob("rank*")) and not (run_dir / "slurm.json").exists()
    steps = subprocess.run(["sacct", "-n", "-P", "-j", job, "-o", "JobID"], capture_output=True, text=True).stdout
    assert f"{job}.0" not in steps.split(), steps


@pytest.mark.slow
@pytest.mark.slurm
@needs_apptainer
@needs_cluster
def test_pytorch_ddp_and_its_prescreen_start_in_the_sif_on_two_nodes(tmp_path):
    """The communication prescreen, then DDP training, 2 nodes × 2 ranks, each rank in the
    PyTorch .sif (minutes: the image is 6 GB, its .sif 3.2 GB, ≈ 20 min to make on 2 cores)."""
    lock = build_sif(STORE, "pytorch")
    for task in ("prescreen", "train"):
        run_dir = tmp_path / f"results/runs/{task}"
        req = request(run_dir, framework="pytorch", scale="2x2", strategy="ddp", model="resnet50")
        if task == "prescreen":
            req = dataclasses.replace(req, task="prescreen", sizes="65536,1048576")
        out = salloc(2, 2, [sys.executable, "-m", "dlbench.launch", *req.to_argv()], tmp_path, timeout=900)
        assert out.returncode == 0, out.stderr[-3000:]
        assert json.loads((run_dir / "launch.json").read_text())["rank_exit_codes"] == [0] * 4
    for log in sorted((tmp_path / "results/runs/prescreen").glob("rank*.allreduce.jsonl")):
        container = json.loads(log.read_text().splitlines()[0])["provenance"]["container"]
        assert (container["runtime"], container["digest"]) == ("apptainer", f"sha256:{lock['sif_sha256']}")
    headers = rank_headers(tmp_path / "results/runs/train", 4, lock)
    assert {header["node"] for header in headers} == {"n1", "n2"}


# A grid through Snakemake with Apptainer: MXNet dist_sync on 1 node × 2 and 2 nodes × 2
# ranks; the workflow makes the .sif itself (rule apptainer_sif).
PIPELINE_GRID = {
    "grid": {
        "frameworks": ["mxnet"],
        "models": ["resnet50"],
        "batch_per_device": [2],
        "scales": ["1x2", "2x2"],
        "strategies": {"mxnet": ["dist_sync"]},
        "exclude": [],
    },
    "protocol": {"preset": "mlperf", "warmup_steps": 1, "measured_steps": 3, "repeats": 1},
    "run": {"image_size": 32, "threads": 2, "progress_every": 0, "launcher": "srun", "container": "apptainer"}
    | {"mem_mb": 3000, "time_limit_s": 600},
}


@pytest.fixture(scope="module")
def apptainer_pipeline(tmp_path_factory) -> dict:
    """The grid to the report, then the audit (≈ 3 min once the MXNet image exists). The .sif
    is removed first so that the workflow's own rule makes and pins it."""
    images.ensure("mxnet", STORE)
    for stale in (STORE / "mxnet.sif", STORE / "mxnet.sif.lock.json"):
        stale.unlink(missing_ok=True)
    workdir = tmp_path_factory.mktemp("apptainer")
    (workdir / "grid.yaml").write_text(json.dumps(PIPELINE_GRID))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir)]
    cmd += ["--profile", str(REPO / "profiles/slurm-local"), "--configfile", str(workdir / "grid.yaml")]
    env = {**os.environ, "DLBENCH_IMAGES": str(STORE)}
    done = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=1500)
    audit = subprocess.run([*cmd, "-f", "audit"], cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    lock = json.loads((STORE / "mxnet.sif.lock.json").read_text()) if (STORE / "mxnet.sif.lock.json").exists() else {}
    return {"workdir": workdir, "lock": lock, "done": done, "audit": audit}


@pytest.mark.slow
@pytest.mark.slurm
@needs_apptainer
@needs_cluster
def test_a_grid_runs_through_snakemake_in_the_sif_to_the_report_and_the_audit(apptainer_pipeline):
    workdir, done, lock = apptainer_pipeline["workdir"], apptainer_pipeline["done"], apptainer_pipeline["lock"]
    assert done.returncode == 0, done.stderr[-4000:]
    assert lock["config_digest"] == json.loads((STORE / "mxnet.lock.json").read_text())["config_digest"]
    runs = workdir / "results/runs/mxnet/resnet50/fp32/synthetic/bs2"
    for scale, nodes in (("1x2", 1), ("2x2", 2)):
        headers = rank_headers(runs / scale / "dist_sync/rep1", 2 * nodes, lock)
        assert len({header["node"] for header in headers}) == nodes
    software = json.loads((workdir / "results/tables/environment.json").read_text())["software"]
    assert software[0]["container"].startswith("apptainer "), software
    assert (workdir / "results/report/index.html").exists()
    audit = apptainer_pipeline["audit"]
    assert audit.returncode == 0, audit.stderr[-3000:]
    assert (workdir / "results/audit/verdict.txt").read_text().startswith("PASSED")


# The embedded default grid (config/config.yaml: PyTorch, TensorFlow, MXNet and JAX; ResNet-50
# and llama_small; 1 and 2 ranks) with every rank in its framework's .sif, the local launcher.
# One repeat of each of its 13 cells keeps it to minutes once the .sif files exist.
DEFAULT_GRID_IN_SIFS = ["--config", "run={container: apptainer}", "protocol={repeats: 1}"]
DEFAULT_FRAMEWORKS = ("pytorch", "tensorflow", "mxnet", "jax")


@pytest.fixture(scope="module")
def default_grid_in_sifs(tmp_path_factory) -> dict:
    """The default grid to the report, then the audit. The podman images are made first when
    missing (minutes each); the workflow's rule apptainer_sif makes and pins the .sif files."""
    for framework in DEFAULT_FRAMEWORKS:
        images.ensure(framework, STORE)
    workdir = tmp_path_factory.mktemp("apptainer-default")
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir)]
    cmd += ["--profile", str(REPO / "profiles/local"), *DEFAULT_GRID_IN_SIFS]
    env = {**os.environ, "DLBENCH_IMAGES": str(STORE)}
    done = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=7200)
    audit = subprocess.run([*cmd, "-f", "audit"], cwd=workdir, env=env, capture_output=True, text=True, timeout=1800)
    return {"workdir": workdir, "done": done, "audit": audit}


@pytest.mark.slow
@needs_apptainer
def test_the_default_grid_runs_in_the_sifs_to_the_report_and_the_audit(default_grid_in_sifs):
    workdir, done = default_grid_in_sifs["workdir"], default_grid_in_sifs["done"]
    assert done.returncode == 0, done.stderr[-4000:]
    locks = {fw: json.loads((STORE / f"{fw}.sif.lock.json").read_text()) for fw in DEFAULT_FRAMEWORKS}
    runs = pd.read_csv(workdir / "results/tables/runs.csv")
    assert set(runs["framework"]) == set(DEFAULT_FRAMEWORKS) and (runs["status"] == "ok").all(), runs
    assert len(runs) == 13, runs  # the default's cells, one repeat each
    for run in (workdir / "results/runs").glob("*/*/*/*/*/*/*/rep1"):
        framework = run.relative_to(workdir / "results/runs").parts[0]
        ranks = len(list(run.glob("rank*.steps.jsonl")))
        rank_headers(run, ranks, locks[framework])
    software = json.loads((workdir / "results/tables/environment.json").read_text())["software"]
    assert {entry["container"].split()[0] for entry in software} == {"apptainer"}, software
    assert (workdir / "results/report/index.html").exists()
    audit = default_grid_in_sifs["audit"]
    assert audit.returncode == 0, audit.stderr[-3000:]
    assert (workdir / "results/audit/verdict.txt").read_text().startswith("PASSED")
