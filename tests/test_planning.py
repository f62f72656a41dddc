"""The collector policy while Snakemake plans a grid (dlbench/planning/dag.py)."""

import gc
import subprocess
import sys
from pathlib import Path

import pytest

from dlbench.planning import dag as planning

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def restore_gc():
    yield
    gc.unfreeze()
    gc.enable()


def test_collection_is_paused_while_planning_and_resumed_with_planned_objects_frozen(restore_gc):
    planning.pause_collection()
    assert not gc.isenabled()
    planned = [[i] for i in range(1000)]  # containers alive when the run starts
    planning.resume_collection()
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(planned)


def test_snakefile_pauses_before_the_config_and_resumes_when_the_run_starts():
    text = (REPO / "Snakefile").read_text()
    assert text.index("planning.pause_collection()") < text.index("configfile:")
    onstart = text[text.index("onstart:") :].split("\n\n")[0]
    assert "planning.resume_collection()" in onstart


def test_the_plan_is_frozen_at_exit_so_the_last_collection_skips_it():
    # atexit runs its handlers last-registered first: this one reads what pause_collection's left.
    program = (
        "import atexit, gc\n"
        "atexit.register(lambda: print(gc.get_freeze_count() >= 100_000))\n"
        "from dlbench.planning import dag\n"
        "dag.pause_collection()\n"
        "plan = [[i] for i in range(100_000)]\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.strip() == "True"
