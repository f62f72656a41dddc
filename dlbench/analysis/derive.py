"""The one derivation: raw step logs and FLOPs counts → runs.csv, cells.csv, cells.md,
environment.json, losses.csv and campaign.json. The aggregate rule writes what it returns, the audit
compares the stored files with it, and a campaign is regenerated through it, so the three
cannot drift apart."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from dlbench.analysis import environment, losses, prescreen, tables
from dlbench.analysis.columns import CELLS, RUNS, col
from dlbench.analysis.manifest import PIPELINE_MANIFEST, PIPELINE_TABLES, manifest_bytes, measured_manifest
from dlbench.planning import cost
from dlbench.planning.grid import Grid
from dlbench.planning.schema import settings

TABLE_FILES = ("runs.csv", "cells.csv", "cells.md", "environment.json", losses.LOSSES_FILE)
CAMPAIGN_FILE = "campaign.json"
FILES = (*TABLE_FILES, CAMPAIGN_FILE)
# Only where a communication prescreen ran (results/prescreen/): earlier campaigns have none.
PRESCREEN_FILE = "prescreen.csv"


def pipeline_paths(workdir: str | Path = ".") -> dict[str, Path]:
    """Where the pipeline keeps each derived file under its working directory."""
    tables_dir = Path(workdir) / PIPELINE_TABLES
    return {**{name: tables_dir / name for name in TABLE_FILES}, CAMPAIGN_FILE: Path(workdir) / PIPELINE_MANIFEST}


@dataclass(frozen=True)
class Derived:
    runs: pd.DataFrame
    cells: pd.DataFrame
    files: dict[str, bytes]  # FILES → their bytes

    def write(self, paths: dict[str, str | Path]) -> None:
        """Write each file to its path (`paths`: FILES → path, e.g. pipeline_paths()); the
        prescreen's table, where there is one, beside cells.csv unless `paths` names it."""
        for name, content in self.files.items():
            path = Path(paths.get(name) or Path(paths["cells.csv"]).parent / name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)


def flops_counts(paths) -> dict[str, float]:
    """Training FLOPs per sample by model, from the FLOPs rule's files (results/flops/*.json)."""
    counts = {}
    for path in paths:
        counted = json.loads(Path(path).read_text())
        counts[counted["model"]] = counted["train_flops_per_sample"]
    return counts


def derive(
    experiment: Grid,
    config: dict,
    root: str | Path = ".",
    flops: dict[str, float] | None = None,
    planned: dict | None = None,
) -> Derived:
    """Every derived file of the runs of `experiment` whose raw logs lie below `root`, with the
    config's analysis settings (the schema's defaults where `config` has none); `planned`: what
    planning knew, for campaign.json (dlbench.planning.summary.planned_record), to which the
    device-hours the runs held are added beside the estimate."""
    analysis = settings(config, "analysis")
    peak_tflops = settings(config, "run")[col.peak_tflops]
    runs, cells, curves = tables.build_with_curves(
        experiment, root, analysis["noisy_cv"], flops, peak_tflops, analysis["convergence_tolerance"]
    )
    screened = prescreen.table(root, settings(config, col.prescreen)["min_share"])
    if screened is not None:
        cells = prescreen.flag_cells(cells, runs, screened)
    files = {
        "runs.csv": tables.csv_bytes(RUNS.validated(runs)),
        "cells.csv": tables.csv_bytes(CELLS.validated(cells)),
        "cells.md": tables.markdown(cells, experiment.protocol, tables.emulated(cells, config)).encode(),
        "environment.json": environment.to_json(environment.table(runs, root)).encode(),
        losses.LOSSES_FILE: tables.csv_bytes(curves),
        CAMPAIGN_FILE: manifest_bytes(
            measured_manifest(runs, root, experiment.protocol, _with_measured(planned, runs, root))
        ),
    }
    if screened is not None:
        files[PRESCREEN_FILE] = tables.csv_bytes(screened)
    return Derived(runs, cells, files)


def _with_measured(planned: dict | None, runs: pd.DataFrame, root: str | Path) -> dict | None:
    if not planned or "cost" not in planned:
        return planned
    held = cost.measured_device_hours(runs, root)
    return {**planned, "cost": {**planned["cost"], "measured_device_hours": round(held, 4)}}
