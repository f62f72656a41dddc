"""Who holds a working directory: Snakemake's lock says only that one is held.

The Snakefile's `onstart` records the running snakemake's pid, host, start time and command in
`.snakemake/dlbench-owner.json`; `onsuccess`/`onerror` remove it. A second invocation on the
same directory reads it while parsing, before Snakemake refuses with its own lock message, and
says what holds the lock and how to proceed (docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import sys
import time
from pathlib import Path

from dlbench.files import write_atomically

OWNER_FILE = Path(".snakemake") / "dlbench-owner.json"
LOCKS = Path(".snakemake") / "locks"


def claim(workdir: str | os.PathLike = ".") -> None:
    """Record this process as the directory's holder (Snakemake holds the lock by now)."""
    path = Path(workdir) / OWNER_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": shlex.join(sys.argv),
    }
    write_atomically(path, json.dumps(record) + "\n")


def release(workdir: str | os.PathLike = ".") -> None:
    path = Path(workdir) / OWNER_FILE
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder(workdir: str | os.PathLike = ".") -> str | None:
    """A sentence on who holds the directory's Snakemake lock, or None when it is not locked."""
    workdir = Path(workdir)
    if not any((workdir / LOCKS).glob("*.lock")):
        return None
    try:
        owner = json.loads((workdir / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return (
            f"dlbench: {workdir.resolve()} is locked by another snakemake (it did not say which); "
            "wait for it to finish, or if none is running: snakemake --unlock"
        )
    where = f"pid {owner['pid']} on {owner['host']}, started {owner['started']}: {owner['command']}"
    if owner["host"] == socket.gethostname() and not _alive(int(owner["pid"])):
        return (
            f"dlbench: {workdir.resolve()} is locked by a snakemake that is no longer running ({where}); "
            "it was killed: release the lock with `snakemake --unlock`, then run again"
        )
    return (
        f"dlbench: {workdir.resolve()} is in use by snakemake {where}; wait for it to finish "
        "(or stop it), or run in another working directory (-d)"
    )
