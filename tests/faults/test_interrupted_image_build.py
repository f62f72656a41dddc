"""An image build is killed while podman saves its archive: the lock and the archive it pins
are untouched, and the next build completes (docs/reliability.md).

Uses the image store tools/containers.sh built (MXNet's image: its pip layer is cached, so a
build takes tens of seconds, not the 10-15 minutes of a first build); skips without one.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from dlbench.images import podman as images
from tests.conftest import REPO

STORE = images.images_dir()
LOCK, ARCHIVE = STORE / "mxnet.lock.json", STORE / "mxnet.oci.tar"
PARTIAL = ARCHIVE.with_name(ARCHIVE.name + ".partial")

pytestmark = [
    pytest.mark.faults,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed (bash tools/containers.sh)"),
    pytest.mark.skipif(
        not (LOCK.exists() and ARCHIVE.exists() and (STORE / images.BASE_LOCK).exists()),
        reason=f"no MXNet image in {STORE} to rebuild cheaply (bash tools/containers.sh)",
    ),
]
BUILD = [sys.executable, "-m", "dlbench.images.podman", "build", "mxnet"]


def test_a_build_killed_mid_save_leaves_the_pinned_image_alone(tmp_path):
    before = (LOCK.read_bytes(), ARCHIVE.stat().st_ino, ARCHIVE.stat().st_size)
    with open(tmp_path / "build.log", "wb") as log:
        build = subprocess.Popen(BUILD, cwd=REPO, stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not (PARTIAL.exists() and PARTIAL.stat().st_size > 1_000_000):  # podman save is writing
            assert build.poll() is None, (tmp_path / "build.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "podman save never started"
            time.sleep(0.02)
        os.killpg(build.pid, signal.SIGKILL)
        build.wait(timeout=60)
    finally:
        if build.poll() is None:
            os.killpg(build.pid, signal.SIGKILL)
    assert (LOCK.read_bytes(), ARCHIVE.stat().st_ino, ARCHIVE.stat().st_size) == before  # nothing half-replaced
    assert json.loads(LOCK.read_text())["manifest_digest"] == images.manifest_digest(ARCHIVE)

    again = subprocess.run(BUILD, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    lock = json.loads(LOCK.read_text())
    assert lock["manifest_digest"] == images.manifest_digest(ARCHIVE) and not PARTIAL.exists()
    assert images.image_id(STORE, lock["image"]) == lock["config_digest"]
