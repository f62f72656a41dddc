"""A measured campaign's manifest (`results/campaign.json`): where its numbers come from --
source, hardware, software, protocol, dates, config hash -- read from the step-log headers of its
runs. The aggregate rule writes it (dlbench.analysis.derive); dlbench.campaigns reads it."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pandas as pd

from dlbench.analysis import environment
from dlbench.analysis.columns import TABLES_SCHEMA, col
from dlbench.labels import text

SCHEMA = "dlbench.campaign/1"
PIPELINE_TABLES = Path("results/tables")
PIPELINE_MANIFEST = Path("results/campaign.json")
# Manifest keys whose values decide whether two campaigns measured the same thing.
PROTOCOL_KEYS = ("warmup_steps", "measured_steps", "statistic", "repeats")  # not a column: the protocol's


def manifest_bytes(manifest: dict) -> bytes:
    return (json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


def measured_manifest(
    runs: pd.DataFrame, root: str | Path, protocol: dict | None = None, planned: dict | None = None
) -> dict:
    """A measured campaign's manifest, from the step-log headers of its runs (the campaign's
    own dates, never the time it is read); `protocol`: the grid's, where headers lack one;
    `planned`: what planning knew (the config's departures with their origins, the cost
    estimate: dlbench.planning.summary.planned_record)."""
    headers = environment.read_headers(runs, root)
    first = headers[0] if headers else {}
    first = first if first.get("protocol") else {**first, "protocol": protocol or {}}
    provenance = [h.get("provenance") or {} for h in headers]
    sites = [p["site_environment"] for p in provenance if p.get("site_environment")]
    starts = sorted(text(h.get("start_time")) for h in headers if h.get("start_time"))
    summary = environment.summarize(runs, headers)
    return {
        "schema": SCHEMA,
        "tables_schema": TABLES_SCHEMA,  # runs.csv's and cells.csv's (dlbench.analysis.columns)
        "id": campaign_id(runs, starts[-1] if starts else ""),
        "kind": "measured",
        "source": "dlbench pipeline runs",
        "date": starts[-1] if starts else "",
        "started": starts[0] if starts else "",
        "config_sha256": _unique(p.get("config_sha256") for p in provenance),
        "protocol": {k: (first.get("protocol") or {}).get(k) for k in PROTOCOL_KEYS}
        | {"preset": (first.get("protocol") or {}).get("preset")},
        **(planned or {}),
        "image_size": _unique(h.get("image_size") for h in headers),  # not a column
        "software": {
            "frameworks": {s[col.framework]: s["version"] for s in summary["software"]},
            "env_locks": sorted({text(p.get("env_lock_sha256")) for p in provenance} - {""}),
            # run.python: a site's own Python stands in for a lock, named by its distributions' hash.
            "site_environments": sorted(
                {f"{s.get('python')} distributions sha256 {s.get('distributions_sha256')}" for s in sites}
            ),
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
            "nodes": sorted({text(h.get("node")) for h in headers} - {""}),  # not a column
        },
    }


def campaign_id(runs: pd.DataFrame, date: str) -> str:
    """A measured campaign's id, made from what it holds: the runs' last start time and a digest
    of its raw logs (their sha256, as runs.csv records them). The same logs give the same id in
    any directory (it was the directory's name)."""
    hashes = sorted(h for cell in runs.get(col.log_sha256, []) for h in text(cell).split(";") if h)
    digest = hashlib.sha256("\n".join(hashes).encode()).hexdigest()[:10]
    stamp = re.sub(r"[^0-9T]", "", date)[:13] or "undated"
    return f"{stamp}-{digest}"


def _unique(values) -> str:
    """The distinct values, in order, joined ("" when none was recorded)."""
    return ", ".join(dict.fromkeys(text(v) for v in values if text(v)))
