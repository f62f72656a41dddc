"""Strategies are bound to their classes on the classes (dlbench.runners.plugin.StrategyClasses):
every strategy a framework declares, and `single`, has exactly one class, and nothing else does."""

import importlib

import pytest

from dlbench.runners import capabilities

STRATEGY_MODULES = {
    "pytorch": ["dlbench.runners.pytorch.strategies", "dlbench.runners.pytorch.pipeline_parallel"],
    "jax": ["dlbench.runners.jax.strategies"],
    "mxnet": ["dlbench.runners.mxnet.strategies"],
    "tensorflow": ["dlbench.runners.tensorflow.strategies", "dlbench.runners.tensorflow.parameter_server"],
}


@pytest.mark.parametrize("framework", sorted(STRATEGY_MODULES))
def test_every_declared_strategy_is_bound_to_one_class(framework):
    modules = [importlib.import_module(m) for m in STRATEGY_MODULES[framework]]
    bound = modules[0].STRATEGIES
    declared = {"single", *capabilities(framework).strategy_names}
    assert set(bound.names) == declared
    with pytest.raises(ValueError, match=f"{framework}: strategy 'nope' has no class"):
        bound("nope")
