"""The runner interface: one framework is one module behind it. Stdlib only.

A framework module `dlbench/runners/<name>.py` (or package `<name>/__init__.py`, or a module in a
DLBENCH_FRAMEWORK_PATH directory) defines, without importing its framework (the analysis
environment imports it to validate config and plan the runs):

    CAPABILITIES  a `dlbench.runners.plugin.Capabilities`: models, precisions, data kinds and
                  dataset format, strategies with their process layouts (docs/plugins.md)
    Runner        a subclass of `Runner` below
    WORKLOADS     a `Workloads` registry below: one `Workload` class per model kind it trains
                  (its `CAPABILITIES.models` is `WORKLOADS.models`); the runner drives the class
                  `WORKLOADS(model)` names and never asks the model's kind itself

The timing loop, warm-up/measure window, progress output, error classification and
step-log writing live once, in `dlbench.launch.worker`; a Runner only builds and steps.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import NamedTuple

from dlbench.coords import NO_ACCUMULATION, NO_CHECKPOINTING, RunCoords
from dlbench.model_kinds import KINDS
from dlbench.models import CATALOGUE, kind_of
from dlbench.runners import capabilities
from dlbench.runners.profilers import PROFILERS


@dataclass(frozen=True)
class Distributed:
    """Where this process sits in the job (filled by the launcher from Slurm or local spawn)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    node: str = "localhost"
    # Extra addresses some strategies need (e.g. MXNet's parameter server), by role.
    endpoints: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RunSpec:
    coords: RunCoords
    batch: int  # resolved per-device batch (config may say "max")
    image_size: int
    seq_len: int
    threads: int  # intra-op threads for this process (CPU stand-in for one device)
    device: str  # "cpu" here, "cuda" on a GPU cluster
    # Devices this process drives: 1 for one-process-per-device strategies (DDP, Horovod,
    # multi-worker), G for single-process multi-device ones (TF MirroredStrategy, MXNet
    # kvstore device/nccl), where the step's samples are batch × local_devices.
    local_devices: int = 1
    compile: bool = False
    seed: int = 0
    # Real data (coords.data == "real"): the framework's converted dataset
    # (dlbench.planning.datasets.dataset_path) and the input pipeline's worker processes/threads,
    # from the rank's CPU allocation (launcher).
    data_dir: str = ""
    data_workers: int = 1
    dist: Distributed = field(default_factory=Distributed)
    # The framework's declared options (Capabilities.options), every one with its value.
    options: dict = field(default_factory=dict)

    def __post_init__(self):
        # Sizes come resolved from planning (dlbench.planning.grid.planned_sizes): runners read
        # them as given, and a size the model trains at is never 0.
        needed = kind_of(self.coords.model).size_field
        if getattr(self, needed) <= 0:
            raise ValueError(
                f"{needed} {getattr(self, needed)} for {self.coords.model}: give the size it trains at "
                "(planning resolves the model's default: dlbench.planning.grid.planned_sizes)"
            )
        # Every declared option has its value: the request's, else the declaration's default.
        object.__setattr__(self, "options", capabilities(self.coords.framework).option_values(self.options))

    def as_dict(self) -> dict:
        return asdict(self)


class Runner:
    """Base class; framework modules override the methods below."""

    def __init__(self, spec: RunSpec):
        self.spec = spec

    def import_framework(self) -> None:
        """Import the framework's modules (before the memory cap is applied)."""

    def build(self) -> None:
        """Initialise the strategy, create model, optimizer and the on-device synthetic batch
        or the real-data input pipeline."""
        raise NotImplementedError

    def next_batch(self):
        """The next input batch (real data): timed apart from the step as its data wait.

        Synthetic-data runners keep the batch on the device and return None here."""
        return None

    def step(self, batch=None):
        """One training step on `batch` (None: the synthetic on-device batch).

        Returns a loss handle; must not force a host sync. The worker keeps every step's
        handle until the run ends: a handle must not hold its step's autograd graph (detach
        it), or each kept step's activations stay allocated (docs/frameworks/paddle.md)."""
        raise NotImplementedError

    def sync(self) -> None:
        """Block until all queued device work has finished."""

    def step_events(self, steps: int):
        """Device events that time `steps` steps so that the timed loop syncs only at the
        window's ends (dlbench.launch.worker, docs/gpu.md): an object with mark() (record an event)
        and seconds() (between consecutive marks, after a sync). None: per-step sync().
        PyTorch's are CUDA events (runners/pytorch/clock.py), JAX's the ready times of each
        step's loss read one step late (runners/jax/clock.py)."""
        return None

    def timing(self) -> dict:
        """The step log header's clock and sync: what `step_events` will do."""
        return {"clock": "time.perf_counter", "sync": "step"}

    def loss_value(self, handle) -> float:
        """Turn a loss handle into a float (called after the timed loop)."""
        return float(handle)

    def step_details(self) -> list[dict] | None:
        """Per step, fields the step record adds (a pipeline's `bubble`), read after the timed
        loop; None: none."""
        return None

    def device_memory(self) -> dict | None:
        """The run's peak device memory, read after the timed loop for the footer:
        {peak_bytes, limit_bytes, method}; None where the device reports none (a CPU)."""
        return None

    def describe(self) -> dict:
        """Versions, device, parameter count and training FLOPs per sample where known."""
        return {}

    def profiler(self, out_dir: str):
        """The framework's profiler for a profiled run (its plug-in's `profiler`), writing
        below `out_dir`; None where the plug-in declares none."""
        name = capabilities(self.spec.coords.framework).profiler
        return PROFILERS[name](out_dir, self.spec.device == "cuda") if name else None

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, MemoryError)

    def close(self) -> None:
        """Tear down process groups etc."""


class TrainingOptions(NamedTuple):
    activation_checkpointing: str  # one of dlbench.coords.ACTIVATION_CHECKPOINTING
    grad_accum: int  # micro-batches per optimizer step


def run_training_options(coords) -> TrainingOptions:
    """A run's training options (checked where its coordinates are made, dlbench.coords); a
    coordinates object without them (a benchmark's stand-in) trains plainly."""
    return TrainingOptions(
        str(getattr(coords, "activation_checkpointing", NO_CHECKPOINTING)),
        int(getattr(coords, "grad_accum", NO_ACCUMULATION)),
    )


class Workload:
    """One model kind's training in one framework, declared once (as torchtitan's `TrainSpec`
    declares a model family's model, parallelisation, optimizer, data and loss): its subclasses
    build the model, the optimizer, the batch source and the loss, and say what the header
    records (`describe`). The methods beyond these are the framework's own: its runner calls
    them on whichever class the run's model selects. Declaring one imports no framework."""

    kind: str = ""  # the name of the model kind it trains (dlbench.model_kinds)
    models: tuple[str, ...] = ()  # the catalogue's models of that kind it builds
    # The training options it implements (docs/frameworks/llm.md, "Activation checkpointing
    # and gradient accumulation"), read by planning without importing the framework
    # (dlbench.runners.training_option_unavailable): the modes of dlbench.coords'
    # ACTIVATION_CHECKPOINTING it applies, and whether one step may accumulate the gradients
    # of several micro-batches (grad_accum > 1) before its one optimizer update.
    activation_checkpointing: tuple[str, ...] = ("none",)
    grad_accum: bool = False
    # The precisions it trains in, of its framework's (dlbench.runners.precision_problem): fp8
    # needs a workload that converts its model's linear layers.
    precisions: tuple[str, ...] = ("fp32", "amp")

    def describe(self) -> dict:
        """What the step log's header records about this workload, beside the runner's facts."""
        return {}


class Workloads:
    """A framework's workload classes, each registered once by `@WORKLOADS.registers` on the
    class and keyed by its model kind; the framework's model list is theirs (`models`)."""

    def __init__(self, framework: str):
        self.framework = framework
        self._classes: dict[str, type] = {}

    def registers(self, cls: type) -> type:
        owner = f"{self.framework}: workload {cls.__name__}"
        if cls.kind not in KINDS:
            raise ValueError(f"{owner}: kind {cls.kind!r} is not a model kind ({sorted(KINDS)})")
        if cls.kind in self._classes:
            raise ValueError(f"{owner}: kind {cls.kind!r} is already {self._classes[cls.kind].__name__}'s")
        wrong = [m for m in cls.models if m not in CATALOGUE or kind_of(m) is not KINDS[cls.kind]]
        if not cls.models or wrong:
            raise ValueError(f"{owner}: expected catalogue models of kind {cls.kind!r}, got {wrong or 'none'}")
        self._classes[cls.kind] = cls
        return cls

    @property
    def models(self) -> tuple[str, ...]:
        """Every registered workload's models, in registration order."""
        return tuple(m for cls in self._classes.values() for m in cls.models)

    def __call__(self, model: str) -> type:
        """The workload class that trains `model`; a model none registers is a clear failure."""
        cls = self._classes.get(kind_of(model).name) if model in CATALOGUE else None
        if cls is None or model not in cls.models:
            raise ValueError(f"{self.framework}: no workload trains {model!r} (registered: {', '.join(self.models)})")
        return cls


def status_kb(field: str) -> int | None:
    """A kB figure of /proc/self/status (VmRSS, VmHWM, VmSize...); None where there is none."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def address_space_capped() -> bool:
    """Whether this process runs under an address-space limit (the worker's memory cap)."""
    import resource

    return resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY
