"""The typed plug-in: what one framework module declares, as `CAPABILITIES = Capabilities(...)`.

Everything outside the framework's own package (grid, launcher, jobs, data rules, tables,
report, figures) reads this object only; docs/plugins.md lists the fields. Stdlib only, and
importing it imports no framework. A field that does not exist is a TypeError (dataclass
keyword arguments), a wrong value a ValueError naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from types import MappingProxyType

from dlbench.coords import PRECISIONS, SAFE_NAME, SINGLE_DEVICE, Scale
from dlbench.devices import precision_lacking
from dlbench.model_kinds import KINDS
from dlbench.models import CATALOGUE, kind_of
from dlbench.runners.profilers import PROFILERS

DATA_KINDS = ("synthetic", "real")
# Dataset formats dlbench.planning.datasets knows how to lay out (and data.smk to convert to).
DATASET_FORMATS = ("tfrecord", "imagefolder", "recordio", "bert")
# run.device values; the CPU is every framework's own environment (`env`).
DEVICES = ("cpu", "cuda")
# An environment's name: envs/<name>.txt, .venvs/<name> (a device's: <framework>-<device>).
ENV_NAME = r"[a-z][a-z0-9_]*(-[a-z0-9]+)?"
_COLOUR = r"#[0-9a-fA-F]{6}"
# What a pipeline-parallel strategy's ranks are (Strategy.pipeline): none, every device, a node.
PIPELINE_SPANS = ("", "devices", "nodes")


class ProcessLayout(Enum):
    """How a strategy's run is laid out in processes (dlbench.runners.layout)."""

    PER_DEVICE = "per_device"  # one process per device, each writes a step log (DDP, Horovod)
    PER_NODE = "per_node"  # one process drives its node's devices (MirroredStrategy, kvstore device)
    COORDINATOR = "coordinator"  # rank 0 drives every device through per-node helpers (TF PS)


@dataclass(frozen=True)
class Layout:
    """One run's processes.

    tasks_per_node  processes the launcher starts on each node (srun --ntasks-per-node);
                    rank r runs on node r // tasks_per_node (block placement)
    tasks           processes in all (nodes × tasks_per_node)
    local_devices   devices whose samples one step-log writer counts per step
    step_logs       ranks 0 .. step_logs-1 write `rank<k>.steps.jsonl`; the others are helpers
    """

    tasks_per_node: int
    tasks: int
    local_devices: int
    step_logs: int

    @classmethod
    def of(cls, kind: ProcessLayout, scale: Scale) -> Layout:
        if kind is ProcessLayout.COORDINATOR:
            return cls(1, scale.nodes, scale.devices, 1)
        if kind is ProcessLayout.PER_NODE:
            return cls(1, scale.nodes, scale.devices_per_node, scale.nodes)
        return cls(scale.devices_per_node, scale.devices, 1, scale.devices)


def _fail(owner: str, name: str, message: str):
    raise ValueError(f"{owner}.{name}: {message}")


def _names(owner: str, name: str, values) -> tuple:
    """A tuple of safe names (a list is accepted), else a ValueError naming the field."""
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        _fail(owner, name, f"expected a tuple of names, got {values!r}")
    for v in values:
        if not re.fullmatch(SAFE_NAME, v):
            _fail(owner, name, f"{v!r} is not a name ({SAFE_NAME})")
    return tuple(values)


def _reasons(owner: str, name: str, values) -> Mapping[str, str]:
    if not isinstance(values, Mapping) or not all(isinstance(v, str) and v for v in values.values()):
        _fail(owner, name, f"expected {{name: reason}}, got {values!r}")
    return MappingProxyType(dict(values))


@dataclass(frozen=True)
class Strategy:
    """A multi-device strategy (the single-device strategy is implicit)."""

    name: str
    description: str  # one line for people (the report's method section)
    layout: ProcessLayout = ProcessLayout.PER_DEVICE
    single_node: bool = False  # drives one node's devices only
    cuda_only: str = ""  # why it needs CUDA devices (empty: it runs on CPUs too)
    unavailable: str = ""  # why it cannot run with this framework's environment (empty: it can)
    # Splits each LLM block over a node's devices (tensor parallel size = devices per node):
    # LLMs only, checked at planning time against the model's heads (dlbench.llm).
    tensor_parallel: bool = False
    # Shards the parameters, gradients and optimizer state over the data-parallel ranks (FSDP,
    # ZeRO-3): what a rank holds, for planning's memory estimate (dlbench.planning.fit).
    shards_state: bool = False
    # Pipeline parallelism (LLMs): "devices", every device a pipeline rank (pp); "nodes", a
    # pipeline rank per node and the state sharded over a node's devices (fsdp_pp); "" none.
    # Its cells take the grid's pp_schedule and pp_microbatches (dlbench.pipelining).
    pipeline: str = ""
    # The model kinds (dlbench.model_kinds' names) it trains; empty: every kind. A
    # model of another kind is an N/A cell with `kind_reason`.
    model_kinds: tuple[str, ...] = ()
    kind_reason: str = ""

    def __post_init__(self) -> None:
        owner = f"Strategy({self.name!r})"
        object.__setattr__(self, "model_kinds", _names(owner, "model_kinds", self.model_kinds))
        if not set(self.model_kinds) <= set(KINDS):
            _fail(owner, "model_kinds", f"expected model kinds, some of {sorted(KINDS)}")
        if bool(self.model_kinds) != bool(self.kind_reason):
            _fail(owner, "kind_reason", "expected a reason exactly when model_kinds is set")
        _names(owner, "name", (self.name,))
        if self.name == SINGLE_DEVICE:
            _fail(owner, "name", f"{SINGLE_DEVICE!r} is implicit")
        if not isinstance(self.layout, ProcessLayout):
            _fail(owner, "layout", f"expected a ProcessLayout, got {self.layout!r}")
        for name in ("description", "cuda_only", "unavailable", "kind_reason"):
            if not isinstance(getattr(self, name), str):
                _fail(owner, name, "expected text")
        if not self.description or "\n" in self.description:
            _fail(owner, "description", "expected one line")
        for name in ("single_node", "tensor_parallel", "shards_state"):
            if not isinstance(getattr(self, name), bool):
                _fail(owner, name, "expected True or False")
        if self.pipeline not in PIPELINE_SPANS:
            _fail(owner, "pipeline", f"expected one of {PIPELINE_SPANS}")

    def pipeline_ranks(self, scale: Scale) -> int:
        """The ranks one pipeline spans at `scale` (0: no pipeline)."""
        return {"": 0, "devices": scale.devices, "nodes": scale.nodes}[self.pipeline]

    def why_not(self, scale: Scale, device: str) -> str | None:
        """Why this strategy cannot run at `scale` on `device` (None: it can)."""
        if self.unavailable:
            return self.unavailable
        if self.cuda_only and device != "cuda":
            return f"{self.name} runs on CUDA devices only: {self.cuda_only}"
        if self.single_node and scale.nodes > 1:
            return f"{self.name} drives the devices of one node from one process: it cannot span {scale.nodes} nodes"
        return None

    def model_unavailable(self, model: str) -> str | None:
        """Why this strategy does not train `model` (None: it does)."""
        kind = kind_of(model).name
        if self.model_kinds and kind not in self.model_kinds:
            return (
                f"{self.name} trains {'/'.join(self.model_kinds)} models only ({self.kind_reason}): {model} is {kind}"
            )
        return None


OPTION_VALUE = r"[A-Za-z0-9_.-]+"  # travels on the launcher's command line unquoted


@dataclass(frozen=True)
class Option:
    """A framework's own knob, declared with its plug-in (as Ramble's `workload_variable(name,
    default, description)`): set in the config under `framework_options.<framework>.<name>`,
    checked at planning time, passed to the ranks in the launch request (`--options`), recorded
    in the header's `framework.options` and the report's method section."""

    name: str
    default: bool | int | str
    description: str  # one line for people
    choices: tuple = ()  # allowed values (empty: any of the default's type)

    def problem(self, value) -> str | None:
        """None if `value` may be set, else why not."""
        kind = type(self.default)
        if type(value) is not kind:  # bool is an int: compare exact types
            return f"{value!r}: expected a value of type {kind.__name__}"
        if self.choices and value not in self.choices:
            return f"{value!r} is not one of {', '.join(map(str, self.choices))}"
        if kind is str and not re.fullmatch(OPTION_VALUE, value):
            return f"{value!r} is not allowed (must match {OPTION_VALUE})"
        return None

    def parse(self, text: str):
        """The value of its command-line text (Option.text's inverse)."""
        kind = type(self.default)
        return text == "true" if kind is bool else kind(text)

    @staticmethod
    def text(value) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)


class StrategyClasses:
    """A framework's strategy classes, each bound to the names it implements by `@binds(...)`
    on the class itself (as ReFrame's `@register_launcher("srun")` binds a launcher), so no
    runner keeps a name table or an if-chain. `single` is the single-device strategy's name."""

    def __init__(self, framework: str):
        self.framework = framework
        self._classes: dict[str, type] = {}

    def binds(self, *names: str):
        def bind(cls: type) -> type:
            for name in names:
                if name in self._classes:
                    raise ValueError(f"{self.framework}: strategy {name!r} is bound twice")
                self._classes[name] = cls
            return cls

        return bind

    def __call__(self, name: str) -> type:
        """The class of strategy `name`; a name no class binds is a clear failure."""
        if name not in self._classes:
            raise ValueError(f"{self.framework}: strategy {name!r} has no class (bound: {', '.join(self._classes)})")
        return self._classes[name]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._classes)


@dataclass(frozen=True)
class Capabilities:
    """What one framework offers, declared once in its module (docs/plugins.md)."""

    label: str  # its name for people (figure legends, report rows)
    colour: str  # its colour in every figure, #rrggbb
    models: tuple[str, ...]  # keys of dlbench.models.CATALOGUE it builds
    precisions: tuple[str, ...]
    strategies: tuple[Strategy, ...] = ()
    unavailable_models: Mapping[str, str] = field(default_factory=dict)  # {model: reason}
    data: tuple[str, ...] = ("synthetic",)  # input kinds it has pipelines for
    # Model kinds (dlbench.model_kinds' names) whose real-data pipeline it lacks, with
    # why, although `data` has "real" for its other kinds: N/A cells at planning time.
    real_data_unavailable: Mapping[str, str] = field(default_factory=dict)
    image_format: str = ""  # the converted image dataset its real-data pipeline reads
    converts: tuple[str, ...] = ()  # dataset formats whose conversion runs in its environment
    env: str = ""  # the environment its runs use (envs/<env>.txt, .venvs/<env>); empty: its own
    # Per device other than the CPU: the environment of its runs there ({"cuda": "pytorch-cuda"}),
    # or why it has none (an N/A cell at planning time, never a failed run).
    device_envs: Mapping[str, str] = field(default_factory=dict)
    unavailable_devices: Mapping[str, str] = field(default_factory=dict)  # {device: reason}
    # Precisions that run on CUDA devices only, with why ({"amp": "..."}): N/A cells elsewhere.
    cuda_only_precisions: Mapping[str, str] = field(default_factory=dict)
    # Precisions it can emulate, on a device without their matmuls too (dlbench.devices'
    # PRECISION_NEEDS), each with the boolean option that asks for it ({"fp8": "fp8_emulation"}):
    # a correctness path, not a speed figure. Asked, its cells emulate on every device; not
    # asked, they are N/A where the device lacks the matmuls.
    emulated_precisions: Mapping[str, str] = field(default_factory=dict)
    options: tuple[Option, ...] = ()  # its own knobs (config: framework_options.<framework>)
    # Its module has allreduce_times(dist, device, sizes, warmup, iterations, threads): it can
    # measure the communication prescreen (dlbench.launch.prescreen; docs/slurm.md).
    allreduce: bool = False
    # The profiler a profiled run is traced with (dlbench.runners.profilers; config `profile`);
    # empty: its profiled cells say that it has none.
    profiler: str = ""

    def __post_init__(self) -> None:
        owner = "Capabilities"
        if self.profiler and self.profiler not in PROFILERS:
            _fail(owner, "profiler", f"{self.profiler!r} is none of {sorted(PROFILERS)}")
        for name in ("label", "colour", "image_format", "env"):
            if not isinstance(getattr(self, name), str):
                _fail(owner, name, "expected text")
        if not isinstance(self.allreduce, bool):
            _fail(owner, "allreduce", "expected true or false")
        if not self.label:
            _fail(owner, "label", "expected a name")
        if not re.fullmatch(_COLOUR, self.colour):
            _fail(owner, "colour", f"{self.colour!r} is not #rrggbb")
        for name in ("models", "precisions", "data", "converts"):
            object.__setattr__(self, name, _names(owner, name, getattr(self, name)))
        object.__setattr__(self, "unavailable_models", _reasons(owner, "unavailable_models", self.unavailable_models))
        object.__setattr__(self, "device_envs", _reasons(owner, "device_envs", self.device_envs))
        object.__setattr__(
            self, "real_data_unavailable", _reasons(owner, "real_data_unavailable", self.real_data_unavailable)
        )
        object.__setattr__(
            self, "unavailable_devices", _reasons(owner, "unavailable_devices", self.unavailable_devices)
        )
        self._check_devices(owner)
        object.__setattr__(
            self, "cuda_only_precisions", _reasons(owner, "cuda_only_precisions", self.cuda_only_precisions)
        )
        if not set(self.cuda_only_precisions) <= set(self.precisions):
            _fail(owner, "cuda_only_precisions", f"expected some of precisions {self.precisions}")
        if not set(self.precisions) <= set(PRECISIONS):
            _fail(owner, "precisions", f"expected some of {PRECISIONS}, got {self.precisions}")
        object.__setattr__(self, "strategies", tuple(self.strategies))
        object.__setattr__(self, "options", tuple(self.options))
        self._check_names(owner)
        if not all(isinstance(o, Option) and o.problem(o.default) is None for o in self.options):
            _fail(owner, "options", "expected Option records whose defaults they allow")
        self._check_emulations(owner)

    def option_values(self, settings: Mapping | None = None) -> dict:
        """Every declared option's value: `settings`' (already checked), else its default."""
        return {o.name: (settings or {}).get(o.name, o.default) for o in self.options}

    def options_problem(self, settings: Mapping) -> str | None:
        """None if `settings` ({name: value}) names declared options with allowed values, else
        `<name>: <why>` for the first that does not."""
        declared = {o.name: o for o in self.options}
        for name, value in settings.items():
            if name not in declared:
                return f"{name}: unknown option; declared: {', '.join(declared) or 'none'}"
            problem = declared[name].problem(value)
            if problem:
                return f"{name}: {problem}"
        return None

    @staticmethod
    def options_text(settings: Mapping | None = None) -> str:
        """The options set in `settings` as the launch request carries them: `name=value,...`
        (a default left out stays out of the command line; parse_options fills it in)."""
        return ",".join(f"{k}={Option.text(v)}" for k, v in sorted((settings or {}).items()))

    def parse_options(self, text: str) -> dict:
        """`options_text`'s inverse, with defaults for what it leaves out."""
        declared = {o.name: o for o in self.options}
        given = dict(item.split("=", 1) for item in text.split(",") if item)
        unknown = set(given) - set(declared)
        if unknown:
            raise ValueError(f"unknown option(s) {sorted(unknown)}; declared: {sorted(declared)}")
        return self.option_values({k: declared[k].parse(v) for k, v in given.items()})

    def _check_names(self, owner: str) -> None:
        for model in (*self.models, *self.unavailable_models):
            if model not in CATALOGUE:
                _fail(owner, "models", f"unknown model {model!r}; known: {sorted(CATALOGUE)}")
        if set(self.models) & set(self.unavailable_models):
            _fail(owner, "unavailable_models", "a model cannot be both built and unavailable")
        if not set(self.data) <= set(DATA_KINDS):
            _fail(owner, "data", f"expected some of {DATA_KINDS}, got {self.data}")
        for fmt in (*self.converts, *([self.image_format] if self.image_format else [])):
            if fmt not in DATASET_FORMATS:
                _fail(owner, "image_format/converts", f"unknown dataset format {fmt!r}; known: {DATASET_FORMATS}")
        if not set(self.real_data_unavailable) <= set(KINDS):
            _fail(owner, "real_data_unavailable", f"expected model kinds, some of {sorted(KINDS)}")
        kinds = {kind_of(m) for m in self.models}
        images = any(k.framework_images and k.name not in self.real_data_unavailable for k in kinds)
        if "real" in self.data and images and not self.image_format:
            _fail(owner, "image_format", "real data with image models needs the format its pipeline reads")
        if not all(isinstance(s, Strategy) for s in self.strategies):
            _fail(owner, "strategies", "expected Strategy records")
        names = [s.name for s in self.strategies]
        if len(set(names)) != len(names):
            _fail(owner, "strategies", f"a strategy is declared twice: {names}")

    def _check_devices(self, owner: str) -> None:
        for name in ("device_envs", "unavailable_devices"):
            for device in getattr(self, name):
                if device not in DEVICES[1:]:
                    _fail(owner, name, f"unknown device {device!r}; known: {list(DEVICES[1:])}")
        for env in self.device_envs.values():
            if not re.fullmatch(ENV_NAME, env):
                _fail(owner, "device_envs", f"{env!r} is not an environment name ({ENV_NAME})")
        if set(self.device_envs) & set(self.unavailable_devices):
            _fail(owner, "unavailable_devices", "a device cannot have both an environment and a reason")

    def device_unavailable(self, device: str) -> str | None:
        """Why this framework cannot run on `device` (None: it has an environment there)."""
        if device == DEVICES[0] or device in self.device_envs:
            return None
        return self.unavailable_devices.get(device, f"{self.label} declares no {device} environment")

    def data_unavailable(self, data: str, model: str) -> str | None:
        """Why this framework has no `data` input pipeline for `model` (None: it has one)."""
        kind = kind_of(model).name
        if data not in self.data:
            return f"the {self.label} runner has no {data}-data input pipeline"
        if data == "real" and kind in self.real_data_unavailable:
            return self.real_data_unavailable[kind]
        return None

    def _check_emulations(self, owner: str) -> None:
        object.__setattr__(
            self, "emulated_precisions", _reasons(owner, "emulated_precisions", self.emulated_precisions)
        )
        booleans = {o.name for o in self.options if isinstance(o.default, bool)}
        for precision, option in self.emulated_precisions.items():
            if precision not in self.precisions or option not in booleans:
                got = f"{precision}: {option}"
                _fail(owner, "emulated_precisions", f"expected {{precision: a boolean option}}, got {got}")

    def precision_unavailable(
        self, precision: str, device: str, gpu_type: str = "", options: Mapping | None = None
    ) -> str | None:
        """Why `precision` cannot run on `device` (None: it can): a precision for CUDA only, or
        one whose matmuls the device lacks (run.gpu_type names the GPU) unless `options` (the
        config's framework_options for this framework) ask for its emulation."""
        if device != "cuda" and precision in self.cuda_only_precisions:
            return f"{precision} runs on CUDA devices only: {self.cuda_only_precisions[precision]}"
        lacking = precision_lacking(precision, device, gpu_type)
        if not lacking or self.emulates(precision, options):
            return None
        if option := self.emulated_precisions.get(precision):
            how = f"{self.label}'s option {option}: true (framework_options) emulates it: a correctness path"
            return f"{lacking} ({how})"
        return lacking

    def emulates(self, precision: str, options: Mapping | None = None) -> bool:
        """Whether its `precision` cells run in its emulation (`options` ask for it: then on
        every device, a device with the matmuls too)."""
        option = self.emulated_precisions.get(precision)
        return bool(option and self.option_values(options)[option])

    @property
    def strategy_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.strategies)

    def strategy(self, name: str) -> Strategy | None:
        """The strategy record (None for the single-device strategy)."""
        if name == SINGLE_DEVICE:
            return None
        for s in self.strategies:
            if s.name == name:
                return s
        raise KeyError(f"strategy {name!r} not offered (have {list(self.strategy_names)})")


FIELDS = tuple(f.name for f in fields(Capabilities))
