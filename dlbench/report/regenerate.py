"""Regenerate a measured campaign's tables and report from its raw step logs alone, the way the
pipeline makes them: the one derivation (dlbench.analysis.derive, as the aggregate rule), the
references rule's comparison and the report rule's page. Every file is byte-identical each time,
in any process and any directory -- no wall clock (the report's date is SOURCE_DATE_EPOCH or the
runs' own), seeded bootstraps, sorted keys, a campaign id made from the raw logs."""

from __future__ import annotations

import tempfile
from pathlib import Path

from dlbench import report
from dlbench.analysis import profiles, references, tables
from dlbench.analysis.derive import FILES, derive, flops_counts, pipeline_paths
from dlbench.planning import origins
from dlbench.planning.config import REPO, checked_grid
from dlbench.planning.grid import Grid
from dlbench.planning.schema import settings
from dlbench.planning.summary import planned_record

OUTPUTS = (*FILES, "references.csv", "index.html")
FLOPS_DIR = Path("results/flops")
# A committed measured campaign (campaigns/<name>/, docs/campaigns.md) keeps the config files
# its pipeline ran with here, merged in name order as Snakemake merges --configfile files.
CONFIG_DIR = Path("config")


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
    planned: dict | None = None,
) -> dict[str, Path]:
    """Write OUTPUTS under `out` (output_paths) from the raw logs below `root`; returns their paths. `flops`:
    training FLOPs per sample by model (default: the pipeline's results/flops/*.json under `root`,
    whose counts the pipeline's cells were made with)."""
    root, paths = Path(root), output_paths(out)
    if flops is None:
        flops = flops_counts(sorted((root / FLOPS_DIR).glob("*.json")))
    derived = derive(experiment, config, root, flops, planned)
    derived.write(paths)
    if experiment.profiled:  # the profiles rule's table, ranked again from the traces
        paths[profiles.PROFILES_FILE] = paths["cells.csv"].parent / profiles.PROFILES_FILE
        paths[profiles.PROFILES_FILE].write_bytes(tables.csv_bytes(profiles.table(experiment.profiled, root)))
    reference_settings = settings(config, "references")
    published = published_path or Path(REPO, reference_settings["published"])  # relative: to the repository
    compared = references.compare(derived.cells, reference_settings, published)
    paths["references.csv"].write_bytes(tables.csv_bytes(compared))
    html = report.render_files(
        paths["cells.csv"],
        paths["runs.csv"],
        experiment.protocol,
        config,
        paths["references.csv"],
        paths["environment.json"],
        published_path=published,
        shown_from=out,
    )
    paths["index.html"].parent.mkdir(parents=True, exist_ok=True)
    paths["index.html"].write_text(html, encoding="utf-8")
    return paths


def campaign_config_files(campaign: str | Path) -> list[str]:
    """A committed campaign's config files, in the order its pipeline was given them (by name)."""
    files = sorted(map(str, (Path(campaign) / CONFIG_DIR).glob("*.yaml")))
    if not files:
        raise FileNotFoundError(f"{Path(campaign) / CONFIG_DIR}: no *.yaml (the campaign's config files)")
    return files


def campaign_config(campaign: str | Path) -> dict:
    """The config a committed campaign's pipeline ran with: its config files, merged in order as
    the pipeline merged them (they are the whole experiment, planning/origins.py). run.python
    named interpreters on the machine that ran; deriving needs none of them."""
    config = origins.merged(campaign_config_files(campaign))
    config.get("run", {}).pop("python", None)
    return config


def regenerate_campaign(campaign: str | Path, out: str | Path) -> dict[str, Path]:
    """A committed campaign's tables, manifest and report, made again under `out` from its raw logs."""
    config = campaign_config(campaign)
    experiment = checked_grid(config)
    planned = planned_record(experiment, config, campaign_config_files(campaign), None, REPO)
    return regenerate(experiment, campaign, out, config, planned=planned)


def check_campaign(campaign: str | Path) -> list[str]:
    """The committed files that differ from (or are missing beside) a fresh regeneration."""
    with tempfile.TemporaryDirectory() as out:
        made = regenerate_campaign(campaign, out)
        committed = {name: Path(campaign) / path.relative_to(out) for name, path in made.items()}
        return [
            f"{committed[name]}: {'missing' if not committed[name].exists() else 'differs from its regeneration'}"
            for name in made
            if not committed[name].exists() or committed[name].read_bytes() != made[name].read_bytes()
        ]
