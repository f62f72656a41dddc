"""A campaign: one result set -- its cells, for a measured one its runs and raw logs, and a
manifest saying where the numbers come from (source, hardware, software, protocol, date,
config hash).

On disk, a campaign is either
- a campaign directory: `manifest.json`, `cells.csv` and (measured) `runs.csv`; or
- a pipeline working directory: `results/tables/{cells,runs}.csv` with the raw logs below
  `results/runs/`; its manifest is `results/campaign.json` if written, else read from the
  step-log headers (the same bytes either way).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from dlbench.analysis import tables
from dlbench.analysis.columns import CELLS, RUNS, Table

# The manifest the aggregate rule writes is made in the analysis stage; a campaign reads it.
from dlbench.analysis.manifest import (  # noqa: F401 (PROTOCOL_KEYS, SCHEMA: the campaigns' vocabulary)
    PIPELINE_MANIFEST,
    PIPELINE_TABLES,
    PROTOCOL_KEYS,
    SCHEMA,
    manifest_bytes,
    measured_manifest,
)

MANIFEST = "manifest.json"


@dataclass
class Campaign:
    manifest: dict
    cells: pd.DataFrame
    runs: pd.DataFrame | None = None  # None: a published campaign (no runs, the statistic alone)
    root: Path | None = None  # where the raw logs named in runs.csv live
    problems: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.manifest["id"]

    @property
    def kind(self) -> str:
        return self.manifest["kind"]

    def repeats(self) -> dict[tuple, list[float]]:
        """Per cell key (CELL_FIELDS order, as text), the throughputs of its repeats that produced one."""
        from dataclasses import astuple

        from dlbench.findings.comparisons import repeats_by_cell

        return {
            tuple(str(v) for v in astuple(key)): values.tolist() for key, values in repeats_by_cell(self.runs).items()
        }


def _read_table(table: Table, path: Path, manifest: dict | None = None) -> pd.DataFrame:
    """runs.csv or cells.csv, typed, as the tables' version the manifest names was written
    (a campaign made before manifests named one: dlbench.analysis.columns.UNVERSIONED)."""
    if not path.exists():
        raise FileNotFoundError(f"campaign table {path} does not exist")
    return table.read(path, (manifest or {}).get("tables_schema"))


def load(path: str | Path) -> Campaign:
    """A campaign directory or a pipeline working directory (see the module's docstring)."""
    path = Path(path)
    if (path / MANIFEST).exists():
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        if manifest.get("schema") != SCHEMA:
            raise ValueError(f"{path / MANIFEST}: schema {manifest.get('schema')!r}, expected {SCHEMA}")
        runs = _read_table(RUNS, path / "runs.csv", manifest) if (path / "runs.csv").exists() else None
        root = (path / manifest["root"]) if manifest.get("root") else path
        return Campaign(manifest, _read_table(CELLS, path / "cells.csv", manifest), runs, root)
    if (path / PIPELINE_TABLES / "cells.csv").exists():
        stored = path / PIPELINE_MANIFEST
        manifest = json.loads(stored.read_text(encoding="utf-8")) if stored.exists() else None
        runs = _read_table(RUNS, path / PIPELINE_TABLES / "runs.csv", manifest)
        cells = _read_table(CELLS, path / PIPELINE_TABLES / "cells.csv", manifest)
        return Campaign(manifest or measured_manifest(runs, path), cells, runs, path)
    raise FileNotFoundError(
        f"{path} is not a campaign: no {MANIFEST} and no {PIPELINE_TABLES / 'cells.csv'} (run the pipeline there first)"
    )


def save(campaign: Campaign, directory: str | Path) -> Path:
    """Write a campaign directory (manifest, cells, runs); raw logs stay where they are."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    manifest = dict(campaign.manifest)
    if campaign.root is not None:
        manifest["root"] = str(Path(campaign.root).resolve())
    (directory / MANIFEST).write_bytes(manifest_bytes(manifest))
    (directory / "cells.csv").write_bytes(tables.csv_bytes(CELLS.validated(campaign.cells)))
    if campaign.runs is not None:
        (directory / "runs.csv").write_bytes(tables.csv_bytes(RUNS.validated(campaign.runs)))
    return directory


def write_pipeline_manifest(root: str | Path, protocol: dict | None = None) -> Path:
    """results/campaign.json of a pipeline working directory, from its tables and logs."""
    root = Path(root)
    runs = _read_table(RUNS, root / PIPELINE_TABLES / "runs.csv")
    path = root / PIPELINE_MANIFEST
    path.write_bytes(manifest_bytes(measured_manifest(runs, root, protocol)))
    return path
