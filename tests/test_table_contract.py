"""runs.csv and cells.csv are declared once (workflow/schemas/{runs,cells}.schema.yaml, read by
dlbench.analysis.columns): no other module names a column by string, the writer refuses a table
that breaks the schema and names the column, docs/columns.md is the schemas' own page, and a
campaign carries the tables' schema version (one without it still reads)."""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from dlbench.analysis import columns
from dlbench.analysis.columns import CELLS, RUNS, TableSchemaError, col, read_cells, read_runs
from dlbench.campaigns import campaign
from tests.conftest import REPO

SCANNED = ("dlbench/analysis", "dlbench/report", "dlbench/plots", "dlbench/findings", "dlbench/campaigns")
CONTRACT = REPO / "dlbench" / "analysis" / "columns.py"
# Runs in a framework's environment (the FLOPs rule: no pandas, no yaml there); its keys are a
# FLOPs count's, not a table's.
FRAMEWORK_SIDE = REPO / "dlbench" / "analysis" / "flops.py"
# Keys of other records that share a column's name: a step-log header or footer, a protocol, a
# manifest, a FLOPs count, a repeat decision, the report's context, a footer's profile.
OTHER_RECORDS = re.compile(
    r"\b(header|headers|protocol|footer|manifest|counted|decision|context|provenance|profile|parse_statistic)\b|^(h|p)\b"
)
PRAGMA = "# not a column"  # a line whose string names something else that shares a column's name
COMMITTED = REPO / "campaigns" / "h100-resnet50-2026-11-26"


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
        ):
            found.add(id(body[0].value))
    return found


def _other_keys(tree: ast.AST) -> set[int]:
    """String keys read from records that are not tables (OTHER_RECORDS)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            receiver, key = node.value, node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            if not (node.args and isinstance(node.args[0], ast.Constant)):
                continue
            receiver, key = node.func.value, node.args[0]
        else:
            continue
        if OTHER_RECORDS.search(ast.unparse(receiver)):
            found.add(id(key))
    return found


def column_literals(path: Path) -> list[tuple[ast.Constant, str]]:
    """Each string constant in `path` that spells a column's name (docstrings, f-strings' text,
    other records' keys and PRAGMA lines aside), with its line."""
    source = path.read_text(encoding="utf-8")
    tree, lines = ast.parse(source), source.splitlines()
    skipped = _docstrings(tree) | _other_keys(tree)
    skipped |= {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    return [
        (node, lines[node.lineno - 1])
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in vars(col)
        and id(node) not in skipped
        and PRAGMA not in lines[node.lineno - 1]
    ]


def scanned_modules() -> list[Path]:
    found = [p for folder in SCANNED for p in sorted((REPO / folder).rglob("*.py"))]
    return [p for p in found if p not in (CONTRACT, FRAMEWORK_SIDE)]


def test_the_framework_side_module_does_not_import_the_contract():
    """dlbench.analysis.flops runs with a framework's Python, which has no pandas or yaml."""
    tree = ast.parse(FRAMEWORK_SIDE.read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not imported & {"dlbench.analysis.columns", "pandas", "yaml"}, imported


def test_no_module_outside_the_contract_names_a_column_by_string():
    found = [
        f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r} (use col.{node.value})"
        for path in scanned_modules()
        for node, _ in column_literals(path)
    ]
    assert found == [], "\n".join(found)


def test_every_col_attribute_used_is_a_declared_column():
    unknown = [
        f"{path.relative_to(REPO)}:{node.lineno}: col.{node.attr}"
        for path in [*scanned_modules(), *sorted((REPO / "workflow" / "scripts").glob("*.py"))]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "col"
        if node.attr not in vars(col)
    ]
    assert unknown == []


def test_each_column_has_a_type_a_unit_field_and_a_meaning():
    for table in columns.TABLES:
        assert table.version == columns.TABLES_SCHEMA
        for column in table.columns.values():
            assert column.type in ("string", "integer", "number", "boolean"), column
            assert column.description.strip(), column


def test_the_column_page_is_the_one_the_schemas_make():
    page = (REPO / "docs" / "columns.md").read_text(encoding="utf-8")
    assert page == columns.reference_markdown(), "run: python -m dlbench.analysis.columns > docs/columns.md"


def test_the_committed_tables_match_their_schemas_and_read_typed():
    runs = read_runs(COMMITTED / "results" / "tables" / "runs.csv")
    cells = read_cells(COMMITTED / "results" / "tables" / "cells.csv")
    RUNS.validated(runs), CELLS.validated(cells)
    assert runs[col.batch].tolist() == ["128"] * len(runs) and cells[col.batch].map(type).eq(str).all()
    assert pd.api.types.is_float_dtype(cells[col.throughput]) and pd.api.types.is_integer_dtype(runs[col.repeat])


def test_the_writer_refuses_a_wrong_type_naming_the_column():
    cells = read_cells(COMMITTED / "results" / "tables" / "cells.csv")
    cells[col.throughput] = cells[col.throughput].astype(object)
    cells.loc[1, col.throughput] = "fast"
    with pytest.raises(TableSchemaError, match=r"cells\.csv, row 1, column 'throughput': 'fast' is not of type"):
        CELLS.validated(cells)


def test_the_writer_refuses_an_undeclared_or_missing_column():
    runs = read_runs(COMMITTED / "results" / "tables" / "runs.csv")
    with pytest.raises(TableSchemaError, match=r"runs\.csv, row 0: .*'throughput_typo' was unexpected"):
        RUNS.validated(runs.assign(throughput_typo=1.0))
    with pytest.raises(TableSchemaError, match="'status' is a required property"):
        RUNS.validated(runs.drop(columns=[col.status]))


def test_a_campaign_records_its_tables_schema_version():
    for manifest in sorted((REPO / "campaigns").glob("**/results/campaign.json")):
        assert json.loads(manifest.read_text())["tables_schema"] == columns.TABLES_SCHEMA, manifest


def test_a_campaign_written_before_the_version_still_reads(tmp_path):
    """An older campaign: no `tables_schema` in its manifest, and without the columns added
    later (here the convergence check's); it reads, typed, through the same reader."""
    old = tmp_path / "old"
    shutil.copytree(COMMITTED / "results" / "tables", old / "results" / "tables")
    manifest = json.loads((COMMITTED / "results" / "campaign.json").read_text())
    manifest.pop("tables_schema")
    (old / "results" / "campaign.json").write_text(json.dumps(manifest))
    cells_path = old / "results" / "tables" / "cells.csv"
    later = [col.convergence, col.convergence_reason, col.loss_gap, col.loss_gap_low, col.loss_gap_high]
    pd.read_csv(cells_path, dtype=str).drop(columns=later).to_csv(cells_path, index=False)
    loaded = campaign.load(old)
    assert len(loaded.cells) == 4 and col.convergence not in loaded.cells
    assert loaded.cells[col.batch].tolist() == ["128"] * 4 and loaded.runs[col.throughput].notna().all()


def test_a_campaign_of_an_unknown_tables_version_is_refused(tmp_path):
    newer = tmp_path / "newer"
    shutil.copytree(COMMITTED / "results" / "tables", newer / "results" / "tables")
    manifest = json.loads((COMMITTED / "results" / "campaign.json").read_text())
    (newer / "results" / "campaign.json").write_text(json.dumps(manifest | {"tables_schema": "dlbench.tables/99"}))
    with pytest.raises(TableSchemaError, match="tables schema 'dlbench.tables/99'"):
        campaign.load(newer)
