"""PyTorch: DDP's loss trajectory against the single-device run (the runner in its own
environment, .venvs/pytorch; tests/test_pytorch_runner.py has the rest, tests/frameworks/
test_bert.py its BERT)."""

import pytest

from tests.conftest import framework_python
from tests.frameworks import equivalence

pytestmark = pytest.mark.skipif(not framework_python("pytorch").exists(), reason="the pytorch environment is not built")
STEPS = (0, 6)


@pytest.fixture(scope="module")
def single_losses(tmp_path_factory):
    """ResNet-50, 32 px, batch 4, one thread (the kernels of each 1-thread DDP rank), at the
    learning rate of a 2-device run (the same global batch: tests/frameworks/equivalence.py)."""
    run_dir = tmp_path_factory.mktemp("pt") / "single"
    equivalence.launch("pytorch", run_dir, steps=STEPS, threads=1, env={equivalence.LR_SCALE_ENV: "2"})
    return equivalence.losses(run_dir / "rank0.steps.jsonl")


def test_ddp_reproduces_the_single_device_losses(tmp_path, single_losses):
    """Two DDP ranks on the same batch: the all-reduced mean gradient is the single run's; a
    missing all-reduce (or a sum instead of the mean) changes the second loss."""
    equivalence.launch("pytorch", tmp_path / "ddp", scale="1x2", strategy="ddp", steps=STEPS)
    for rank in (0, 1):
        equivalence.assert_same_trajectory(equivalence.losses(tmp_path / f"ddp/rank{rank}.steps.jsonl"), single_losses)
