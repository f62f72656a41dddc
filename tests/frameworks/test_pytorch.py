"""PyTorch: DDP against the single-device step (the runner in its own environment,
.venvs/pytorch; tests/test_pytorch_runner.py has the rest, tests/frameworks/test_bert.py its
BERT)."""

import pytest

from tests.conftest import framework_python
from tests.frameworks import equivalence

pytestmark = pytest.mark.skipif(not framework_python("pytorch").exists(), reason="the pytorch environment is not built")


def test_ddp_reproduces_the_single_device_losses(tmp_path):
    """Two 1-thread DDP ranks on copies of the batch: the all-reduced mean gradient is the
    single run's; a missing all-reduce (or a sum instead of the mean) changes the first update."""
    single = equivalence.reference("pytorch", tmp_path / "single")
    for losses in equivalence.multi_device("pytorch", tmp_path / "ddp", "ddp"):
        equivalence.assert_equivalent(losses, single)
