"""Regenerate a measured campaign's tables and report from its raw step logs alone, the way the
pipeline makes them: the one derivation (dlbench.analysis.derive, as the aggregate rule), the
references rule's comparison and the report rule's page. Every file is byte-identical each time,
in any process and any directory -- no wall clock (the report's date is SOURCE_DATE_EPOCH or the
runs' own), seeded bootstraps, sorted keys, a campaign id made from the raw logs."""

from __future__ import annotations

from pathlib import Path

from dlbench import references, report, tables
from dlbench.analysis.derive import FILES, derive, flops_counts, pipeline_paths
from dlbench.config import REPO, schema_defaults
from dlbench.grid import Grid

OUTPUTS = (*FILES, "references.csv", "index.html")
FLOPS_DIR = Path("results/flops")


def output_paths(out: str | Path) -> dict[str, Path]:
    """OUTPUTS → where they go under `out`: the pipeline's own layout (results/tables/...)."""
    tables_dir = pipeline_paths(out)["cells.csv"].parent
    paths = {**pipeline_paths(out), "references.csv": tables_dir / "references.csv"}
    return paths | {"index.html": Path(out) / "results" / "report" / "index.html"}


def regenerate(
    experiment: Grid,
    root: str | Path,
    out: str | Path,
    config: dict,
    published_path: str | Path | None = None,
    flops: dict[str, float] | None = None,
) -> dict[str, Path]:
    """Write OUTPUTS under `out` (output_paths) from the raw logs below `root`; returns their paths. `flops`:
    training FLOPs per sample by model (default: the pipeline's results/flops/*.json under `root`,
    whose counts the pipeline's cells were made with)."""
    root, paths = Path(root), output_paths(out)
    if flops is None:
        flops = flops_counts(sorted((root / FLOPS_DIR).glob("*.json")))
    derived = derive(experiment, config, root, flops)
    derived.write(paths)
    settings = {**schema_defaults("references"), **config.get("references", {})}
    published = published_path or Path(REPO, settings["published"])  # relative: to the repository
    paths["references.csv"].write_bytes(tables.csv_bytes(references.compare(derived.cells, settings, published)))
    html = report.render_files(
        paths["cells.csv"],
        paths["runs.csv"],
        experiment.protocol,
        config,
        paths["references.csv"],
        paths["environment.json"],
        published_path=published,
    )
    paths["index.html"].parent.mkdir(parents=True, exist_ok=True)
    paths["index.html"].write_text(html, encoding="utf-8")
    return paths
