"""The config's checks, each one short message naming the key, the bad value and the file that
set it: the schema's (planning/schema.py) and what the schema cannot say.

    python -m dlbench.planning.config check FILE... [-- SNAKEMAKE_ARG...]
    python -m dlbench.planning.config show [GRID_FILE...] [--config KEY=VALUE...] [--directory DIR]

`check`: config files parse (tools/run.sh, before Snakemake, whose message names neither file
nor line). `show`: the effective config, each value with where it came from (planning/origins.py)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import yaml

from dlbench import protocol as protocols
from dlbench.planning import origins

# The schema (its defaults, its checks) is read in planning/schema.py; the rest of the config's
# checks, the ones the schema cannot say, are here.
from dlbench.planning.schema import (  # noqa: E402, F401 (REPO, CONFIG_SCHEMA: read through here too)
    CONFIG_SCHEMA,
    REPO,
    fill_defaults,
    schema_defaults,
    schema_problem,
    validation_error,
)


def resolve_files(files: list[str], overrides: dict | None = None) -> dict:
    """The config `files` make, merged in order as Snakemake merges --configfile files, then
    `overrides` as --config; validated, the schema's defaults filled. Nothing else lies under
    them (planning/origins.py). Raises ValueError naming the key and the file."""
    config = origins.merged(files, overrides)
    filled(config, lambda: origins.origins(files, overrides, config))
    return config


def filled(config: dict, found=None) -> None:
    """Validate `config` and fill in the schema's defaults, in place; a problem is one short
    message naming the key and the bad value, and the file and line that set it where `found`
    (a callable giving the config's origins, asked only then) knows it."""
    from dlbench.planning.grid import ConfigError

    try:
        fill_defaults(config)
        problem = protocol_problem(config["protocol"])
    except validation_error() as error:  # evaluated only when something was raised
        # The schema check again, for its one short message (validating once when all is well).
        problem = schema_problem(config) or str(error)
    if problem:
        raise ConfigError(origins.where(problem, found()) if found else problem)


def protocol_problem(protocol: dict) -> str | None:
    """What the schema cannot say of the protocol: a measured window shorter than its warm-up."""
    resolved = protocols.resolve(protocol)
    if resolved["measured_steps"] < resolved["warmup_steps"]:
        key = "measured_steps" if "measured_steps" in protocol else "warmup_steps"
        return (
            f"protocol.{key}: {resolved['measured_steps']} measured steps after {resolved['warmup_steps']} "
            f"warm-up steps (preset {resolved['preset']}): the measured window must be at least the warm-up"
        )
    return None


def checked_grid(config: dict, found=None, estimate_memory: bool = False):
    """The config's grid (dlbench.planning.grid.Grid) after every check, in order: the schema, which
    also fills in its defaults (`filled`), what the schema cannot say (relations between `data`
    keys, the grid's cross-references). `found`: as in `filled`. `estimate_memory`: make the
    compilers' memory estimates of its LLM cells first (dlbench.planning.compiled: spawns the
    framework's estimator for each shape not cached yet; the Snakefile's planning only). Raises
    ValueError."""
    from dlbench.planning import compiled, grid
    from dlbench.planning import datasets as paths

    filled(config, found)
    problem = (
        paths.config_problem(config)
        or paths.source_problem(config)
        or site_python_problem(config)
        or gpu_target_problem(config["run"])
        or framework_options_problem(config)
    )
    if problem:
        raise grid.ConfigError(origins.where(problem, found()) if found else problem)
    try:
        grid.check_semantics(config)  # a bad cross-reference is refused before any estimator runs
        shapes = grid.estimated_shapes(config) if estimate_memory else []
        notes = compiled.prepare(shapes, config["run"])  # before expand: its N/A cells read them
        expanded = grid.expand_checked(config)
        compiled.copy_to_workdir(shapes, compiled.WORKDIR_DIR, run=config["run"])  # a grid refused writes nothing
        return dataclasses.replace(expanded, notes=notes)
    except grid.ConfigError as error:
        raise grid.ConfigError(origins.where(str(error), found()) if found else str(error)) from None


def gpu_target_problem(run: dict) -> str | None:
    """A run.gpu_target_config that names no file (checked before planning compiles for it)."""
    path = run.get("gpu_target_config") or ""
    if path and not os.path.isfile(path):
        return f"run.gpu_target_config: no file at {path!r} (the XLA GpuTargetConfigProto text of the GPU)"
    return None


def site_python_problem(config: dict) -> str | None:
    """None if every run.python entry names a known framework and an executable file, else
    one message naming the key (checked before any job starts: a typo here would otherwise
    fail every run of that framework)."""
    from dlbench.runners import framework_names

    known = framework_names()
    for framework, python in config["run"]["python"].items():
        if framework not in known:
            return f"run.python.{framework}: unknown framework; known: {', '.join(known)}"
        if not os.path.isfile(python):
            return f"run.python.{framework}: {python} does not exist (or is not a file)"
        if not os.access(python, os.X_OK):
            return f"run.python.{framework}: {python} is not executable"
    return None


def framework_options_problem(config: dict) -> str | None:
    """None if every framework_options entry names a known framework and options it declares,
    with allowed values; else one message naming the key."""
    from dlbench.runners import capabilities, framework_names

    known = framework_names()
    for framework, settings in config["framework_options"].items():
        if framework not in known:
            return f"framework_options.{framework}: unknown framework; known: {', '.join(known)}"
        problem = capabilities(framework).options_problem(settings)
        if problem:
            return f"framework_options.{framework}.{problem}"
    return None


def config_file_problem(path: str) -> str | None:
    """None if `path` loads as Snakemake loads a config file (JSON, else YAML) into a mapping,
    else e.g. `my-grid.yaml:3:9: expected ',' or ']', but got ':' (...)`."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as error:
        return f"{path}: cannot be read ({error})"
    try:
        loaded = json.loads(text)
    except ValueError:
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as error:
            return f"{path}:{_yaml_problem(error)}"
    if not isinstance(loaded, dict):
        found = "an empty file" if loaded is None else f"a {type(loaded).__name__}"
        return f"{path}: the top level must be a mapping of keys (grid:, protocol:, ...), not {found}"
    return None


def _yaml_problem(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    if mark is None:
        return f" {error}"
    where = f"{mark.line + 1}:{mark.column + 1}: {error.problem}"
    context_mark = getattr(error, "context_mark", None)
    if error.context and context_mark:
        where += f" ({error.context} at line {context_mark.line + 1}, column {context_mark.column + 1})"
    return where


def config_files_named(snakemake_args: list[str]) -> list[str]:
    """The config files a Snakemake command line names (--configfile/--configfiles, each with
    one or more files, as Snakemake reads them)."""
    # No abbreviations: Snakemake's --config would otherwise be taken for --configfile.
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--configfile", "--configfiles", nargs="+", action="extend", default=[])
    return parser.parse_known_args(snakemake_args)[0].configfile


def show(argv: list[str]) -> int:
    """Print the effective config of grid files and --config entries, each value with its origin."""
    parser = argparse.ArgumentParser(prog="python -m dlbench.planning.config show", allow_abbrev=False)
    parser.add_argument("files", nargs="*", help="grid files, as --configfile (none: the embedded default)")
    parser.add_argument("--config", nargs="+", action="extend", default=[], metavar="KEY=VALUE")
    parser.add_argument("--directory", "-d", default=".", help="the working directory (its config/config.yaml)")
    args = parser.parse_args(argv)
    from dlbench.planning.snakemake_api import parse_config_args

    files = origins.config_files(args.files, args.directory)
    problems = [p for p in map(config_file_problem, files) if p]
    overrides = parse_config_args(args.config)
    try:
        config = resolve_files(files, overrides) if not problems else None
    except ValueError as error:
        problems.append(str(error))
    if problems:
        print(*(f"invalid config: {p}" for p in problems), sep="\n", file=sys.stderr)
        return 1
    print("\n".join(origins.show_lines(files, overrides, config)))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["show"]:
        return show(argv[1:])
    if argv[:1] != ["check"]:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    args = argv[1:]
    files, snakemake_args = (args[: args.index("--")], args[args.index("--") + 1 :]) if "--" in args else (args, [])
    problems = [p for p in map(config_file_problem, files + config_files_named(snakemake_args)) if p]
    for problem in problems:
        print(f"invalid config file: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
