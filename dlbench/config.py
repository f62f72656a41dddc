"""The config schema: its defaults, and checks that produce one short message naming the key
and the bad value. `python -m dlbench.config check FILE... [-- SNAKEMAKE_ARG...]` checks that
config files parse (tools/run.sh, before Snakemake, whose message names neither file nor line)."""

from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_SCHEMA = os.path.join(REPO, "workflow", "schemas", "config.schema.yaml")


@functools.cache
def _load_schema(schema_path: str) -> dict:
    # libyaml's loader where PyYAML has it: the pure-Python one takes a tenth of a second
    # for this schema, on every `snakemake` invocation.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(schema_path) as f:
        return yaml.load(f, Loader=loader)  # noqa: S506 (a safe loader)


def schema_defaults(*keys: str, schema_path: str = CONFIG_SCHEMA) -> dict:
    """The schema's defaults of the object at `keys` (e.g. "data", "text"): the one source
    of every default setting."""
    node = _load_schema(schema_path)
    for key in keys:
        node = node["properties"][key]
    return {name: copy.deepcopy(prop["default"]) for name, prop in node["properties"].items() if "default" in prop}


def _path(error) -> str:
    parts = []
    for part in error.absolute_path:
        parts.append(f"[{part}]" if isinstance(part, int) else f".{part}")
    return "".join(parts).lstrip(".") or "(top level)"


def fill_defaults(config: dict, schema_path: str = CONFIG_SCHEMA) -> None:
    """Validate `config` against the schema and fill in its defaults, as Snakemake's
    `validate(config, schema, set_default=True)` does (jsonschema's documented recipe), on the
    schema read once with libyaml: Snakemake's reads it with the pure-Python loader on every
    invocation (a fifth of the Snakefile's parse time, docs/planning.md). Raises jsonschema's
    ValidationError."""
    import jsonschema

    check_properties = jsonschema.Draft202012Validator.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema:
                    instance.setdefault(name, copy.deepcopy(subschema["default"]))  # not the cached schema's
        yield from check_properties(validator, properties, instance, schema)

    filling = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"properties": set_defaults})
    filling(_load_schema(schema_path)).validate(config)


def schema_problem(config: dict, schema_path: str = CONFIG_SCHEMA) -> str | None:
    """None if `config` satisfies the schema, else e.g. `grid.batch_per_device[0]: -1 is ...`."""
    import jsonschema  # analysis environment only; the defaults are read in PyTorch's too

    validator = jsonschema.Draft202012Validator(_load_schema(schema_path))
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    error = jsonschema.exceptions.best_match(errors)
    # anyOf errors say little; the deepest sub-error names the real constraint.
    while error.context:
        error = jsonschema.exceptions.best_match(error.context)
    if error.validator == "pattern":
        return f"{_path(error)}: {error.instance!r} is not allowed (must match {error.validator_value})"
    return f"{_path(error)}: {error.message}"


def checked_grid(config: dict):
    """The config's grid (dlbench.grid.Grid) after every check, in order: the schema, which
    also fills in its defaults (fill_defaults; when it fails, the schema's one short message
    naming the key and the bad value), what the schema cannot say (relations between `data`
    keys, the grid's cross-references). Raises ValueError."""
    import jsonschema

    from dlbench import grid
    from dlbench.data import paths

    try:
        fill_defaults(config)
    except jsonschema.ValidationError as error:
        # The schema check again, for its one short message (validating once when all is well).
        raise grid.ConfigError(schema_problem(config) or str(error)) from None
    problem = paths.config_problem(config) or paths.source_problem(config) or site_python_problem(config)
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
        print("usage: python -m dlbench.config check FILE... [-- SNAKEMAKE_ARG...]", file=sys.stderr)
        return 2
    args = argv[1:]
    files, snakemake_args = (args[: args.index("--")], args[args.index("--") + 1 :]) if "--" in args else (args, [])
    problems = [p for p in map(config_file_problem, files + config_files_named(snakemake_args)) if p]
    for problem in problems:
        print(f"invalid config file: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
