"""The config schema: its defaults, and checks that produce one short message naming the key
and the bad value."""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Callable

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_SCHEMA = os.path.join(REPO, "workflow", "schemas", "config.schema.yaml")


@functools.cache
def _load_schema(schema_path: str) -> dict:
    with open(schema_path) as f:
        return yaml.safe_load(f)


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


def checked_grid(config: dict, fill_defaults: Callable[[dict], None]):
    """The config's grid (dlbench.grid.Grid) after every check, in order: the schema (one
    short message naming the key and the bad value), `fill_defaults` (the workflow's:
    Snakemake's validate, which also fills in the schema's defaults), what the schema cannot
    say (relations between `data` keys, the grid's cross-references). Raises ValueError."""
    from dlbench import grid
    from dlbench.data import paths

    problem = schema_problem(config)
    if problem:
        raise grid.ConfigError(problem)
    fill_defaults(config)
    problem = paths.config_problem(config)
    if problem:
        raise grid.ConfigError(problem)
    return grid.expand(config)
