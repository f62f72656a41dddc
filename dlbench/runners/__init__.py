"""Framework registry: every module or package in this package except `base`, `plugin` and the
`_`-prefixed helpers is a framework, and so is every module or package in the directories of
DLBENCH_FRAMEWORK_PATH (os.pathsep-separated; docs/plugins.md).

A framework module declares `CAPABILITIES` (a `dlbench.runners.plugin.Capabilities`) and a
`Runner` (dlbench.runners.base); importing it must not import the framework itself. Everything
outside the framework's own package asks the functions below, never the module.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import pkgutil
import sys
from types import ModuleType

from dlbench.coords import SINGLE_DEVICE, Scale
from dlbench.models import CATALOGUE, kind_of
from dlbench.runners.plugin import Capabilities, Layout, ProcessLayout, Strategy

__all__ = [
    "Capabilities",
    "Layout",
    "ProcessLayout",
    "Strategy",
    "capabilities",
    "device_unavailable",
    "env_name",
    "framework_module",
    "framework_names",
    "layout",
    "precision_problem",
    "precision_problem_and_scope",
    "processes_per_node",
    "run_layout",
    "strategy_unavailable",
    "training_option_unavailable",
]

PATH_VARIABLE = "DLBENCH_FRAMEWORK_PATH"
_NOT_FRAMEWORKS = {"base", "plugin", "profilers"}
# Modules loaded from DLBENCH_FRAMEWORK_PATH get this prefix in sys.modules.
_PLUGIN_PREFIX = "dlbench_plugins."


def _plugin_dirs() -> tuple[str, ...]:
    return tuple(d for d in os.environ.get(PATH_VARIABLE, "").split(os.pathsep) if d)


@functools.cache
def _discover(dirs: tuple[str, ...]) -> dict[str, str | None]:
    """{name: directory of a path plug-in, or None for a module of this package}."""
    found: dict[str, str | None] = {
        m.name: None for m in pkgutil.iter_modules(__path__) if m.name not in _NOT_FRAMEWORKS and m.name[0] != "_"
    }
    for directory in dirs:
        for m in pkgutil.iter_modules([directory]):
            if m.name.startswith("_"):
                continue
            if m.name in found:
                where = found[m.name] or "dlbench/runners"
                raise ValueError(f"{PATH_VARIABLE}: framework {m.name!r} in {directory} is also in {where}")
            found[m.name] = directory
    return found


def framework_names() -> list[str]:
    return sorted(_discover(_plugin_dirs()))


def framework_module(name: str) -> ModuleType:
    found = _discover(_plugin_dirs())
    if name not in found:
        raise KeyError(f"unknown framework {name!r}; known: {sorted(found)}")
    if found[name] is None:
        return importlib.import_module(f"{__name__}.{name}")
    return _load_path_plugin(name, found[name])


def _load_path_plugin(name: str, directory: str) -> ModuleType:
    full = _PLUGIN_PREFIX + name
    if full in sys.modules:
        return sys.modules[full]
    package = os.path.join(directory, name, "__init__.py")
    location = package if os.path.exists(package) else os.path.join(directory, f"{name}.py")
    search = [os.path.dirname(package)] if location == package else None
    spec = importlib.util.spec_from_file_location(full, location, submodule_search_locations=search)
    module = importlib.util.module_from_spec(spec)
    sys.modules[full] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[full]
        raise
    return module


@functools.cache
def _capabilities(name: str, dirs: tuple[str, ...]) -> Capabilities:
    module = framework_module(name)
    caps = getattr(module, "CAPABILITIES", None)
    if not isinstance(caps, Capabilities):
        raise TypeError(f"framework {name!r} ({module.__name__}): CAPABILITIES must be a Capabilities, got {caps!r}")
    return caps


def capabilities(name: str) -> Capabilities:
    """What framework `name` offers, read without importing the framework (cached)."""
    return _capabilities(name, _plugin_dirs())


def env_name(framework: str, device: str = "cpu") -> str:
    """The environment a framework's runs on `device` use: envs/<env>.txt, .venvs/<env>
    (its own on the CPU; a device without one is the grid's N/A, device_unavailable)."""
    caps = capabilities(framework)
    return caps.device_envs.get(device) or caps.env or framework


def device_unavailable(framework: str, device: str) -> str | None:
    """Why `framework` has no environment for `device` (None: it has one)."""
    return capabilities(framework).device_unavailable(device)


@functools.cache
def _process_layout(framework: str, strategy: str) -> ProcessLayout:
    """A strategy the framework does not offer (the grid refuses it; a hand-made launch may
    not) runs a process per device, whose runner fails naming it in its step log."""
    caps = capabilities(framework)
    if strategy not in caps.strategy_names:
        return ProcessLayout.PER_DEVICE
    return caps.strategy(strategy).layout


@functools.cache
def layout(framework: str, strategy: str, scale: Scale | str) -> Layout:
    """The process layout of `strategy` at `scale`: the one definition the local and Slurm
    launchers, the job resources and the aggregator ask (single device: one process)."""
    scale = Scale.parse(scale) if isinstance(scale, str) else scale
    return Layout.of(_process_layout(framework, strategy), scale)


def run_layout(coords) -> Layout:
    """The layout of one run (a RunCoords or anything with framework, strategy and scale)."""
    return layout(coords.framework, coords.strategy, coords.scale)


def processes_per_node(framework: str, strategy: str, devices_per_node: int) -> int:
    """How many processes (Slurm tasks) a run starts on each node."""
    return layout(framework, strategy, Scale(1, devices_per_node)).tasks_per_node


def strategy_unavailable(framework: str, strategy: str, scale: Scale | str, device: str) -> str | None:
    """Why `strategy` cannot run at `scale` on `device` (None: it can); the grid keeps such
    cells as unavailable with this reason."""
    if strategy == SINGLE_DEVICE:
        return None
    scale = Scale.parse(scale) if isinstance(scale, str) else scale
    return capabilities(framework).strategy(strategy).why_not(scale, device)


def training_option_unavailable(
    framework: str, model: str, activation_checkpointing: str, grad_accum: int
) -> str | None:
    """Why `framework` cannot train `model` with this activation checkpointing and this many
    micro-batches a step (None: it can), from the declarations of the workload that trains it
    (dlbench.runners.base.Workload); the grid keeps such cells as unavailable with this reason.
    The values themselves are checked once, where coordinates are made (dlbench.coords)."""
    workload = _workload_class(framework, model)
    owner = f"{framework}'s {model} workload"
    offered = getattr(workload, "activation_checkpointing", ("none",))
    if activation_checkpointing not in offered:
        mode = "" if offered == ("none",) else f"{activation_checkpointing!r} "
        return f"{owner} has no {mode}activation checkpointing (it offers: {', '.join(offered)})"
    if grad_accum > 1 and not getattr(workload, "grad_accum", False):
        return f"{owner} has no gradient accumulation (grad_accum {grad_accum}: it takes one batch a step)"
    return None


def precision_problem(framework: str, model: str, precision: str) -> str | None:
    """Why `framework` cannot train `model` in `precision` on any device (None: it can): the
    framework does not offer the precision, the model's kind cannot train in it (its
    descriptor, dlbench.model_kinds), or the framework's workload for the model does not
    (Workload.precisions). Planning stops on it, naming the combination; a device that lacks
    what a precision needs is another matter (Capabilities.precision_unavailable: an N/A cell)."""
    found = precision_problem_and_scope(framework, model, precision)
    return found[0] if found else None


def precision_problem_and_scope(framework: str, model: str, precision: str) -> tuple[str, str] | None:
    """`precision_problem`, and the cells it holds for (a grid.exclude rule's keys besides the
    precision: `framework: F`, `model: M` or both)."""
    caps = capabilities(framework)
    if precision not in caps.precisions:
        offered = ", ".join(caps.precisions)
        return f"{framework} does not offer precision {precision!r} (it offers: {offered})", f"framework: {framework}"
    kind = kind_of(model) if model in CATALOGUE else None
    if kind is not None and precision in kind.unavailable_precisions:
        why = kind.unavailable_precisions[precision]
        return f"{precision} with {model} ({kind.name} model): {why}", f"model: {model}"
    workload = _workload_class(framework, model)
    offered = getattr(workload, "precisions", caps.precisions)
    if precision not in offered:
        why = f"{framework}'s {model} workload does not train in {precision} (it offers: {', '.join(offered)})"
        return why, f"framework: {framework}, model: {model}"
    return None


def _workload_class(framework: str, model: str) -> type | None:
    """The workload class that trains `model` in `framework`; None where the framework declares
    no workloads (a plug-in may not) or none of them trains the model."""
    workloads = getattr(framework_module(framework), "WORKLOADS", None)
    try:
        return workloads(model) if workloads is not None else None
    except ValueError:
        return None
