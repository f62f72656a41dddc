"""Loss equivalence of the strategies without a test of their own (tests/frameworks/
equivalence.py lists those with one): each skips naming why it cannot run here (Horovod not
installed, NCCL without CUDA devices); one that can run (PaddlePaddle's collective) is
compared with the single-device run on two copies of its batch, as tests/frameworks/
equivalence.py says."""

import pytest

from dlbench.runners import capabilities, framework_names, strategy_unavailable
from tests.conftest import framework_python
from tests.frameworks import equivalence

OTHERS = [
    (framework, strategy)
    for framework in framework_names()
    for strategy in capabilities(framework).strategy_names
    if (framework, strategy) not in equivalence.TESTS
]


@pytest.mark.parametrize("framework, strategy", OTHERS)
def test_strategy_reproduces_the_single_device_losses(tmp_path, framework, strategy):
    reason = strategy_unavailable(framework, strategy, "1x2", "cpu")
    if reason:
        pytest.skip(f"{framework} {strategy} cannot run here: {reason}")
    if not framework_python(framework).exists():
        pytest.skip(f"the {framework} environment is not built")
    single = equivalence.reference(framework, tmp_path / "single")
    for losses in equivalence.multi_device(framework, tmp_path / "multi", strategy):
        equivalence.assert_equivalent(losses, single)
