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

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from dlbench import environment, tables
from dlbench.labels import text

SCHEMA = "dlbench.campaign/1"
MANIFEST = "manifest.json"
PIPELINE_TABLES = Path("results/tables")
PIPELINE_MANIFEST = Path("results/campaign.json")
# Manifest keys whose values decide whether two campaigns measured the same thing.
PROTOCOL_KEYS = ("warmup_steps", "measured_steps", "statistic", "repeats")


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
        """Per cell key (CELL_FIELDS order), the throughputs of its repeats that produced one."""
        from dataclasses import astuple

        from dlbench.comparisons import repeats_by_cell

        return {astuple(key): values.tolist() for key, values in repeats_by_cell(self.runs).items()}


def _read_table(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise FileNotFoundError(f"campaign table {path} does not exist")
    return pd.read_csv(path, dtype={"batch": str})


def load(path: str | Path) -> Campaign:
    """A campaign directory or a pipeline working directory (see the module's docstring)."""
    path = Path(path)
    if (path / MANIFEST).exists():
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        if manifest.get("schema") != SCHEMA:
            raise ValueError(f"{path / MANIFEST}: schema {manifest.get('schema')!r}, expected {SCHEMA}")
        runs = _read_table(path / "runs.csv") if (path / "runs.csv").exists() else None
        root = (path / manifest["root"]) if manifest.get("root") else path
        return Campaign(manifest, _read_table(path / "cells.csv"), runs, root)
    if (path / PIPELINE_TABLES / "cells.csv").exists():
        runs = _read_table(path / PIPELINE_TABLES / "runs.csv")
        cells = _read_table(path / PIPELINE_TABLES / "cells.csv")
        stored = path / PIPELINE_MANIFEST
        manifest = json.loads(stored.read_text(encoding="utf-8")) if stored.exists() else measured_manifest(runs, path)
        return Campaign(manifest, cells, runs, path)
    raise FileNotFoundError(
        f"{path} is not a campaign: no {MANIFEST} and no {PIPELINE_TABLES / 'cells.csv'} (run the pipeline there first)"
    )


def manifest_bytes(manifest: dict) -> bytes:
    return (json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


def save(campaign: Campaign, directory: str | Path) -> Path:
    """Write a campaign directory (manifest, cells, runs); raw logs stay where they are."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    manifest = dict(campaign.manifest)
    if campaign.root is not None:
        manifest["root"] = str(Path(campaign.root).resolve())
    (directory / MANIFEST).write_bytes(manifest_bytes(manifest))
    (directory / "cells.csv").write_bytes(tables.csv_bytes(campaign.cells))
    if campaign.runs is not None:
        (directory / "runs.csv").write_bytes(tables.csv_bytes(campaign.runs))
    return directory


def measured_manifest(runs: pd.DataFrame, root: str | Path, protocol: dict | None = None) -> dict:
    """A measured campaign's manifest, from the step-log headers of its runs (the campaign's
    own dates, never the time it is read); `protocol`: the grid's, where headers lack one."""
    headers = environment.read_headers(runs, root)
    first = headers[0] if headers else {}
    first = first if first.get("protocol") else {**first, "protocol": protocol or {}}
    provenance = [h.get("provenance") or {} for h in headers]
    starts = sorted(text(h.get("start_time")) for h in headers if h.get("start_time"))
    summary = environment.summarize(runs, headers)
    return {
        "schema": SCHEMA,
        "id": campaign_id(runs, starts[-1] if starts else ""),
        "kind": "measured",
        "source": "dlbench pipeline runs",
        "date": starts[-1] if starts else "",
        "started": starts[0] if starts else "",
        "config_sha256": _unique(p.get("config_sha256") for p in provenance),
        "protocol": {k: (first.get("protocol") or {}).get(k) for k in PROTOCOL_KEYS}
        | {"preset": (first.get("protocol") or {}).get("preset")},
        "image_size": _unique(h.get("image_size") for h in headers),
        "software": {
            "frameworks": {s["framework"]: s["version"] for s in summary["software"]},
            "env_locks": sorted({text(p.get("env_lock_sha256")) for p in provenance} - {""}),
            "containers": sorted({text((p.get("container") or {}).get("digest")) for p in provenance} - {""}),
            "python": _unique(h.get("python") for h in headers),
            "dlbench_git": _unique(((p.get("git") or {}).get("commit")) for p in provenance),
        },
        "hardware": {
            "device": _unique(h.get("device") for h in headers),
            "gpu": _unique("; ".join((p.get("gpu") or {}).get("gpus", [])) for p in provenance),
            "gpu_driver": _unique(
                d.get("driver_version") for p in provenance for d in (p.get("gpu") or {}).get("devices", [])
            ),
            "cpu_model": _unique(p.get("cpu_model") for p in provenance),
            "nodes": sorted({text(h.get("node")) for h in headers} - {""}),
        },
    }


def campaign_id(runs: pd.DataFrame, date: str) -> str:
    """A measured campaign's id, made from what it holds: the runs' last start time and a digest
    of its raw logs (their sha256, as runs.csv records them). The same logs give the same id in
    any directory (it was the directory's name)."""
    hashes = sorted(h for cell in runs.get("log_sha256", []) for h in text(cell).split(";") if h)
    digest = hashlib.sha256("\n".join(hashes).encode()).hexdigest()[:10]
    stamp = re.sub(r"[^0-9T]", "", date)[:13] or "undated"
    return f"{stamp}-{digest}"


def _unique(values) -> str:
    """The distinct values, in order, joined ("" when none was recorded)."""
    return ", ".join(dict.fromkeys(text(v) for v in values if text(v)))


def write_pipeline_manifest(root: str | Path, protocol: dict | None = None) -> Path:
    """results/campaign.json of a pipeline working directory, from its tables and logs."""
    root = Path(root)
    runs = _read_table(root / PIPELINE_TABLES / "runs.csv")
    path = root / PIPELINE_MANIFEST
    path.write_bytes(manifest_bytes(measured_manifest(runs, root, protocol)))
    return path
