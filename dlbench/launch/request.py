"""The launcher's command line, defined once: `LaunchRequest` ⇄ argv.

The training rule, the batch search and the launcher (which re-runs itself as every rank)
build and read the command line only through this class. Stdlib only.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields

from dlbench.coords import RUN_FIELDS, TRAINING_DEFAULTS, RunCoords
from dlbench.launch.allocator import NAMES as ALLOCATOR_NAMES
from dlbench.protocol import STATISTICS, RunProtocol

# A launcher stops ranks this long after their own time limit: ranks enforce the limit
# themselves (and write footers); this bound only catches a rank stuck in a collective.
TIME_LIMIT_GRACE_S = 120

LAUNCHER_NAMES = ("local", "srun")
# run.container: where each rank runs (dlbench/launch/container.py).
CONTAINER_NAMES = ("none", "podman", "apptainer", "pyxis")
# Where the ranks' Python comes from (run.python names a site's: docs/site-environments.md).
PYTHON_ENVS = ("lock", "site")
# What the ranks do: train (the timed loop), or the communication prescreen's all-reduce.
TASKS = ("train", "prescreen")
# How a Slurm job asks for GPUs (run.gpu_request; docs/slurm.md, Site knobs).
GPU_REQUESTS = ("gpus-per-node", "gres", "gpus")
# The run's Slurm settings beyond its shape (config run.<knob>; fields of the same names below).
SITE_KNOBS = ("gpu_request", "gpu_type", "exclusive", "cpu_bind", "distribution")


def registrar(registry: dict, names: tuple[str, ...], what: str):
    """A class decorator that registers a class under its `name`, one of the request's `names`."""

    def register(cls):
        if cls.name not in names:
            raise ValueError(f"{what} {cls.name!r} is not one of the request's choices {names}")
        registry[cls.name] = cls
        return cls

    return register


def _option(default, help: str = "", **argparse_settings):
    return field(default=default, metadata={"help": help, **argparse_settings})


@dataclass(frozen=True)
class LaunchRequest:
    """Everything one run's launcher needs; the run's coordinates are `--framework` ... `--repeat`,
    its protocol `--preset` ... `--statistic`."""

    coords: RunCoords
    protocol: RunProtocol
    run_dir: str
    image_size: int = _option(0, "an image model's input size (planning resolves its default)")
    seq_len: int = _option(0, "a text model's or an LLM's sequence length (planning resolves its default)")
    max_batch_file: str | None = _option(None, "batch_search result to use when --batch is 'max'")
    threads: int = _option(1, "CPU threads for the whole run")
    device: str = _option("cpu", choices=("cpu", "cuda"))
    compile: bool = _option(False)
    time_limit: int = _option(0, "seconds per rank; 0 = none")
    progress_every: int = _option(10)
    memory_cap_mb: int = _option(0, "address-space cap per rank (CPU OOM); 0 = none")
    allocator: str = _option("system", "each rank's malloc (dlbench.launch.allocator)", choices=ALLOCATOR_NAMES)
    env_lock: str | None = _option(None, "the environment's lock file (hashed into the header)")
    options: str = _option("", "the framework's declared options, name=value,... (framework_options.<framework>)")
    python_env: str = _option(
        "lock", "lock: a venv built from env_lock; site: the site's own Python (run.python)", choices=PYTHON_ENVS
    )
    launcher: str = _option("local", choices=LAUNCHER_NAMES)
    data_dir: str = _option("", "real data: the framework's converted dataset")
    data_workers: int = _option(1, "real data: input-pipeline workers per rank")
    container: str = _option("none", "run every rank in the framework's pinned image", choices=CONTAINER_NAMES)
    images: str = _option("", "the images' directory: <framework>.lock.json, podman's store, .sif files")
    task: str = _option("train", "train: the timed loop; prescreen: the all-reduce of --sizes", choices=TASKS)
    sizes: str = _option("", "prescreen: message sizes in bytes, comma-separated")
    # Site knobs (run.gpu_request ... run.distribution): the launcher's srun flags.
    gpu_request: str = _option("gpus-per-node", "how srun asks for GPUs", choices=GPU_REQUESTS)
    gpu_type: str = _option("", "the GPU type in the request, e.g. h100")
    exclusive: bool = _option(False, "the job holds whole nodes (sbatch --exclusive --mem=0)")
    cpu_bind: str = _option("", "srun --cpu-bind (empty: the cluster's default)")
    distribution: str = _option("block", "srun --distribution")

    @property
    def stop_after_s(self) -> int | None:
        """How long a launcher waits for its ranks before it stops them (None: no bound)."""
        return self.time_limit + TIME_LIMIT_GRACE_S if self.time_limit else None

    def slurm_request(self) -> dict | None:
        """What the run asked of Slurm beyond its shape (the header records it); None unless srun."""
        if self.launcher != "srun":
            return None
        return {key: getattr(self, key) for key in SITE_KNOBS}

    def to_argv(self) -> list[str]:
        """The command line `from_argv` reads back; options at their default are left out."""
        settings = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "coords"}
        return argv_of(self.coords.as_dict(), settings)

    @classmethod
    def from_argv(cls, argv: list[str] | None = None) -> LaunchRequest:
        parser = argument_parser()
        values = vars(parser.parse_args(argv))
        try:
            coords = RunCoords.from_dict({name: values.pop(name) for name in RUN_FIELDS})
        except ValueError as error:
            parser.error(str(error))
        protocol = RunProtocol(**{f.name: values.pop(f.name) for f in fields(RunProtocol)})
        return cls(coords=coords, protocol=protocol, **values)


def argv_of(coords: Mapping[str, object], settings: Mapping[str, object]) -> list[str]:
    """A request's command line from its coordinates (values, or a command template's
    placeholders, as text) and its other fields (`protocol` and the options; an option at its
    default is left out, one not given takes its default)."""
    unknown = set(settings) - {f.name for f in fields(LaunchRequest)}
    if unknown:
        raise TypeError(f"not fields of LaunchRequest: {sorted(unknown)}")
    argv: list[str] = []
    for name, value in [*((n, coords[n]) for n in RUN_FIELDS), *settings["protocol"].as_dict().items()]:
        # The training options at their defaults are left out: a run's command line is the one
        # it had before they existed (Snakemake's params trigger sees no change).
        if name in TRAINING_DEFAULTS and str(value) == str(TRAINING_DEFAULTS[name]):
            continue
        argv += [_flag(name), str(value)]
    for f in _option_fields():
        value = settings[f.name] if f.default is MISSING else settings.get(f.name, f.default)
        if f.default is not MISSING and value == f.default:
            continue
        argv += [_flag(f.name)] if f.type == "bool" else [_flag(f.name), str(value)]
    return argv


def _option_fields():
    return [f for f in fields(LaunchRequest) if f.name not in ("coords", "protocol")]


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def argument_parser() -> argparse.ArgumentParser:
    """The launcher's options, from `LaunchRequest`'s fields (types, defaults, help)."""
    parser = argparse.ArgumentParser(prog="python -m dlbench.launch", description="Start the processes of one run.")
    for name in RUN_FIELDS:
        if name in TRAINING_DEFAULTS:
            parser.add_argument(_flag(name), default=str(TRAINING_DEFAULTS[name]))
        else:
            parser.add_argument(_flag(name), required=True)
    for f in fields(RunProtocol):
        choices = STATISTICS if f.name == "statistic" else None
        parser.add_argument(_flag(f.name), required=True, type=int if f.type == "int" else str, choices=choices)
    for f in _option_fields():
        settings = {k: v for k, v in f.metadata.items() if v}
        if f.type == "bool":
            parser.add_argument(_flag(f.name), action="store_true", **settings)
            continue
        if f.default is MISSING:
            settings["required"] = True
        else:
            settings["default"] = f.default
        parser.add_argument(_flag(f.name), type=int if f.type == "int" else str, **settings)
    return parser
