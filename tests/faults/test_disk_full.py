"""The disk fills under a running rank: results on a 12 KiB tmpfs (needs root to mount it).

What a user must see: the rank says which file it could not write and why, the launcher exits
non-zero without leaving a launch.json that Snakemake would take for a finished run, and what
was written stays as written, never read as a valid log.
"""

import subprocess

import pytest

from dlbench.steplog import read_header, read_steplog
from tests.test_pytorch_runner import PYTHON, launch

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(not PYTHON.exists(), reason="the pytorch environment is not built"),
]


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12k", "tmpfs", str(mount)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_is_named_and_no_run_is_recorded(small_disk):
    run_dir = small_disk / "run"
    # 150 steps of about 160 bytes do not fit beside the header in 12 KiB. The rank's step log
    # is the worker's, whatever the framework: the toy plug-in's steps take microseconds.
    result = launch(run_dir, "--threads", "1", batch=2, steps=(1, 150), framework="toy")
    assert result.returncode != 0
    assert f"cannot write step log {run_dir / 'rank0.steps.jsonl'}: No space left on device" in result.stderr
    assert f"cannot write {run_dir / 'launch.json'}" in result.stderr
    assert sorted(p.name for p in run_dir.iterdir()) == ["rank0.steps.jsonl"]  # no launch.json, no .partial
    log = read_steplog(run_dir / "rank0.steps.jsonl")
    assert not log.valid and log.header is not None and len(log.steps) > 0
    assert any("truncated last line" in p or "missing footer" in p for p in log.problems), log.problems
    assert read_header(run_dir / "rank0.steps.jsonl")["type"] == "header"  # what was written is intact
