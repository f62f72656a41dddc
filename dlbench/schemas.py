"""dlbench's JSON schemas: the config, the step log and the two tables (runs.csv, cells.csv).
This module alone knows where their files lie (workflow/schemas/, beside the rules that name
them in the docs); everything else asks `schema_path` or `load_schema`. Stdlib only at import:
the step-log reader runs in framework environments, which read JSON only (a YAML schema
imports PyYAML when it is asked for)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

FOLDER = Path(__file__).resolve().parent.parent / "workflow" / "schemas"
FILES = {
    "config": "config.schema.yaml",
    "steplog": "steplog.schema.json",
    "runs": "runs.schema.yaml",
    "cells": "cells.schema.yaml",
}


def schema_path(name: str) -> Path:
    """The file of the schema `name` (one of FILES), for a validator that reads it by path."""
    return FOLDER / FILES[name]


@functools.cache
def load_schema(name: str) -> dict:
    """The schema `name`, parsed once per process: callers share the dict and never change it."""
    path = schema_path(name)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return json.loads(text)
    import yaml

    # libyaml's loader where PyYAML has it: the pure-Python one takes a tenth of a second for
    # the config schema, on every `snakemake` invocation.
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 (a safe loader)
