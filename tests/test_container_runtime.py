"""run.container without a container runtime: the command lines each runtime builds (podman,
and Apptainer), the refusal of an image that is not the pinned one
as a marked cell, the header's image fields, the environment table and the audit. Nothing
here needs podman; tests/test_container_podman.py runs the same paths for real."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from snakemake.settings.types import DeploymentMethod, RerunTrigger

from dlbench import provenance
from dlbench.analysis import aggregate, audit, environment
from dlbench.launch import LaunchRequest
from dlbench.launch.container import IMAGE_PYTHON, PODMAN_CONF, Apptainer, ImageMismatch, Pyxis, runtime_for
from dlbench.launch.launchers import LocalLauncher, SrunLauncher, wait_for_ranks
from dlbench.launch.run import run_as_launcher
from dlbench.planning.config import schema_problem
from dlbench.planning.deployment import Deployment, DeploymentError
from dlbench.planning.schema import fill_defaults
from dlbench.protocol import RunProtocol
from tests.conftest import REPO, make_coords

DIGEST = "sha256:" + "ab" * 32


def write_lock(images: Path, framework: str = "mxnet", **fields) -> dict:
    lock = {
        "framework": framework,
        "image": f"localhost/dlbench/{framework}:0123456789ab",
        "config_digest": DIGEST,
        "env_lock": f"envs/{framework}.txt",
        "env_lock_sha256": images_sha(framework),
        "archive": f"{framework}.oci.tar",
        **fields,
    }
    images.mkdir(parents=True, exist_ok=True)
    (images / f"{framework}.lock.json").write_text(json.dumps(lock))
    return lock


def images_sha(framework: str) -> str:
    return provenance.sha256_file(REPO / "envs" / f"{framework}.txt")


def request(images: Path, container: str = "podman", **options) -> LaunchRequest:
    coords = options.pop("coords", make_coords(framework="mxnet"))
    run_dir = options.pop("run_dir", "results/runs/x/rep1")
    protocol = RunProtocol("mlperf", 1, 2, "mean")
    return LaunchRequest(coords, protocol, run_dir, container=container, images=str(images), **options)


def test_a_bad_runtime_is_one_message_naming_the_key():
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["run"]["container"] = "docker"
    assert schema_problem(config) == "run.container: 'docker' is not one of ['none', 'podman', 'apptainer', 'pyxis']"
    with pytest.raises(SystemExit):
        LaunchRequest.from_argv([*request(Path("/i")).to_argv(), "--container", "docker"])


def test_none_keeps_the_venv_path(tmp_path):
    plain = LocalLauncher(request(Path(""), container="none"))
    assert plain.command()[:3] == [sys.executable, "-m", "dlbench.launch"]
    assert plain.runtime.verify() == {}


def test_podman_runs_one_rank_by_digest_read_only_without_network(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_lock(tmp_path / "images")
    cmd = LocalLauncher(request(tmp_path / "images")).command()
    store = tmp_path / "images" / "podman"
    assert cmd[:6] == ["env", f"CONTAINERS_CONF={PODMAN_CONF}", "podman", "--root", f"{store}/root", "--runroot"]
    assert cmd[7:11] == ["run", "--rm", "--read-only", "--network=none"]
    results = str(tmp_path / "results")
    assert f"{results}:{results}:rw" in cmd and cmd[cmd.index("-w") + 1] == str(tmp_path)
    assert "DLBENCH_*" in cmd and "SLURM*" in cmd and f"DLBENCH_IMAGE_DIGEST={DIGEST}" in cmd
    image = cmd.index(DIGEST.removeprefix("sha256:"))
    assert cmd[image + 1 : image + 4] == [IMAGE_PYTHON, "-m", "dlbench.launch"]
    assert LaunchRequest.from_argv(cmd[image + 4 :]) == request(tmp_path / "images")
    assert "--device" not in cmd  # CPU


def test_a_rendezvous_gets_the_host_network_and_data_outside_results_is_read_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_lock(tmp_path / "images", "mxnet-cuda")  # a CUDA run's image: envs/mxnet-cuda.txt
    data = tmp_path / "datasets" / "mxnet"
    data.mkdir(parents=True)
    coords = make_coords(framework="mxnet", scale="1x2", strategy="dist_sync", data="real")
    cmd = LocalLauncher(request(tmp_path / "images", coords=coords, data_dir=str(data), device="cuda")).command()
    assert "--network=host" in cmd and f"{data}:{data}:ro" in cmd
    assert cmd[cmd.index("--device") + 1] == "nvidia.com/gpu=all"


def test_srun_starts_one_container_per_rank(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLURM_STEP_ID", raising=False)
    write_lock(tmp_path / "images")
    coords = make_coords(framework="mxnet", scale="2x2", strategy="dist_sync")
    cmd = SrunLauncher(request(tmp_path / "images", coords=coords, launcher="srun")).command()
    assert cmd[0] == "srun" and "--nodes=2" in cmd and "--ntasks-per-node=2" in cmd
    inner = cmd[cmd.index("dlbench-rank") + 1 :]
    assert inner[2:5] == ["podman", "--root", str(tmp_path / "images" / "podman" / "root")]
    image = inner.index(DIGEST.removeprefix("sha256:"))
    assert "--network=host" in inner and inner[image + 1] == IMAGE_PYTHON


def test_apptainer_commands_as_strings(tmp_path, monkeypatch):
    """The command lines (tests/test_container_apptainer.py runs them where Apptainer is installed)."""
    monkeypatch.chdir(tmp_path)
    images_dir = tmp_path / "images"
    write_lock(images_dir)
    coords = make_coords(framework="mxnet", scale="2x2", strategy="dist_sync")
    write_lock(images_dir, "mxnet-cuda")
    write_sif_lock(images_dir, "mxnet-cuda")
    launcher = SrunLauncher(request(images_dir, "apptainer", coords=coords, launcher="srun", device="cuda"))
    inner = launcher.command()[launcher.command().index("dlbench-rank") + 1 :]
    inner = inner[inner.index("apptainer") :]  # after the shell that hands the placement over
    assert inner[:4] == ["apptainer", "exec", "--cleanenv", "--no-eval"] and "--contain" in inner
    assert inner[inner.index("--pwd") + 1] == str(tmp_path)
    sif = str(images_dir / "mxnet-cuda.sif")  # a CUDA run's image
    assert "--nv" in inner and inner.index("--nv") < inner.index(sif)
    assert inner[inner.index(sif) + 1] == IMAGE_PYTHON


def write_sif_lock(images: Path, framework: str = "mxnet", content: bytes = b"SIF stand-in\n") -> dict:
    """A stand-in .sif and its lock (tests/test_container_apptainer.py makes and checks the real one)."""
    (images / f"{framework}.sif").write_bytes(content)
    lock = {"sif": f"{framework}.sif", "sif_sha256": hashlib.sha256(content).hexdigest()}
    lock["config_digest"] = json.loads((images / f"{framework}.lock.json").read_text())["config_digest"]
    (images / f"{framework}.sif.lock.json").write_text(json.dumps(lock))
    return lock


def test_apptainer_verifies_the_sif_and_the_image_it_was_made_from(tmp_path):
    images_dir = tmp_path / "images"
    write_lock(images_dir)
    with pytest.raises(ImageMismatch, match="no apptainer image lock at .*mxnet.sif.lock.json.*dlbench.images.sif"):
        runtime_for(request(images_dir, "apptainer")).verify()
    digest = write_sif_lock(images_dir)["sif_sha256"]
    assert Apptainer(request(images_dir, "apptainer")).verify()["digest"] == f"sha256:{digest}"
    (images_dir / "mxnet.sif").write_bytes(b"another image\n")
    with pytest.raises(ImageMismatch) as error:
        Apptainer(request(images_dir, "apptainer")).verify()
    assert digest in str(error.value) and str(images_dir / "mxnet.sif") in str(error.value)
    write_sif_lock(images_dir)
    write_lock(images_dir, config_digest="sha256:" + "cd" * 32)  # the podman image was rebuilt since
    with pytest.raises(ImageMismatch, match="was made from sha256:abab.*pins sha256:cdcd"):
        Apptainer(request(images_dir, "apptainer")).verify()


def write_squashfs_lock(images: Path, framework: str = "mxnet", content: bytes = b"squashfs stand-in\n") -> dict:
    """A stand-in file and its lock (tests/test_container_podman.py makes and checks the real one)."""
    (images / f"{framework}.sqsh").write_bytes(content)
    lock = {"squashfs": f"{framework}.sqsh", "squashfs_sha256": hashlib.sha256(content).hexdigest()}
    lock["config_digest"] = json.loads((images / f"{framework}.lock.json").read_text())["config_digest"]
    (images / f"{framework}.squashfs.lock.json").write_text(json.dumps(lock))
    return lock


def test_pyxis_starts_every_rank_in_the_squashfs_through_srun_options(tmp_path, monkeypatch):
    """The srun line, as strings (tests/test_container_pyxis.py runs it where pyxis is installed)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLURM_STEP_ID", raising=False)
    images_dir = tmp_path / "images"
    write_lock(images_dir, "mxnet-cuda")
    pinned = write_squashfs_lock(images_dir, "mxnet-cuda")
    data = tmp_path / "datasets" / "mxnet"
    data.mkdir(parents=True)
    coords = make_coords(framework="mxnet", scale="2x2", strategy="dist_sync", data="real")
    req = request(images_dir, "pyxis", coords=coords, launcher="srun", device="cuda", data_dir=str(data))
    cmd = SrunLauncher(req).command()
    results, sqsh = str(tmp_path / "results"), str(images_dir / "mxnet-cuda.sqsh")
    options = cmd[cmd.index("--gpus-per-node=2") + 1 : cmd.index("sh")]
    assert options == [
        f"--container-image={sqsh}",
        f"--container-mounts={results}:{results}:rw,{data}:{data}:ro",
        f"--container-workdir={tmp_path}",
        "--no-container-mount-home",
        "--container-readonly",
    ]
    inner = cmd[cmd.index("dlbench-rank") + 1 :]  # runs inside the container, the exit-code shell too
    digest = f"DLBENCH_IMAGE_DIGEST=sha256:{pinned['squashfs_sha256']}"
    assert inner[:3] == ["env", "HOME=/tmp", "DLBENCH_CONTAINER_RUNTIME=pyxis"] and digest in inner
    assert inner[inner.index(IMAGE_PYTHON) + 1 :][:2] == ["-m", "dlbench.launch"]
    assert LaunchRequest.from_argv(inner[inner.index(IMAGE_PYTHON) + 3 :]) == req
    with pytest.raises(SystemExit, match="set run.launcher: srun"):
        LocalLauncher(request(images_dir, "pyxis", device="cuda")).command()


def test_pyxis_verifies_the_squashfs_and_the_image_it_was_made_from(tmp_path):
    images_dir = tmp_path / "images"
    write_lock(images_dir)
    pinned = write_squashfs_lock(images_dir)
    assert Pyxis(request(images_dir, "pyxis")).verify()["digest"] == f"sha256:{pinned['squashfs_sha256']}"
    (images_dir / "mxnet.sqsh").write_bytes(b"squashfs stand-in\n!")
    with pytest.raises(ImageMismatch, match=f"is sha256:\\w+, but .* pins sha256:{pinned['squashfs_sha256']}"):
        Pyxis(request(images_dir, "pyxis")).verify()
    write_lock(images_dir, config_digest="sha256:" + "cd" * 32)  # the podman image was rebuilt since
    with pytest.raises(ImageMismatch, match="was made from sha256:abab.*pins sha256:cdcd"):
        Pyxis(request(images_dir, "pyxis")).verify()
    (images_dir / "mxnet.squashfs.lock.json").unlink()
    with pytest.raises(ImageMismatch, match="no pyxis image lock at .*mxnet.squashfs.lock.json"):
        Pyxis(request(images_dir, "pyxis")).verify()


def test_the_plan_shows_each_srun_step_with_the_pinned_squashfs(tmp_path, monkeypatch):
    """What `snakemake -n` prints under launcher: srun (train.smk): the launcher's own srun line."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLURM_STEP_ID", raising=False)
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["run"] |= {"launcher": "srun", "container": "pyxis", "device": "cuda"}
    fill_defaults(config)
    deploy = Deployment(config, str(REPO), set(), lambda: {RerunTrigger.MTIME}, {"DLBENCH_IMAGES": str(tmp_path)})
    runs = [make_coords(framework="mxnet", scale=scale, strategy="dist_sync") for scale in ("2x4", "2x4", "1x4")]
    protocol = RunProtocol("mlperf", warmup_steps=1, measured_steps=2, statistic="mean")
    before = deploy.srun_lines(runs, protocol)  # the image is not built yet: the rank's part elided
    assert len(before) == 2 and before[0].startswith("mxnet 2x4: srun --nodes=2 --ntasks=8")
    assert f"--container-image={tmp_path}/mxnet-cuda.sqsh" in before[0] and "not built yet" in before[0]
    write_lock(tmp_path, "mxnet-cuda")
    pinned = write_squashfs_lock(tmp_path, "mxnet-cuda")["squashfs_sha256"]
    (line, _) = deploy.srun_lines(runs, protocol)
    assert f"DLBENCH_IMAGE_DIGEST=sha256:{pinned}" in line and "--container-readonly" in line


def test_an_image_from_another_env_lock_is_refused(tmp_path):
    write_lock(tmp_path / "images", env_lock_sha256="0" * 64)
    write_sif_lock(tmp_path / "images")
    with pytest.raises(ImageMismatch, match=f"sha256 {'0' * 64}, but the file is now sha256 {images_sha('mxnet')}"):
        Apptainer(request(tmp_path / "images", "apptainer")).verify()


def test_a_refused_image_is_a_marked_failed_cell_and_nothing_is_lost(tmp_path, monkeypatch):
    """No podman here, or an image that is not the pinned one: the same path, a FAILED cell."""
    monkeypatch.chdir(tmp_path)
    images_dir = tmp_path / "images"
    write_lock(images_dir)
    write_sif_lock(images_dir)
    (images_dir / "mxnet.sif").write_bytes(b"tampered\n")
    req = request(images_dir, "apptainer", run_dir=str(tmp_path / make_coords(framework="mxnet").run_dir))
    Path(req.run_dir).mkdir(parents=True)
    (Path(req.run_dir) / "notes.txt").write_text("kept")
    assert run_as_launcher(req) == 0
    record = json.loads((Path(req.run_dir) / "launch.json").read_text())
    assert record["rank_exit_codes"] == [] and record["verdict"]["status"] == "failed"
    assert (Path(req.run_dir) / "notes.txt").read_text() == "kept"
    row = aggregate.summarize_run(req.coords, tmp_path)
    assert row["status"] == "failed" and "image refused" in row["reason"] and "mxnet.sif is sha256:" in row["reason"]


def test_the_deployment_runs_the_launcher_on_the_host_and_the_ranks_in_the_image(tmp_path):
    config = {"run": {"launcher": "srun", "data_workers": 0, "threads": 4, "container": "podman"}, "grid": {}}
    deploy = Deployment(config, str(REPO), set(), lambda: {RerunTrigger.MTIME}, {"DLBENCH_IMAGES": str(tmp_path)})
    wildcards = dataclasses.replace(make_coords(framework="mxnet"))
    assert [str(p) for p in deploy.software_inputs(wildcards)] == [str(tmp_path / "mxnet.lock.json")]
    assert deploy.python(wildcards) == sys.executable
    assert deploy.env_lock(wildcards) == "/opt/dlbench/envs/mxnet.txt"
    with pytest.raises(DeploymentError, match="drop --sdm apptainer"):
        Deployment(config, str(REPO), {DeploymentMethod.APPTAINER}, set, {"DLBENCH_IMAGES": str(tmp_path)})
    pyxis = {"run": {**config["run"], "container": "pyxis"}, "grid": {}}
    deploy = Deployment(pyxis, str(REPO), set(), lambda: {RerunTrigger.MTIME}, {"DLBENCH_IMAGES": str(tmp_path)})
    expected = [str(tmp_path / "mxnet.lock.json"), str(tmp_path / "mxnet.squashfs.lock.json")]
    assert [str(p) for p in deploy.software_inputs(wildcards)] == expected
    apptainer = {"run": {**config["run"], "container": "apptainer"}, "grid": {}}
    deploy = Deployment(apptainer, str(REPO), set(), lambda: {RerunTrigger.MTIME}, {"DLBENCH_IMAGES": str(tmp_path)})
    expected = [str(tmp_path / "mxnet.lock.json"), str(tmp_path / "mxnet.sif.lock.json")]
    assert [str(p) for p in deploy.software_inputs(wildcards)] == expected
    pyxis["run"]["launcher"] = "local"
    with pytest.raises(DeploymentError, match="run.container: pyxis starts every rank through srun"):
        Deployment(pyxis, str(REPO), set(), set, {"DLBENCH_IMAGES": str(tmp_path)})


# ------------------------------------------------------------------ provenance, report, audit


def container_header(digest: str = DIGEST) -> dict:
    return {
        "run": make_coords(framework="mxnet").as_dict(),
        "framework": {"name": "mxnet", "version": "1.9.1"},
        "provenance": {
            "env_lock": "mxnet.txt",
            "env_lock_sha256": "cd" * 32,
            "container": {
                "runtime": "podman",
                "path": "localhost/dlbench/mxnet:0123456789ab",
                "digest": digest,
                "sha256": digest.removeprefix("sha256:"),
                "env_lock_in_image_sha256": "cd" * 32,
                "image_lock_sha256": "ef" * 32,
            },
        },
    }


def test_the_header_records_runtime_digest_and_the_lock_inside_the_image(monkeypatch):
    monkeypatch.setenv("DLBENCH_CONTAINER_RUNTIME", "podman")
    monkeypatch.setenv("DLBENCH_IMAGE", "localhost/dlbench/mxnet:0123456789ab")
    monkeypatch.setenv("DLBENCH_IMAGE_DIGEST", DIGEST)
    monkeypatch.setenv("DLBENCH_IMAGE_LOCK_SHA256", "ef" * 32)
    info = provenance.container_info()
    assert (info["runtime"], info["digest"], info["image_lock_sha256"]) == ("podman", DIGEST, "ef" * 32)
    assert "env_lock_in_image_sha256" in info


@pytest.mark.parametrize("runtime", ["podman", "apptainer", "pyxis"])
def test_the_environment_table_names_runtime_digest_and_lock(runtime):
    """A campaign under Apptainer is marked as such, like one under podman or pyxis."""
    header = container_header()
    header["provenance"]["container"]["runtime"] = runtime
    (row,) = environment.summarize(pd.DataFrame(), [header])["software"]
    image = f"localhost/dlbench/mxnet:0123456789ab {DIGEST[:19]}"
    assert row["container"] == f"{runtime} {image} (env lock sha256 cdcdcdcdcdcd)"


def test_the_audit_fails_a_run_whose_image_is_not_the_locked_one(tmp_path):
    write_lock(tmp_path)
    assert audit.image_problems([container_header()], tmp_path) == []
    other = "sha256:" + "99" * 32
    (problem,) = audit.image_problems([container_header(other)], tmp_path)
    assert other in problem and DIGEST in problem and "mxnet" in problem
    assert audit.image_problems([{"run": {"framework": "mxnet"}, "provenance": {}}], tmp_path) == []
    assert os.path.exists(tmp_path / "mxnet.lock.json")
    pinned = "sha256:" + write_squashfs_lock(tmp_path)["squashfs_sha256"]  # pyxis: the squashfs's own lock
    header = container_header(pinned)
    header["provenance"]["container"]["runtime"] = "pyxis"
    assert audit.image_problems([header], tmp_path) == []
    assert pinned in audit.image_problems([container_header(pinned)], tmp_path)[0]  # podman pins another
    sif = "sha256:" + write_sif_lock(tmp_path)["sif_sha256"]  # Apptainer: the .sif's own lock
    header = container_header(sif)
    header["provenance"]["container"]["runtime"] = "apptainer"
    assert audit.image_problems([header], tmp_path) == []
    (tmp_path / "mxnet.sif.lock.json").unlink()
    assert "pins nothing (no lock)" in audit.image_problems([header], tmp_path)[0]
    header["provenance"]["container"]["runtime"] = "docker"
    assert "which dlbench does not know" in audit.image_problems([header], tmp_path)[0]


def test_ranks_past_the_limit_get_sigterm_first_which_podman_passes_to_its_container(tmp_path):
    said = tmp_path / "terminated"
    trap = (
        "import pathlib, signal, time\n"
        f"signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path({str(said)!r}).touch(), exit(1)))\n"
        "time.sleep(60)"
    )
    procs = [subprocess.Popen([sys.executable, "-c", trap])]
    time.sleep(0.5)
    assert wait_for_ranks(procs, stop_after_s=1) == [None]
    assert said.exists()
