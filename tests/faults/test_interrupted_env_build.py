"""An environment build is killed mid-install: the next run rebuilds it.

workflow/scripts/build_env.sh (the framework_env rule and tools/bootstrap.sh) builds a venv
from a hash lock. Here the lock names one local wheel of a few thousand modules, so pip takes
seconds to install it (no network, no real framework); the test SIGKILLs the build while pip
writes into site-packages. What a user must see: no stamp, so Snakemake does not take the
environment as built, and the next run rebuilds it whole instead of using the half-built one.
"""

import base64
import hashlib
import os
import signal
import subprocess
import time
import zipfile

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.faults

BUILD_ENV = REPO / "workflow/scripts/build_env.sh"
PACKAGE, MODULES = "dlbench_fault_pkg", 3000


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def slow_wheel(directory) -> str:
    """A wheel of MODULES small modules (pip byte-compiles each) and its lock line."""
    path = directory / f"{PACKAGE}-1.0-py3-none-any.whl"
    files = {f"{PACKAGE}/__init__.py": b"COUNT = %d\n" % MODULES}
    files.update({f"{PACKAGE}/m{i}.py": b"VALUE = %d\n" % i for i in range(MODULES)})
    info = f"{PACKAGE}-1.0.dist-info"
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 1.0\n".encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: dlbench-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = [record_line(name, data) for name, data in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
    return f"{path} --hash=sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}\n"


def build(lock, venv, stamp, **popen):
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    cmd = ["bash", str(BUILD_ENV), str(lock), str(venv), str(stamp)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


def installed(venv) -> int:
    return sum(len(files) for root, _, files in os.walk(venv / "lib") if PACKAGE in root)


def test_a_killed_build_is_rebuilt_not_used(tmp_path):
    lock = tmp_path / "fault.txt"
    lock.write_text(slow_wheel(tmp_path))
    venv = tmp_path / "venv"
    stamp = venv / ".dlbench-env"
    first = build(lock, venv, stamp, start_new_session=True)
    deadline = time.monotonic() + 120
    while installed(venv) < 50:  # pip is writing the package
        assert first.poll() is None, first.stdout.read()
        assert time.monotonic() < deadline, "pip never started installing"
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    partly = installed(venv)
    assert (venv / "bin/python").exists() and partly < MODULES + 2  # a half-built environment
    assert not stamp.exists() and not (venv / "lock.sha256").exists()

    again = build(lock, venv, stamp)
    said = again.communicate(timeout=300)[0]
    assert again.returncode == 0, said
    assert "or its build did not finish: rebuilding it" in said and "already matches" not in said
    want = hashlib.sha256(lock.read_bytes()).hexdigest()
    assert stamp.read_text() == (venv / "lock.sha256").read_text() == want + "\n"
    assert not list(tmp_path.rglob("*.partial.*"))
    count = subprocess.run(
        [venv / "bin/python", "-c", f"import {PACKAGE}.m{MODULES - 1} as m; print(m.VALUE)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert count.stdout.strip() == str(MODULES - 1)

    third = build(lock, venv, stamp)
    assert "already matches" in third.communicate(timeout=60)[0] and third.returncode == 0
