"""run.container: podman and pyxis for real: the one image tools/test.sh builds (MXNet, the
smallest) from the locks (once, then reused), a tampered lock or image stops the run naming
both digests, ranks run inside the pinned image locally and one container per rank under srun
on the local Slurm cluster (2 nodes × 2 ranks); pyxis's squashfs made from that image, listed,
and refused once one byte changes. Skips, with the reason, where podman or squashfs-tools
(bash tools/containers.sh) or Slurm is absent; under CI (tools/test.sh installs them) a missing
tool fails instead."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dlbench.analysis import aggregate
from dlbench.images import podman as images
from dlbench.images import squashfs
from dlbench.launch import LaunchRequest
from dlbench.launch.container import podman_base, squashfs_lock_path
from dlbench.launch.run import run_as_launcher
from dlbench.protocol import RunProtocol
from dlbench.steplog import read_steplog
from tests.conftest import REPO, make_coords
from tests.test_slurm import cluster_answers

NEEDED = ("podman", "runc", "mksquashfs", "unsquashfs")
MISSING = [tool for tool in NEEDED if shutil.which(tool) is None]
if MISSING and os.environ.get("CI"):  # CI installs them (tools/test.sh): a missing one is a failure, not a skip
    raise RuntimeError(f"{', '.join(MISSING)} not installed: tools/test.sh did not install them")
pytestmark = pytest.mark.skipif(
    bool(MISSING), reason=f"{', '.join(MISSING)} not installed (bash tools/containers.sh installs them)"
)
STORE = images.images_dir()
# The one image tools/test.sh builds (the smallest; docs/testing.md): every test here runs in it.
FRAMEWORK, STRATEGY = "mxnet", "dist_sync"


def ensure_image(framework: str) -> dict:
    return images.ensure(framework, STORE)


@pytest.fixture(scope="session")
def mxnet_image() -> dict:
    return ensure_image(FRAMEWORK)


@pytest.fixture(scope="session")
def mxnet_squashfs(mxnet_image) -> dict:
    """The squashfs made from the pinned image (≈ 5 s), and its lock."""
    with images.build_lock(STORE):
        return squashfs.build(FRAMEWORK, STORE)


def request(run_dir: Path, images_dir: Path, allocator: str = "system", **coords) -> LaunchRequest:
    coords = make_coords(**{"framework": "mxnet", "batch": "2", **coords})
    return LaunchRequest(
        coords, RunProtocol("mlperf", 1, 2, "mean"), str(run_dir), image_size=32, threads=2, progress_every=0,
        env_lock=f"/opt/dlbench/envs/{coords.framework}.txt", container="podman", images=str(images_dir),
        allocator=allocator,
    )  # fmt: skip


def tampered_store(tmp_path: Path, lock: dict, **changes) -> Path:
    """A copy of the lock, changed, beside the real image store."""
    copy = tmp_path / "images"
    copy.mkdir(parents=True)
    (copy / "podman").symlink_to(STORE / "podman")
    (copy / f"{lock['framework']}.lock.json").write_text(json.dumps({**lock, **changes}))
    return copy


def refused(tmp_path: Path, store: Path) -> tuple[dict, dict]:
    run_dir = tmp_path / "results" / "runs" / "x"
    run_dir.mkdir(parents=True)
    (run_dir / "kept.txt").write_text("earlier result")
    assert run_as_launcher(request(run_dir, store)) == 0
    assert (run_dir / "kept.txt").read_text() == "earlier result" and not list(run_dir.glob("rank*"))
    record = json.loads((run_dir / "launch.json").read_text())
    row = aggregate.with_slurm_outcome({"status": "missing", "reason": "rank 0: no step log"}, run_dir)
    return record, row


def test_a_changed_lock_stops_the_run_naming_the_image_and_both_digests(tmp_path, mxnet_image, monkeypatch):
    monkeypatch.chdir(tmp_path)
    forged = "sha256:" + "0" * 64
    record, row = refused(tmp_path, tampered_store(tmp_path, mxnet_image, config_digest=forged))
    reason = record["verdict"]["reason"]
    assert mxnet_image["image"] in reason and mxnet_image["config_digest"] in reason and forged in reason
    assert record["rank_exit_codes"] == [] and row["status"] == "failed" and forged in row["reason"]


def test_a_changed_image_stops_the_run_naming_the_image_and_both_digests(tmp_path, mxnet_image, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = json.loads((STORE / "base.lock.json").read_text())
    impostor = "localhost/dlbench/mxnet:tampered"
    base_id = base["config_digest"].removeprefix("sha256:")
    subprocess.run([*podman_base(STORE), "tag", base_id, impostor], check=True)
    try:
        record, row = refused(tmp_path, tampered_store(tmp_path, mxnet_image, image=impostor))
    finally:  # this name only (untag without one drops every name of the image)
        subprocess.run([*podman_base(STORE), "untag", base_id, impostor], check=False)
    reason = record["verdict"]["reason"]
    assert impostor in reason and base["config_digest"] in reason and mxnet_image["config_digest"] in reason


def check_headers(run_dir: Path, lock: dict, ranks: int) -> list[dict]:
    headers = []
    for rank in range(ranks):
        log = read_steplog(run_dir / f"rank{rank}.steps.jsonl")
        assert log.status == "ok", (run_dir, rank, log.footer)
        container, prov = log.header["provenance"]["container"], log.header["provenance"]
        assert (container["runtime"], container["digest"]) == ("podman", lock["config_digest"])
        assert container["env_lock_in_image_sha256"] == lock["env_lock_sha256"] == prov["env_lock_sha256"]
        assert prov["python"]["executable"] == "/opt/venv/bin/python" and "Debian" in prov["os_release"]
        headers.append(log.header)
    return headers


@pytest.mark.slow
def test_every_rank_runs_in_the_pinned_image(tmp_path, mxnet_image, monkeypatch):
    """Two ranks, two containers on the host network (their rendezvous), each on the image's
    jemalloc (the base holds the allocators run.allocator names); ≈ 30 s."""
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "results" / "runs" / "x"
    assert run_as_launcher(request(run_dir, STORE, "jemalloc", scale="1x2", strategy="dist_sync")) == 0
    record = json.loads((run_dir / "launch.json").read_text())
    assert record["rank_exit_codes"] == [0, 0] and record["container"]["digest"] == mxnet_image["config_digest"]
    headers = check_headers(run_dir, mxnet_image, 2)
    assert {header["allocator"]["name"] for header in headers} == {"jemalloc"}


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.skipif(  # CI brings the cluster up (tools/test.sh): there, no cluster is a failure
    not os.environ.get("CI") and not cluster_answers(), reason="no Slurm cluster answers (tools/slurm-local/up.sh)"
)
def test_two_nodes_two_ranks_each_in_containers_under_srun(tmp_path, mxnet_image):
    """srun starts one container per rank on both nodes, each on the image's tcmalloc (≈ 1 min)."""
    run_dir = tmp_path / "results" / "runs" / FRAMEWORK
    req = request(run_dir, STORE, "tcmalloc", framework=FRAMEWORK, scale="2x2", strategy=STRATEGY)
    req = dataclasses.replace(req, launcher="srun", time_limit=240)
    cmd = ["salloc", "-N2", "--ntasks-per-node=2", "--cpus-per-task=1", "--mem=3000", "-t", "8"]
    cmd += [sys.executable, "-m", "dlbench.launch", *req.to_argv()]
    out = subprocess.run(
        cmd, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=420
    )
    assert out.returncode == 0, out.stderr[-3000:]
    record = json.loads((run_dir / "launch.json").read_text())
    assert record["rank_exit_codes"] == [0, 0, 0, 0], out.stderr[-3000:]
    headers = check_headers(run_dir, mxnet_image, 4)
    assert {h["node"] for h in headers} == {"n1", "n2"}
    assert {h["allocator"]["name"] for h in headers} == {"tcmalloc"}


def test_the_squashfs_is_made_from_the_pinned_image_and_holds_the_runner(mxnet_image, mxnet_squashfs):
    """Real file: its sha256 is the lock's, it came from the image the podman lock pins, and
    unsquashfs lists the image's Python, dlbench's launcher and the env lock."""
    path = STORE / mxnet_squashfs["squashfs"]
    assert images.sha256_of(path) == mxnet_squashfs["squashfs_sha256"] and path.stat().st_size > 50e6
    assert mxnet_squashfs["config_digest"] == mxnet_image["config_digest"]
    listing = subprocess.run(["unsquashfs", "-l", str(path)], capture_output=True, text=True, check=True).stdout
    code = "/opt/dlbench/dlbench/launch/__main__.py"
    for inside in ("/opt/venv/bin/python", code, f"/opt/dlbench/envs/{FRAMEWORK}.txt"):
        assert f"squashfs-root{inside}\n" in listing, inside
    with images.build_lock(STORE):  # ≈ 4 s: the same image gives the same file
        again = squashfs.build(FRAMEWORK, STORE)
    assert again["squashfs_sha256"] == mxnet_squashfs["squashfs_sha256"]


def tampered_squashfs(tmp_path: Path, lock: dict) -> Path:
    """A store holding the image's locks and a copy of its squashfs with one byte changed."""
    store = tmp_path / "images"
    store.mkdir()
    for name in (f"{lock['framework']}.lock.json", squashfs_lock_path("", lock["framework"]).name, lock["squashfs"]):
        shutil.copy(STORE / name, store / name)
    with open(store / lock["squashfs"], "r+b") as image:
        image.seek(4096)
        byte = image.read(1)
        image.seek(4096)
        image.write(bytes([byte[0] ^ 0xFF]))
    return store


def test_a_changed_squashfs_stops_the_run_naming_both_digests(tmp_path, mxnet_image, mxnet_squashfs, monkeypatch):
    """One byte of a real copy changed: no rank starts (no srun is reached), a FAILED cell."""
    monkeypatch.chdir(tmp_path)
    store = tampered_squashfs(tmp_path, mxnet_squashfs)
    changed = images.sha256_of(store / mxnet_squashfs["squashfs"])
    run_dir = tmp_path / "results" / "runs" / "x"
    req = dataclasses.replace(request(run_dir, store), launcher="srun", container="pyxis")
    assert run_as_launcher(req) == 0
    reason = json.loads((run_dir / "launch.json").read_text())["verdict"]["reason"]
    assert f"sha256:{changed}" in reason and f"sha256:{mxnet_squashfs['squashfs_sha256']}" in reason, reason
    assert not list(run_dir.glob("rank*"))


PODMAN_GRID = {
    "grid": {
        "frameworks": ["mxnet"],
        "models": ["resnet50"],
        "batch_per_device": [2],
        "scales": ["1x1", "1x2"],
        "strategies": {"mxnet": ["dist_sync"]},
        "exclude": [],
    },
    "protocol": {"preset": "mlperf", "warmup_steps": 1, "measured_steps": 2, "repeats": 1},
    "run": {"image_size": 32, "threads": 2, "progress_every": 0, "container": "podman"},
}


@pytest.mark.slow
def test_the_pipeline_runs_every_rank_in_the_image_to_the_report_and_the_audit(tmp_path, mxnet_image):
    """Snakemake with run.container: podman: tables, the environment table, then the audit,
    which fails once the lock pins another image (≈ 1.5 min)."""
    import yaml

    (tmp_path / "config").mkdir()
    (tmp_path / "config/config.yaml").write_text((REPO / "config/config.yaml").read_text())
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(PODMAN_GRID))

    def snakemake(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "snakemake", *args, "-s", str(REPO / "Snakefile"), "-d", str(tmp_path)]
        cmd += ["--profile", str(REPO / "profiles/local"), "--configfile", str(tmp_path / "grid.yaml")]
        return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)

    done = snakemake("results/tables/cells.csv", "results/tables/environment.json")
    assert done.returncode == 0, done.stderr[-4000:]
    lock = json.loads((STORE / "mxnet.lock.json").read_text())  # the rule may have rebuilt it
    for scale, ranks in (("1x1", 1), ("1x2", 2)):
        strategy = "single" if scale == "1x1" else "dist_sync"
        check_headers(tmp_path / f"results/runs/mxnet/resnet50/fp32/synthetic/bs2/{scale}/{strategy}/rep1", lock, ranks)
    software = json.loads((tmp_path / "results/tables/environment.json").read_text())["software"]
    assert software[0]["container"].startswith(f"podman {lock['image']} {lock['config_digest'][:19]}")
    passed = snakemake("-f", "audit")
    assert passed.returncode == 0, passed.stderr[-3000:]
    forged = tampered_store(tmp_path / "forged", lock, config_digest="sha256:" + "1" * 64)
    audit = snakemake("-f", "audit", env=dict(os.environ, DLBENCH_IMAGES=str(forged)))
    said = (tmp_path / "logs/audit.log").read_text()  # Snakemake removes a failed job's verdict.txt
    # The recorded runs' image differs from the lock's: refused before planning (docs/workdir.md),
    # or, where the runs were not compared, failed by the audit; either names the digest.
    refused = "docs/workdir.md" in audit.stderr and lock["config_digest"][:19] in audit.stderr
    audited = "audit FAILED" in said and lock["config_digest"] in said
    assert audit.returncode != 0 and (refused or audited), (said, audit.stderr[-2000:])
