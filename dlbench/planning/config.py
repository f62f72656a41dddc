"""The config's checks, each one short message naming the key and the bad value: the schema's
(planning/schema.py) and what the schema cannot say. `python -m dlbench.planning.config check
FILE... [-- SNAKEMAKE_ARG...]` checks that config files parse (tools/run.sh, before Snakemake,
whose message names neither file nor line)."""

from __future__ import annotations

import argparse
import json
import os
import sys

import yaml

# The schema (its defaults, its checks) is read in planning/schema.py; the rest of the config's
# checks, the ones the schema cannot say, are here.
from dlbench.planning.schema import (  # noqa: E402, F401 (REPO, CONFIG_SCHEMA: read through here too)
    CONFIG_SCHEMA,
    REPO,
    fill_defaults,
    schema_defaults,
    schema_problem,
)


def checked_grid(config: dict):
    """The config's grid (dlbench.planning.grid.Grid) after every check, in order: the schema, which
    also fills in its defaults (fill_defaults; when it fails, the schema's one short message
    naming the key and the bad value), what the schema cannot say (relations between `data`
    keys, the grid's cross-references). Raises ValueError."""
    import jsonschema

    from dlbench.planning import datasets as paths
    from dlbench.planning import grid

    try:
        fill_defaults(config)
    except jsonschema.ValidationError as error:
        # The schema check again, for its one short message (validating once when all is well).
        raise grid.ConfigError(schema_problem(config) or str(error)) from None
    problem = (
        paths.config_problem(config)
        or paths.source_problem(config)
        or site_python_problem(config)
        or framework_options_problem(config)
    )
    if problem:
        raise grid.ConfigError(problem)
    return grid.expand(config)


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


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "check":
        print("usage: python -m dlbench.planning.config check FILE... [-- SNAKEMAKE_ARG...]", file=sys.stderr)
        return 2
    args = argv[1:]
    files, snakemake_args = (args[: args.index("--")], args[args.index("--") + 1 :]) if "--" in args else (args, [])
    problems = [p for p in map(config_file_problem, files + config_files_named(snakemake_args)) if p]
    for problem in problems:
        print(f"invalid config file: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
