"""Framework registry: every module or package in this package except `base` and the
`_`-prefixed helpers is a framework.

Adding a framework (PaddlePaddle, JAX, ...) is adding one module or package here (and its lock
in envs/). Importing a framework module must not import the framework itself.

Process layout of a run: `layout()` below is the one definition of how many processes a
strategy starts per node, how many devices each drives and which of them write step logs;
the local launcher, the Slurm launcher (and the job resources) and the aggregator all ask it.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from types import ModuleType

from dlbench.coords import Scale

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
        # Strategies whose only step log comes from one coordinator (rank 0), which drives
        # every device of the run through helper processes (TF ParameterServerStrategy);
        # one task per node.
        "coordinator": tuple(getattr(module, "COORDINATOR_STRATEGIES", ())),
        # Strategies that run on one node only (single-process multi-device).
        "single_node": tuple(getattr(module, "SINGLE_NODE_STRATEGIES", ())),
        # {strategy: reason}: strategies that need CUDA devices (NCCL), unavailable on a CPU.
        "cuda_only": dict(getattr(module, "CUDA_ONLY_STRATEGIES", {})),
        # {strategy: reason}: strategies whose code path exists but that cannot run with the
        # framework's environment (e.g. a package that does not build); cells stay in the grid.
        "strategy_unavailable": dict(getattr(module, "UNAVAILABLE_STRATEGIES", {})),
    }


@dataclass(frozen=True)
class Layout:
    """How one run of a strategy at a scale is laid out in processes.

    tasks_per_node  processes the launcher starts on each node (srun --ntasks-per-node);
                    rank r runs on node r // tasks_per_node (block placement)
    local_devices   devices whose samples one step-log writer counts per step
                    (RunSpec.local_devices: samples per step = batch × local_devices)
    step_logs       ranks 0 .. step_logs-1 write `rank<k>.steps.jsonl`; any other rank is a
                    helper (it serves its node's devices for a coordinator and writes no log)
    """

    tasks_per_node: int
    local_devices: int
    step_logs: int


def layout(framework: str, strategy: str, scale: Scale | str) -> Layout:
    """The process layout of `strategy` at `scale` (the single-device strategy: one process)."""
    scale = Scale.parse(scale) if isinstance(scale, str) else scale
    caps = capabilities(framework)
    if strategy in caps["coordinator"]:
        # One task per node starts that node's device servers; rank 0 also coordinates and
        # logs every device's samples.
        return Layout(tasks_per_node=1, local_devices=scale.devices, step_logs=1)
    if strategy in caps["process_per_node"]:
        return Layout(tasks_per_node=1, local_devices=scale.devices_per_node, step_logs=scale.nodes)
    return Layout(tasks_per_node=scale.devices_per_node, local_devices=1, step_logs=scale.devices)


def processes_per_node(framework: str, strategy: str, devices_per_node: int) -> int:
    """How many processes (Slurm tasks) a run starts on each node."""
    return layout(framework, strategy, Scale(1, devices_per_node)).tasks_per_node


def strategy_unavailable(framework: str, strategy: str, scale: Scale | str, device: str) -> str | None:
    """Why `strategy` cannot run at `scale` on `device` (None: it can). The grid keeps such
    cells as unavailable with this reason; read without importing the framework."""
    scale = Scale.parse(scale) if isinstance(scale, str) else scale
    caps = capabilities(framework)
    if strategy in caps["strategy_unavailable"]:
        return caps["strategy_unavailable"][strategy]
    if strategy in caps["cuda_only"] and device != "cuda":
        return f"{strategy} runs on CUDA devices only: {caps['cuda_only'][strategy]}"
    if strategy in caps["single_node"] and scale.nodes > 1:
        return f"{strategy} drives the devices of one node from one process: it cannot span {scale.nodes} nodes"
    return None
