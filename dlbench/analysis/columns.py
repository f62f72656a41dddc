"""runs.csv and cells.csv: their columns declared once, beside the step-log contract.

The schemas `runs` and `cells` (dlbench.schemas; JSON Schema, one row a record) name
each column with its type, unit and meaning; everything else follows from them:

- `col`: every column's name (`cells[col.throughput]`); no other module of the analysis, findings,
  plots, campaigns or report spells one as a string (tests/test_table_contract.py scans for it);
- `RUNS.validated(frame)` / `CELLS.validated(frame)`: what the one derivation writes, checked
  against the schema with Snakemake's own validator (`snakemake.utils.validate`, as the
  workflow's config) -- a violation stops with a `TableSchemaError` naming the column;
- `read_runs` / `read_cells`: the one way the tables are read back, typed by the schema (text
  columns as text, so that `batch` stays `"64"`; numbers and booleans as pandas reads them);
- `reference_markdown()`: docs/columns.md (`python -m dlbench.analysis.columns > docs/columns.md`).

The tables' version (`TABLES_SCHEMA`) is the schemas' `version`; a campaign's manifest records it
(`tables_schema`), and a campaign written before it did reads as version 1.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from dlbench.coords import RUN_FIELDS, TRAINING_DEFAULTS
from dlbench.schemas import load_schema, schema_path

TABLES_SCHEMA = "dlbench.tables/4"
# The versions read_runs/read_cells take; a manifest without `tables_schema` predates it: /1.
# Version 1 predates the training options, version 2 the pipeline's (pp_schedule,
# pp_microbatches) and bubble columns: their runs trained at the missing options' defaults.
# Version 3 predates the compilers' memory estimates (compiled_estimate_*: absent, not made).
READABLE = ("dlbench.tables/1", "dlbench.tables/2", "dlbench.tables/3", TABLES_SCHEMA)
UNVERSIONED = "dlbench.tables/1"
# How each schema type is read back (the others: as pandas infers them).
READ_AS = {"string": str}


class TableSchemaError(ValueError):
    """A table that does not match its schema; the message names the table, row and column."""


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # the JSON Schema type: string, integer, number, boolean
    unit: str
    description: str


@dataclass(frozen=True)
class Table:
    name: str  # the file's name, e.g. runs.csv
    schema_file: Path
    description: str
    version: str
    columns: dict[str, Column]

    @property
    def dtypes(self) -> dict[str, type]:
        """read_csv's dtype for the columns whose type pandas cannot infer from the text."""
        return {c.name: READ_AS[c.type] for c in self.columns.values() if c.type in READ_AS}

    def read(self, path: str | Path, version: str | None = None) -> pd.DataFrame:
        """The table at `path`, typed; `version`: the campaign's `tables_schema` (None: unversioned)."""
        version = version or UNVERSIONED
        if version not in READABLE:
            raise TableSchemaError(f"{path}: tables schema {version!r}, this dlbench reads {', '.join(READABLE)}")
        return with_training_defaults(pd.read_csv(path, dtype=self.dtypes))

    def validated(self, frame: pd.DataFrame) -> pd.DataFrame:
        """`frame` itself, once every row matches the schema (else a TableSchemaError)."""
        from snakemake.exceptions import WorkflowError
        from snakemake.utils import validate

        try:
            validate(frame, str(self.schema_file), set_default=False)
        except WorkflowError as error:
            raise TableSchemaError(self._explain(error)) from None
        return frame

    def _explain(self, error: Exception) -> str:
        """`cells.csv, row 1, column 'throughput': 'fast' is not of type 'number'`."""
        row = re.search(r"row (\d+)", str(error))
        where = f"{self.name}, row {row.group(1)}" if row else self.name
        detail = error.__context__  # the validator's ValidationError, which Snakemake wraps
        if not hasattr(detail, "path"):
            return f"{where}: {str(error).splitlines()[0]}"
        column = next(iter(detail.path), None)
        named = f", column {column!r}" if column is not None else ""
        return f"{where}{named}: {detail.message}"


def _load(name: str) -> Table:
    schema = load_schema(name)
    columns = {
        key: Column(key, spec["type"], spec.get("unit", ""), spec["description"])
        for key, spec in schema["properties"].items()
    }
    return Table(schema["title"], schema_path(name), schema["description"], schema["version"], columns)


RUNS = _load("runs")
CELLS = _load("cells")
TABLES = (RUNS, CELLS)
# Every column's name, as an attribute: col.throughput == "throughput".
col = SimpleNamespace(**{name: name for table in TABLES for name in table.columns})


def with_training_defaults(frame: pd.DataFrame) -> pd.DataFrame:
    """A table written before (some of) the training options were coordinates (versions 1 and
    2), with the missing ones at their defaults, each after the one before it (the first after
    `strategy`); a table that has them all, as it is."""
    if "strategy" not in frame.columns or set(TRAINING_DEFAULTS) <= set(frame.columns):
        return frame
    previous = "strategy"
    for name, default in TRAINING_DEFAULTS.items():
        if name not in frame.columns:
            frame.insert(frame.columns.get_loc(previous) + 1, name, default)
        previous = name
    return frame


def read_runs(path: str | Path, version: str | None = None) -> pd.DataFrame:
    return RUNS.read(path, version)


def read_cells(path: str | Path, version: str | None = None) -> pd.DataFrame:
    return CELLS.read(path, version)


def read_keyed(path: str | Path) -> pd.DataFrame:
    """Another table keyed by run coordinates (losses.csv, references.csv): those typed as here."""
    dtypes = {name: dtype for name, dtype in RUNS.dtypes.items() if name in RUN_FIELDS}
    return with_training_defaults(pd.read_csv(path, dtype=dtypes))


@functools.cache
def reference_markdown() -> str:
    """docs/columns.md: each table's columns with type, unit and meaning, from the schemas."""
    lines = [
        "# runs.csv and cells.csv: the columns",
        "",
        "Generated from `workflow/schemas/runs.schema.yaml` and `cells.schema.yaml` by",
        "`python -m dlbench.analysis.columns > docs/columns.md` (tests/test_table_contract.py checks",
        f"that this page is current). Tables schema version: `{TABLES_SCHEMA}`; a campaign's",
        "`campaign.json` records the version its tables were written with (`tables_schema`).",
        "An empty field is a missing value (no number, or not measured).",
        "",
    ]
    for table in TABLES:
        lines += [
            f"## {table.name}",
            "",
            table.description,
            "",
            "| column | type | unit | meaning |",
            "|---|---|---|---|",
        ]
        for c in table.columns.values():
            cells = (f"`{c.name}`", c.type, c.unit, c.description)
            lines.append("| " + " | ".join(text.replace("|", "\\|") for text in cells) + " |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(reference_markdown(), end="")
