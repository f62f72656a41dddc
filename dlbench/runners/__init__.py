"""Framework registry: every module in this package except `base` is a framework.

Adding a framework (PaddlePaddle, JAX, ...) is adding one module here (and its lock in
envs/). Importing a framework module must not import the framework itself.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

_NOT_FRAMEWORKS = {"base"}


def framework_names() -> list[str]:
    return sorted(
        m.name for m in pkgutil.iter_modules(__path__) if m.name not in _NOT_FRAMEWORKS and not m.name.startswith("_")
    )


def framework_module(name: str) -> ModuleType:
    if name not in framework_names():
        raise KeyError(f"unknown framework {name!r}; known: {framework_names()}")
    return importlib.import_module(f"{__name__}.{name}")


def capabilities(name: str) -> dict:
    """What a framework offers, read without importing the framework."""
    module = framework_module(name)
    return {
        "models": tuple(module.MODELS),
        "unavailable": dict(getattr(module, "UNAVAILABLE", {})),
        "strategies": tuple(module.STRATEGIES),
        "precisions": tuple(module.PRECISIONS),
        # Input pipelines the runner has; a runner without a real-data pipeline keeps
        # real-data cells in the grid as unavailable rather than timing synthetic data.
        "data": tuple(getattr(module, "DATA", ("synthetic",))),
        # Strategies whose one process per node drives all the node's devices
        # (MirroredStrategy, MXNet's device/nccl kvstores); the rest run a process per device.
        "process_per_node": tuple(getattr(module, "PROCESS_PER_NODE_STRATEGIES", ())),
    }


def processes_per_node(framework: str, strategy: str, devices_per_node: int) -> int:
    """How many rank processes a run starts on each node."""
    return 1 if strategy in capabilities(framework)["process_per_node"] else devices_per_node
