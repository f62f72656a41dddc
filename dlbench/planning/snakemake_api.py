"""What dlbench uses of Snakemake's Python API, in one place: its wildcards and the command
templates it fills in per job, its file flags, its deployment settings and its function
signatures. Planning's other modules (and the layers above) import these names from here,
never from `snakemake`; the layers below planning (images, launch, runners) know nothing
of Snakemake. A Snakemake release that moves one of these is a change to this file alone.
Analysis environment.
"""

from __future__ import annotations

import functools
import inspect
import re
import shlex
from collections.abc import Callable

from snakemake.common import overwrite_function_params
from snakemake.common.configfile import load_configfile
from snakemake.io import ancient, apply_wildcards
from snakemake.settings.types import DeploymentMethod, RerunTrigger
from snakemake.utils import update_config

from dlbench.coords import PATH_FIELDS, RUN_FIELDS, TRAINING_DEFAULTS, RunCoords, parse_training, training_suffix

__all__ = [
    "CommandClasses",
    "parse_config_args",
    "load_configfile",
    "update_config",
    "command_param",
    "DeploymentMethod",
    "Placeholders",
    "RerunTrigger",
    "RunWildcards",
    "ancient",
    "apply_wildcards",
    "is_template",
    "known_signature",
    "quote_template",
    "run_coords",
]


class RunWildcards(dict):
    """A run's coordinates by name (text), and its `training` path wildcard, read as Snakemake's
    wildcards are: w.framework, w["framework"]."""

    def __init__(self, *args, **kwargs):
        """As dict's; training options not given are at their defaults."""
        super().__init__(*args, **kwargs)
        for name, default in TRAINING_DEFAULTS.items():
            self.setdefault(name, str(default))
        self.setdefault(
            "training",
            training_suffix(
                self["activation_checkpointing"],
                int(self["grad_accum"]),
                self["pp_schedule"],
                int(self["pp_microbatches"]),
            ),
        )

    @classmethod
    def of(cls, run: RunCoords) -> RunWildcards:
        return cls({**{name: str(value) for name, value in run.as_dict().items()}, "training": run.training})

    @classmethod
    def from_job(cls, wildcards) -> RunWildcards:
        """A job's wildcards (Snakemake's: the training options as one path wildcard) as ours.
        Read as they are: Snakemake matched them with the coordinates' own constraints
        (coords.WILDCARD_CONSTRAINTS), so no RunCoords is built per job."""
        if isinstance(wildcards, RunWildcards):
            return wildcards
        values = {name: str(getattr(wildcards, name)) for name in PATH_FIELDS}
        training = str(wildcards.training)
        values.update(_training_options(training), training=training)
        return cls(values)

    def __getattr__(self, name: str) -> str:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


@functools.cache
def _training_options(suffix: str) -> dict[str, str]:
    """A `training` wildcard's options as text (a grid has a handful: parsed once each)."""
    return {name: str(value) for name, value in parse_training(suffix).items()}


class Placeholders(RunWildcards):
    """Wildcards whose values are Snakemake's placeholders (`{framework}` ...): a command built
    from them is a template that Snakemake fills in per job, with no function call per job.
    The training options share one path wildcard, so a template fixes them (their defaults
    unless given)."""

    def __init__(self, sizes_of: str | None = None, **fixed: str):
        """`fixed`: coordinates given as values (a template for the runs that share them);
        `sizes_of`: a model whose planned sizes every model of the template's runs shares."""
        fixed = {**{name: str(value) for name, value in TRAINING_DEFAULTS.items()}, **fixed}
        super().__init__({name: fixed.get(name, "{" + name + "}") for name in RUN_FIELDS})
        self.sizes_of = sizes_of


def parse_config_args(entries: list[str]) -> dict:
    """`--config KEY=VALUE ...` read exactly as Snakemake reads it (its CLI's parser: imported
    only here, for `python -m dlbench.planning.config show`)."""
    from snakemake.cli import parse_config

    return parse_config(entries)


def is_template(wildcards) -> bool:
    return isinstance(wildcards, Placeholders)


def run_coords(wildcards) -> RunCoords:
    """A job's wildcards as the typed coordinates below planning take them (never a template's)."""
    if is_template(wildcards):
        raise TypeError("a template's placeholders are no run's coordinates")
    if isinstance(wildcards, RunWildcards):
        return RunCoords.from_dict(wildcards)
    return RunCoords.from_wildcards(wildcards)


class CommandClasses:
    """A run's command (`command(wildcards)`) through one template per command class: what a
    command holds beyond its coordinates filled in (software, dataset, input workers, batch
    search) depends on FIELDS and on whether the batch is searched. A class's template is built
    and checked against `command` at its first run; a mismatch keeps `command` for that class."""

    FIELDS = ("framework", "model", "data", "strategy", "scale", *TRAINING_DEFAULTS)

    def __init__(self, command: Callable[[RunWildcards], str]):
        self.command = command
        self.templates: dict[tuple, str | None] = {}

    def __call__(self, wildcards) -> str:
        values = RunWildcards.from_job(wildcards)
        fixed = {name: values[name] for name in self.FIELDS}
        if values.batch == "max":
            fixed["batch"] = "max"
        key = tuple(fixed.items())
        if key not in self.templates:
            template = self.command(Placeholders(**fixed))
            self.templates[key] = template if apply_wildcards(template, values) == self.command(values) else None
        template = self.templates[key]
        return apply_wildcards(template, values) if template else self.command(values)


def command_param(runs: list[RunCoords], command: Callable, sizes: Callable[[str], tuple]) -> str | Callable:
    """A rule's command param for `runs`: where their commands differ by their wildcards only, a
    template Snakemake fills in (no function call per job), checked against one run's command;
    runs with real data or a batch search, models planned at different sizes or different training
    options: one template per command class; else `command` itself. `sizes`: a model's planned sizes."""
    if not runs:
        return known_signature(command)
    if (
        len({sizes(model) for model in {run.model for run in runs}}) > 1
        or len({run.training for run in runs}) > 1
        or any(run.batch == "max" or run.data == "real" for run in runs)
    ):
        return known_signature(CommandClasses(command))
    training = {name: str(getattr(runs[0], name)) for name in TRAINING_DEFAULTS}
    template = command(Placeholders(sizes_of=runs[0].model, **training))
    sample = RunWildcards.of(runs[0])
    return template if apply_wildcards(template, sample) == command(sample) else known_signature(command)


def quote_template(arg: str) -> str:
    """shlex.quote of the argument a template's argument becomes (wildcard values are shell-safe)."""
    filled = re.sub(r"\{\w+\}", "x", arg)
    return arg if shlex.quote(filled) == filled else shlex.quote(arg)


def known_signature(function: Callable) -> Callable:
    """`function`, with its parameters told to Snakemake once: it inspects an input, params or
    resources function's signature at every call otherwise (as snakemake.ioutils does)."""
    overwrite_function_params(function, inspect.signature(function).parameters)
    return function
