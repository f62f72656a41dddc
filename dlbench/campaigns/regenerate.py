"""Regenerate a measured campaign's tables and report from its raw step logs alone, the way the
pipeline makes them (aggregate and report rules): every file byte-identical each time, in any
process -- no wall clock (the report's date is SOURCE_DATE_EPOCH or the runs' own), seeded
bootstraps, sorted keys."""

from __future__ import annotations

from pathlib import Path

from dlbench import environment, report, tables
from dlbench.campaigns.campaign import manifest_bytes, measured_manifest
from dlbench.grid import Grid

OUTPUTS = ("runs.csv", "cells.csv", "cells.md", "environment.json", "campaign.json", "index.html")


def regenerate(
    experiment: Grid, root: str | Path, out: str | Path, config: dict, published_path: str | Path | None = None
) -> dict[str, Path]:
    """Write OUTPUTS under `out` from the raw logs below `root`; returns their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / name for name in OUTPUTS}
    runs, cells = tables.build(experiment, root, noisy_cv=float(config.get("analysis", {}).get("noisy_cv", 0.1)))
    paths["runs.csv"].write_bytes(tables.csv_bytes(runs))
    paths["cells.csv"].write_bytes(tables.csv_bytes(cells))
    paths["cells.md"].write_text(tables.markdown(cells, experiment.protocol), encoding="utf-8")
    paths["environment.json"].write_text(environment.to_json(environment.table(runs, root)), encoding="utf-8")
    paths["campaign.json"].write_bytes(manifest_bytes(measured_manifest(runs, root, experiment.protocol)))
    html = report.render_files(
        paths["cells.csv"],
        paths["runs.csv"],
        experiment.protocol,
        config,
        environment_path=paths["environment.json"],
        published_path=published_path,
    )
    paths["index.html"].write_text(html, encoding="utf-8")
    return paths
