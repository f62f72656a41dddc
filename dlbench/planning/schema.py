"""The config schema (dlbench.schemas, "config"): read once, its defaults the one source of
every default setting, its check with one short message naming the key and the bad value.
Stdlib and PyYAML at import (jsonschema inside the checks: the analysis environment)."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import tempfile
from pathlib import Path

import yaml

from dlbench.schemas import load_schema, schema_path

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The file, for a validator that reads it by path (Snakemake's `validate`).
CONFIG_SCHEMA = str(schema_path("config"))
# Configs the schema has passed, filled, by what decides the result (checked_key): importing
# jsonschema alone is a fiftieth of a CAICT dry run, paid by every Snakemake invocation.
CHECKED_DIR = Path(REPO) / ".cache" / "config_checks"


def schema_defaults(*keys: str) -> dict:
    """The schema's defaults of the object at `keys` (e.g. "data", "text"): the one source
    of every default setting."""
    node = load_schema("config")
    for key in keys:
        node = node["properties"][key]
    return {name: copy.deepcopy(prop["default"]) for name, prop in node["properties"].items() if "default" in prop}


def settings(config: dict, section: str) -> dict:
    """The config's `section` with the schema's defaults under what it sets (a config read
    without fill_defaults, e.g. a stored campaign's, may lack keys added since)."""
    return {**schema_defaults(section), **(config.get(section) or {})}


def _path(error) -> str:
    parts = []
    for part in error.absolute_path:
        parts.append(f"[{part}]" if isinstance(part, int) else f".{part}")
    return "".join(parts).lstrip(".") or "(top level)"


def fill_defaults(config: dict, checked_dir: Path | None = None) -> None:
    """Validate `config` against the schema and fill in its defaults, in place, as Snakemake's
    `validate(config, schema, set_default=True)` does (jsonschema's documented recipe), on the
    schema read once with libyaml: Snakemake's reads it with the pure-Python loader on every
    invocation (a fifth of the Snakefile's parse time, docs/planning.md). A config passed before
    is read back filled from `checked_dir` (CHECKED_DIR). Raises jsonschema's ValidationError."""
    key = checked_key(config)
    path = Path(checked_dir or CHECKED_DIR) / f"{key}.json" if key else None
    try:
        filled = json.loads(path.read_text(encoding="utf-8")) if path else None
    except (OSError, ValueError):
        filled = None
    if isinstance(filled, dict):
        config.clear()
        config.update(filled)
        return
    _validate_filling(config)
    if path:
        _write_atomically(path, json.dumps(config))


def validation_error() -> type[Exception]:
    """jsonschema's ValidationError, imported when asked: a config checked before needs none."""
    import jsonschema

    return jsonschema.ValidationError


def checked_key(config: dict) -> str | None:
    """The name of `config`'s check: its JSON text (key order kept: the filled config keeps it),
    the schema, this module and the analysis lock (jsonschema's release). None for a config JSON
    cannot carry unchanged (a tuple, a date)."""
    text = json.dumps(config, default=repr)
    if json.loads(text) != config:
        return None
    digest = hashlib.sha256(text.encode())
    lock = Path(REPO) / "envs" / "analysis.txt"
    for path in (schema_path("config"), Path(__file__), lock):
        digest.update(path.read_bytes() if path.exists() else b"")
    return digest.hexdigest()[:32]


def _write_atomically(path: Path, text: str) -> None:
    """Another process planning at once (a Slurm job's Snakemake) reads a whole file or none."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as out:
            out.write(text)
        os.replace(out.name, path)
    except OSError:
        pass  # a read-only checkout checks again next time


def _validate_filling(config: dict) -> None:
    import jsonschema

    check_properties = jsonschema.Draft202012Validator.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema:
                    instance.setdefault(name, copy.deepcopy(subschema["default"]))  # not the cached schema's
                if isinstance(instance.get(name), str):
                    instance[name] = _command_line_scalar(instance[name], subschema)
        yield from check_properties(validator, properties, instance, schema)

    filling = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"properties": set_defaults})
    filling(load_schema("config")).validate(config)


# Snakemake reads `--config run='{exclusive: true}'` with YAML's BaseLoader: every nested
# scalar arrives as a string. Where the schema wants a boolean or a number, such a string is read
# as YAML would read it in a config file (a quoted 'true' in a file is read the same way).
_SCALAR_TYPES = {"boolean": bool, "integer": int, "number": (int, float)}


def _types(subschema: dict) -> list[str]:
    """The JSON types a setting may take, its oneOf/anyOf branches' included (repeats: an
    integer or `auto`)."""
    wanted = subschema.get("type")
    types = [wanted] if isinstance(wanted, str) else list(wanted or [])
    for branch in subschema.get("oneOf", []) + subschema.get("anyOf", []):
        types += _types(branch)
    return types


def _command_line_scalar(value: str, subschema: dict):
    wanted = _types(subschema)
    if "string" in wanted or not any(t in _SCALAR_TYPES for t in wanted):
        return value
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    for t in wanted:
        kind = _SCALAR_TYPES.get(t)
        if kind and isinstance(parsed, kind) and not (t != "boolean" and isinstance(parsed, bool)):
            return parsed
    return value


def schema_problem(config: dict) -> str | None:
    """None if `config` satisfies the schema, else e.g. `grid.batch_per_device[0]: -1 is ...`."""
    import jsonschema  # analysis environment only; the defaults are read in PyTorch's too

    validator = jsonschema.Draft202012Validator(load_schema("config"))
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
