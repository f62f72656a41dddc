"""Loss equivalence of the strategies without a test of their own (tests/frameworks/
equivalence.py lists those with one): each skips naming why it cannot run here (Horovod not
installed, NCCL without CUDA devices); one that can run (PaddlePaddle's collective) is
compared with the single-device run on two copies of its batch. AlexNet at 64 px: no batch
norm, whose backward pass at tiny sizes turns rounding into percent (docs/frameworks/
equivalence.md)."""

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
STEPS = (0, 5)


@pytest.mark.parametrize("framework, strategy", OTHERS)
def test_strategy_reproduces_the_single_device_losses(tmp_path, framework, strategy):
    reason = strategy_unavailable(framework, strategy, "1x2", "cpu")
    if reason:
        pytest.skip(f"{framework} {strategy} cannot run here: {reason}")
    if not framework_python(framework).exists():
        pytest.skip(f"the {framework} environment is not built")
    lr, model = {equivalence.LR_SCALE_ENV: "2"}, {"model": "alexnet", "image_size": 64}
    equivalence.launch(framework, tmp_path / "single", steps=STEPS, threads=1, env=lr, **model)
    single = equivalence.losses(tmp_path / "single/rank0.steps.jsonl")
    equivalence.launch(framework, tmp_path / "multi", scale="1x2", strategy=strategy, steps=STEPS, **model)
    for log in sorted((tmp_path / "multi").glob("rank*.steps.jsonl")):
        equivalence.assert_same_trajectory(equivalence.losses(log), single)
