"""run.allocator: each rank preloads the malloc asked for, records the one it mapped, and a rank
that cannot load it fails naming it (dlbench.launch.allocator)."""

import os
import subprocess
import sys

import pytest

from dlbench.launch import allocator
from dlbench.schemas import load_schema
from dlbench.steplog import read_steplog
from tests.conftest import REPO
from tests.test_pytorch_runner import launch, needs_env

JEMALLOC = "libjemalloc.so.2"


def _loader_has(library: str) -> bool:
    found = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    return library in found


# tools/test.sh installs Debian's libjemalloc2; under CI its absence fails instead of skipping.
needs_jemalloc = pytest.mark.skipif(
    not os.environ.get("CI") and not _loader_has(JEMALLOC), reason=f"{JEMALLOC} is not installed"
)


def test_the_mapped_allocator_is_read_from_the_process_maps(tmp_path):
    maps = tmp_path / "maps"
    libc = "7f0000000000-7f0000001000 r-xp 00000000 08:01 42   /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    anonymous = "7f0000002000-7f0000003000 rw-p 00000000 00:00 0 \n"
    maps.write_text(libc + anonymous)
    assert allocator.mapped(str(maps)) == {"name": "system", "library": "/usr/lib/x86_64-linux-gnu/libc.so.6"}
    maps.write_text(libc + anonymous + libc.replace("libc.so.6", "libjemalloc.so.2"))
    assert allocator.mapped(str(maps)) == {"name": "jemalloc", "library": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"}
    assert allocator.mapped(str(tmp_path / "absent")) == {"name": "system", "library": None}


def test_the_schemas_name_the_allocators_the_code_knows():
    # The config offers what a rank can preload; a header may name any allocator it recognises.
    assert load_schema("config")["properties"]["run"]["properties"]["allocator"]["enum"] == list(allocator.NAMES)
    header = next(b for b in load_schema("steplog")["oneOf"] if b["properties"]["type"]["const"] == "header")
    recognised = header["properties"]["allocator"]["properties"]["name"]["enum"]
    assert recognised == ["system", *allocator.RECOGNISED]


PRELOAD_AND_CHECK = """
import sys
from dlbench.launch import allocator
allocator.LIBRARIES["jemalloc"] = tuple(sys.argv[1:])
allocator.preload("jemalloc")
try:
    print("loaded", allocator.check("jemalloc")["library"])
except allocator.AllocatorNotLoaded as error:
    print("refused", error)
"""


def _preload_and_check(*libraries: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", PRELOAD_AND_CHECK, *libraries], env=env, capture_output=True, text=True, check=True
    )


@needs_jemalloc
def test_a_process_re_executes_once_per_library_until_the_loader_maps_one():
    # The first library does not exist: the loader ignores it, the process tries the next.
    result = _preload_and_check("libdlbench-absent.so.9", JEMALLOC)
    assert result.stdout.startswith("loaded /") and result.stdout.strip().endswith(JEMALLOC), result
    assert result.stderr.count("libdlbench-absent.so.9") == 1  # the loader's word, tried once
    refused = _preload_and_check("libdlbench-absent.so.9").stdout
    assert refused.startswith("refused run.allocator jemalloc:") and "libdlbench-absent.so.9" in refused
    assert "running with system" in refused


@needs_env
@needs_jemalloc
def test_a_rank_runs_with_the_allocator_asked_and_its_header_says_which(tmp_path):
    result = launch(tmp_path / "jemalloc", "--allocator", "jemalloc", framework="toy")
    assert result.returncode == 0, result.stderr[-3000:]
    log = read_steplog(tmp_path / "jemalloc/rank0.steps.jsonl")
    assert log.valid and log.status == "ok", (log.problems, log.footer)
    assert log.header["allocator"]["name"] == "jemalloc"
    assert log.header["allocator"]["library"].endswith(JEMALLOC)
    plain = _log_of(launch(tmp_path / "system", framework="toy"), tmp_path / "system")
    assert plain.status == "ok" and plain.header["allocator"]["name"] == "system"


@needs_env
def test_a_rank_that_cannot_load_the_allocator_is_a_failed_run_naming_it(tmp_path):
    # As if every library had been tried: the rank runs on and its check refuses.
    tried = [(allocator.TRIED, "9")]
    log = _log_of(
        launch(tmp_path / "run", "--allocator", "tcmalloc", framework="toy", environment=tried), tmp_path / "run"
    )
    assert log.valid and log.status == "failed" and log.measured_steps() == []
    assert "run.allocator tcmalloc:" in log.footer["error"] and "libtcmalloc_minimal.so.4" in log.footer["error"]


def _log_of(result, run_dir):
    assert result.returncode == 0, result.stderr[-3000:]
    return read_steplog(run_dir / "rank0.steps.jsonl")
