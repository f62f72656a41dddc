"""Config checks that produce one short message naming the key and the bad value."""

from __future__ import annotations

import jsonschema
import yaml


def _path(error: jsonschema.ValidationError) -> str:
    parts = []
    for part in error.absolute_path:
        parts.append(f"[{part}]" if isinstance(part, int) else f".{part}")
    return "".join(parts).lstrip(".") or "(top level)"


def schema_problem(config: dict, schema_path: str) -> str | None:
    """None if `config` satisfies the schema, else e.g. `grid.batch_per_device[0]: -1 is ...`."""
    with open(schema_path) as f:
        schema = yaml.safe_load(f)
    validator = jsonschema.Draft202012Validator(schema)
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
