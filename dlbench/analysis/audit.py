"""The audit: every number in the tables is provable from the raw step logs alone.

(1) every raw log still has the sha256 recorded when the tables were made (else: that file
was changed after the report); (2) the tables recomputed from the raw logs are
byte-identical to the stored ones; (3) a manifest maps each cell to its raw logs + sha256;
(4) every run that ran in a container (run.container) ran in the image its lock pins;
(5) cells.md and environment.json, where made, recompute byte for byte too, and the manifest
records the sha256 of the FLOPs inputs (results/flops/*.json) the cells' TFLOP/s came from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from dlbench.analysis import environment, profiles
from dlbench.analysis.columns import col
from dlbench.analysis.derive import CAMPAIGN_FILE, PRESCREEN_FILE, TABLE_FILES, derive, flops_counts
from dlbench.analysis.tables import csv_bytes
from dlbench.coords import CELL_FIELDS
from dlbench.images import podman as images
from dlbench.launch.container import RUNTIMES, image_name
from dlbench.planning.grid import Grid
from dlbench.provenance import sha256_file


@dataclass
class AuditResult:
    problems: list[str] = field(default_factory=list)
    manifest: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what a reader must know, not a failure

    @property
    def passed(self) -> bool:
        return not self.problems


def changed_logs(stored_runs: pd.DataFrame, root: Path) -> list[str]:
    """Raw logs whose content no longer matches the sha256 recorded in runs.csv."""
    problems = []
    for _, run in stored_runs.iterrows():
        files = [f for f in str(run.get(col.log_files) or "").split(";") if f]
        hashes = [h for h in str(run.get(col.log_sha256) or "").split(";") if h and h != "nan"]
        for path, recorded in zip(files, hashes, strict=False):
            full = root / path
            if not full.exists():
                problems.append(f"raw log {path} is missing (recorded sha256 {recorded})")
            elif sha256_file(full) != recorded:
                problems.append(
                    f"raw log {path} was changed after the tables were made "
                    f"(sha256 now {sha256_file(full)}, recorded {recorded})"
                )
    return problems


def image_problems(headers: list[dict], images_dir: Path) -> list[str]:
    """Runs whose header names an image digest other than the one its framework's lock pins."""
    problems: dict[str, str] = {}
    for header in headers:
        container = (header.get("provenance") or {}).get("container") or {}
        framework = (header.get("run") or {}).get("framework")
        if not container.get("runtime") or not framework:
            continue
        run = "/".join(str(v) for v in header["run"].values())
        runtime = RUNTIMES.get(container["runtime"])
        if runtime is None:
            problems[run] = f"run {run} ran in container runtime {container['runtime']!r}, which dlbench does not know"
            continue
        path, pinned = runtime.pinned(images_dir, image_name(framework, header.get("device") or "cpu"))
        if container.get("digest") != pinned:
            problems[run] = (
                f"run {run} ran in {framework} image {container.get('path')} {container.get('digest')}, "
                f"but {path} pins {pinned or 'nothing (no lock)'}"
            )
    return list(problems.values())


def site_environment_notes(headers: list[dict]) -> list[str]:
    """Frameworks that ran in a site's own Python (run.python): the logs hash its installed
    distributions, but no lock in this repository rebuilds it."""
    sites: dict[tuple[str, str], int] = {}
    for header in headers:
        site = (header.get("provenance") or {}).get("site_environment")
        if site:
            key = (header.get("run", {}).get("framework", "?"), environment.site_text(site))
            sites[key] = sites.get(key, 0) + 1
    return [f"{framework}: {what} ({n} rank logs)" for (framework, what), n in sorted(sites.items())]


def manifest(runs: pd.DataFrame) -> dict:
    cells: dict[str, list[dict]] = {}
    for _, run in runs.iterrows():
        key = "/".join(str(run[f]) for f in CELL_FIELDS)
        files = [f for f in str(run.get(col.log_files) or "").split(";") if f]
        hashes = str(run.get(col.log_sha256) or "").split(";")
        for path, digest in zip(files, hashes + [None] * len(files), strict=False):
            cells.setdefault(key, []).append({col.repeat: int(run[col.repeat]), "file": path, "sha256": digest or None})
    return {"cell_key": CELL_FIELDS, "cells": cells}


def audit(
    experiment: Grid,
    config: dict,
    tables_dir: Path,
    root: Path = Path("."),
    images_dir: Path | None = None,
    flops_files: list[str | Path] = (),
    planned: dict | None = None,
) -> AuditResult:
    """Check the stored tables under `tables_dir` (campaign.json beside it, as the pipeline
    keeps it) against the one derivation from the raw logs below `root`."""
    result = AuditResult()
    stored_runs_path, stored_cells_path = tables_dir / "runs.csv", tables_dir / "cells.csv"
    for path in (stored_runs_path, stored_cells_path):
        if not path.exists():
            result.problems.append(f"{path} does not exist: make the tables first")
    if result.problems:
        return result
    stored_runs = pd.read_csv(stored_runs_path, dtype=str, keep_default_na=False)
    result.problems += changed_logs(stored_runs, root)
    headers = environment.read_headers(stored_runs, root)
    result.problems += image_problems(headers, images_dir or images.images_dir())
    result.notes += site_environment_notes(headers)
    derived = derive(experiment, config, root, flops_counts(flops_files), planned)
    stored = {name: tables_dir / name for name in (*TABLE_FILES, PRESCREEN_FILE)}
    stored[CAMPAIGN_FILE] = tables_dir.parent / CAMPAIGN_FILE
    for name, content in derived.files.items():
        path = stored[name].resolve()
        required = name in ("runs.csv", "cells.csv")  # the others are checked where they were made
        if (required or path.exists()) and path.read_bytes() != content:
            result.problems.append(f"{path} differs from the one recomputed from the raw logs")
    result.manifest = manifest(derived.runs)
    result.manifest["flops_inputs"] = {str(p): sha256_file(p) for p in sorted(map(str, flops_files))}
    if experiment.profiled:
        result.problems += _profiles_problems(experiment, tables_dir, root)
        result.manifest["profiles"] = profiles.listed_files(experiment.profiled, root)
    return result


def _profiles_problems(experiment: Grid, tables_dir: Path, root: Path) -> list[str]:
    """profiles.csv against the one ranked again from the profiled runs' traces."""
    path = tables_dir / profiles.PROFILES_FILE
    if path.exists() and path.read_bytes() != csv_bytes(profiles.table(experiment.profiled, root)):
        return [f"{path.resolve()} differs from the one ranked again from the profiled runs' traces"]
    return []


def write(result: AuditResult, manifest_path: Path, verdict_path: Path) -> None:
    manifest_path.parent.mkdir(parents=True, exist_ok=True)
    manifest_path.write_text(json.dumps(result.manifest, indent=1, sort_keys=True) + "\n")
    verdict = "PASSED" if result.passed else "FAILED\n" + "\n".join(result.problems)
    notes = "".join(f"note: {note}\n" for note in result.notes)
    verdict_path.write_text(verdict + "\n" + notes)
