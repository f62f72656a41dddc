"""The runner interface: one framework is one module behind it. Stdlib only.

A framework module `dlbench/runners/<name>.py` (or package `<name>/__init__.py`, or a module in a
DLBENCH_FRAMEWORK_PATH directory) defines, without importing its framework (the analysis
environment imports it to validate config and plan the runs):

    CAPABILITIES  a `dlbench.runners.plugin.Capabilities`: models, precisions, data kinds and
                  dataset format, strategies with their process layouts (docs/plugins.md)
    Runner        a subclass of `Runner` below

The timing loop, warm-up/measure window, progress output, error classification and
step-log writing live once, in `dlbench.launch.worker`; a Runner only builds and steps.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from dlbench.coords import RunCoords
from dlbench.models import resolved_sizes
from dlbench.runners import capabilities


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
        # "0 = the model's default" is resolved here, once: runners read the sizes as given.
        image_size, seq_len = resolved_sizes(self.coords.model, self.image_size, self.seq_len)
        object.__setattr__(self, "image_size", image_size)
        object.__setattr__(self, "seq_len", seq_len)
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

    def device_memory(self) -> dict | None:
        """The run's peak device memory, read after the timed loop for the footer:
        {peak_bytes, limit_bytes, method}; None where the device reports none (a CPU)."""
        return None

    def describe(self) -> dict:
        """Versions, device, parameter count and training FLOPs per sample where known."""
        return {}

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, MemoryError)

    def close(self) -> None:
        """Tear down process groups etc."""


def address_space_capped() -> bool:
    """Whether this process runs under an address-space limit (the worker's memory cap)."""
    import resource

    return resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY
