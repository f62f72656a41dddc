import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dlbench.coords import RunCoords  # noqa: E402
from dlbench.steplog import StepLogWriter, rank_log_name  # noqa: E402

# Two pytest workers share the cores (tools/test.sh: two on a 2-core machine), so a framework
# process rarely has its cores to itself. OpenMP's default, active wait keeps a thread that waits
# for work spinning on a core the other worker's process needs: a ResNet-50 step of PyTorch's
# took 2.5 s beside other work against 0.32 s waiting passively (docs/testing.md). Every process
# the suite starts waits passively: those that inherit the environment, and those given one
# (`**SHARED_CORES_ENV`). Benchmarks never run under this: what they time is the default.
SHARED_CORES_ENV = {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
os.environ.update(SHARED_CORES_ENV)


def make_coords(**overrides) -> RunCoords:
    values = dict(
        framework="pytorch",
        model="resnet50",
        precision="fp32",
        data="synthetic",
        batch="8",
        scale="1x1",
        strategy="single",
        repeat=1,
    )
    values.update(overrides)
    return RunCoords(**values)


def write_run(
    root: Path, coords: RunCoords, step_seconds, warmup=2, status="ok", error=None, batch=8, rank=None, data_wait=None
):
    """Write rank logs for `coords` under root with the given per-step durations (one list per rank);
    `data_wait`: the seconds of each step spent waiting for input (default: none recorded)."""
    per_rank = step_seconds if isinstance(step_seconds[0], (list, tuple)) else [step_seconds]
    ranks = range(len(per_rank)) if rank is None else [rank]
    for r, durations in zip(ranks, per_rank, strict=False):
        path = root / coords.run_dir / rank_log_name(r)
        header = {
            "run": coords.as_dict(),
            "rank": r,
            "world_size": len(per_rank),
            "node": f"node{r}",
            "framework": {"name": coords.framework, "version": "test"},
            "image_size": 64,
        }
        writer = StepLogWriter(path, header)
        t = 100.0 + r
        steps = []
        for i, d in enumerate(durations):
            steps.append(
                {
                    "i": i,
                    "phase": "warmup" if i < warmup else "measure",
                    "t_start": t,
                    "t_end": t + d,
                    "samples": batch,
                    "loss": 1.0 / (i + 1),
                    **({"data_wait": data_wait * d} if data_wait is not None else {}),
                }
            )
            t += d
        writer.write_steps(steps)
        writer.close(status, error)
    return root / coords.run_dir


def framework_python(name: str) -> Path:
    return Path(os.environ.get("DLBENCH_VENVS", REPO / ".venvs")) / name / "bin" / "python"


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def tiny_pipeline(tmp_path_factory) -> Path:
    """The working directory of the session's one real pipeline run (tests/tiny_pipeline.py),
    finished: the tests that only read it share it."""
    from tests import tiny_pipeline

    if not framework_python("pytorch").exists():
        pytest.skip("the pytorch environment is not built")
    return tiny_pipeline.run(tmp_path_factory.mktemp("e2e"))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Groups for pytest-xdist's `--dist loadgroup` (tools/test.sh runs two workers): a
    module's tests stay together (its module-scoped fixtures are made once), the tests that
    read the session's pipeline run share one worker (it is made once), and every test on the
    Slurm cluster runs in one worker, one at a time (one cluster; a test drains a node). The
    Slurm tests mostly wait on the scheduler, so the other worker computes meanwhile."""
    grouped = bool(getattr(config.option, "loadgroup", False))  # set in xdist's workers
    for item in items:
        if item.get_closest_marker("slurm"):
            group = "slurm"
        elif "tiny_pipeline" in item.fixturenames:
            group = "tiny_pipeline"
        else:
            group = item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))
        if grouped:
            _name_group(item, group)


def _name_group(item, group: str) -> None:
    """What pytest-xdist 3.8 does with an xdist_group mark, for pytest 9: its scheduler groups
    tests by the suffix `@group` of their node ids, which xdist writes to `item._nodeid`, an
    attribute pytest 9 no longer reads (its node id is `str(item._id)`), so every test was its
    own unit and module fixtures were made once per worker (measured: the Slurm pipeline twice)."""
    from _pytest.nodeid import coerce_node_id

    item._id = coerce_node_id(f"{item.nodeid}@{group}")
