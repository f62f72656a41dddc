"""The report page: its data from the tables, rendered with Jinja2 (dlbench/templates/)."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2
import pandas as pd

from dlbench import labels
from dlbench.analysis import environment as environments
from dlbench.analysis import tables as analysis_tables
from dlbench.analysis.columns import col, read_cells, read_keyed, read_runs
from dlbench.analysis.losses import LOSSES_FILE
from dlbench.analysis.stats import finite
from dlbench.findings import grid as fnd
from dlbench.findings.checks import check_findings
from dlbench.plots import layout
from dlbench.provenance import sha256_file
from dlbench.report.campaigns import generated_text
from dlbench.report.campaigns import section as campaigns_section
from dlbench.report.cells import finding_html
from dlbench.report.checks import section as checks_section
from dlbench.report.prescreen import section as prescreen_section
from dlbench.report.profiles import profiles_section
from dlbench.report.sections import method, model_sections, published_vs_measured, summary_figure

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
SUMMARY_FINDINGS = 6  # a model with more findings: the summary shows 3, its section groups them by topic
OPEN_TABLES = 4  # a model with more throughput tables: each collapses (<details>), the first open


def _status_order(status: str) -> int:
    return list(labels.STATUS_MEANING).index(status) if status in labels.STATUS_MEANING else len(labels.STATUS_MEANING)


def and_join(items) -> str:
    items = [str(i) for i in items]
    return " and ".join(items) if len(items) < 3 else ", ".join(items[:-1]) + " and " + items[-1]


def _template() -> jinja2.Template:
    return environment_of_templates().get_template("report.html.j2")


def environment_of_templates() -> jinja2.Environment:
    """The templates' environment: the page's and each section's (templates/sections/)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["and_join"] = and_join
    env.filters["fw"] = labels.framework_label
    return env


def page_sections(context: dict) -> list[dict]:
    """The page's sections in order, each with its template (templates/sections/) and its
    entries in the contents; a section whose data is empty (None) is left out. A new section is
    one more entry here and one more template."""
    models = context["models"]
    entries = [
        ("summary", "Summary", True),
        ("method", "Test method", True),
        ("environment", "Environment", True),
        ("prescreen", "Communication prescreen", context["prescreen"]),  # not a column: a section
        ("reading", "How to read the tables", True),
        ("models", [(m["id"], m["title"]) for m in models], bool(models)),
        ("checks", "Measurement checks", context["checks"]),
        ("references", "Published vs measured", context["references"]),
        ("campaigns", "Published campaigns", context["campaigns"]),
        ("profiles", "Profiles", context["profiles"]),
    ]
    return [
        {"template": f"sections/{name}.html.j2", "nav": title if isinstance(title, list) else [(name, title)]}
        for name, title, present in entries
        if present
    ]


def grid_size(cells: pd.DataFrame) -> dict | None:
    """The grid's factors (`5 frameworks`, …) and how many of their combinations it holds."""
    if cells.empty:
        return None
    factors = [
        (len(set(cells[column])), noun)
        for column, noun in (
            (col.framework, "framework"),  # not a column: its noun
            (col.model, "model"),  # not a column: its noun
            (col.batch, "batch size"),
            (col.data, "kind of data"),
            (col.precision, "precision"),  # not a column: its noun
            (col.scale, "scale"),  # not a column: its noun
        )
    ]
    product = 1
    for n, _ in factors:
        product *= n
    return {
        "factors": [f"{n} {noun if n == 1 else _plural(noun)}" for n, noun in factors],
        # strategies add cells (several per framework beyond one device), exclusions remove some
        "combinations": product,
    }


def _plural(noun: str) -> str:
    return {"kind of data": "kinds of data", "batch size": "batch sizes"}.get(noun, noun + "s")


def _counts(cells: pd.DataFrame, runs: pd.DataFrame) -> dict:
    return {
        "runs": len(runs),
        "runs_ok": int((runs[col.status] == "ok").sum()) if not runs.empty else 0,
        "cells": len(cells),
        "cells_with_number": int(cells[col.throughput].map(finite).sum()) if not cells.empty else 0,
    }


def render(
    cells: pd.DataFrame,
    runs: pd.DataFrame,
    protocol: dict,
    config: dict,
    *,
    environment: dict | None = None,
    references: pd.DataFrame | None = None,
    generated: str | None = None,
    sources: dict[str, str] | None = None,
    campaigns: dict | None = None,
    prescreen: dict | None = None,
    curves: pd.DataFrame | None = None,
    profiles: dict | None = None,
    planned: dict | None = None,
) -> str:
    """The report as one HTML string. `environment`: the aggregate stage's environment table
    (dlbench.analysis.environment); without it, what runs.csv says. `planned`: what
    planning knew, from campaign.json: the config's departures from its preset and the schema
    with their origins, the estimated cost beside the measured one."""
    if not cells.empty:
        # Read back from CSV, n and repeats are floats where an N/A cell has none.
        cells = cells.assign(
            n=cells[col.n].fillna(0).astype(int),
            repeats=cells[col.repeats].fillna(0).astype(int),
        )
    cells, runs = labels.with_training_in_strategy(cells), labels.with_training_in_strategy(runs)
    noisy_cv = float(((config.get("analysis") or {}).get("noisy_cv")) or 0.1)
    reference_settings = config.get("references") or {}
    found = fnd.findings(cells, noisy_cv, runs) + check_findings(runs)
    found += fnd.reference_verdicts(references, float(reference_settings.get("tolerance", 0.1)))
    emulated = analysis_tables.emulated(cells, config)  # (framework, precision) pairs it emulated
    context = dict(
        generated=generated or generated_text(environment),
        protocol=protocol,
        method=method(protocol, config, cells, noisy_cv, runs),
        environment=environment if environment is not None else environments.from_runs(runs),
        overall=[finding_html(f) for f in found if f.model is None],
        summary_figure=summary_figure(cells),
        checks=checks_section(runs),
        models=model_sections(cells, runs, found, curves, emulated) if not cells.empty else [],
        references=published_vs_measured(references, reference_settings, found),
        counts=_counts(cells, runs),
        sources={"cells": "", "cells_sha256": "", "runs": "", "environment": "", **(sources or {})},
        statuses=sorted(set(cells[col.status]) - {"ok"}, key=_status_order) if not cells.empty else [],
        status_meaning=labels.STATUS_MEANING,
        sanity_meaning=labels.SANITY_MEANING,
        site_env=(labels.SITE_ENV_MARK, labels.SITE_ENV_TEXT) if _site_cells(cells) else None,
        emulated=(labels.EMULATED_MARK, _emulated_text(emulated)) if emulated else None,
        status_text={**labels.STATUS_TEXT, "partial": "* (n/N)"},
        colour=layout.colour,
        campaigns=campaigns,
        grid_size=grid_size(cells),
        summary_findings=SUMMARY_FINDINGS,
        open_tables=OPEN_TABLES,
        prescreen=prescreen,
        profiles=profiles,
        planned={"settings": [], "cost": None, **(planned or {})},
    )
    return _template().render(**context, sections=page_sections(context))


def _emulated_text(emulated: frozenset) -> str:
    """`PyTorch fp8 emulated: ...`, for the reading guide's mark."""
    pairs = ", ".join(f"{labels.framework_label(fw)} {precision}" for fw, precision in sorted(emulated))
    return f"{pairs} {labels.EMULATED_TEXT}"


def _site_cells(cells: pd.DataFrame) -> bool:
    return col.python_env in cells and bool((cells[col.python_env] == "site").any())


def render_files(
    cells_path: str | Path,
    runs_path: str | Path,
    protocol: dict,
    config: dict,
    references_path: str | Path | None = None,
    environment_path: str | Path | None = None,
    published_path: str | Path | None = None,
    shown_from: str | Path | None = None,
) -> str:
    """The report from the table files, as the pipeline writes them (references.csv and
    environment.json optional). `shown_from`: the page names the files relative to this
    directory (the pipeline's working directory), so that it does not depend on where it was made."""

    def shown(path) -> str:
        return str(Path(path).relative_to(shown_from)) if shown_from else str(path)

    cells, runs = read_cells(cells_path), read_runs(runs_path)
    references = None
    if references_path is not None and Path(references_path).exists():
        references = read_keyed(references_path)
    environment = None
    if environment_path is not None and Path(environment_path).exists():
        environment = environments.read(environment_path)
    sources = {"cells": shown(cells_path), "cells_sha256": sha256_file(cells_path), "runs": shown(runs_path)}
    return render(
        cells,
        runs,
        protocol,
        config,
        environment=environment,
        references=references,
        sources={**sources, "environment": shown(environment_path) if environment is not None else ""},
        campaigns=campaigns_section(
            cells,
            runs,
            protocol,
            published_path,
            config.get("references"),
            Path(cells_path).parent.parent / "campaign.json",
        ),
        prescreen=prescreen_section(Path(cells_path).parent, cells, _min_share(config)),
        curves=_curves(Path(cells_path).parent / LOSSES_FILE),
        profiles=profiles_section(Path(cells_path).parent),
        planned=_planned(Path(cells_path).parent.parent / "campaign.json"),
    )


def _planned(manifest_path: Path) -> dict:
    """campaign.json's departures and cost (campaigns made before it recorded them have none)."""
    if not manifest_path.exists():
        return {}
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    return {key: manifest[key] for key in ("settings", "cost") if manifest.get(key)}


def _curves(path: Path) -> pd.DataFrame | None:
    """losses.csv beside cells.csv (campaigns made before it have none)."""
    return read_keyed(path) if path.exists() else None


def _min_share(config: dict) -> float:
    from dlbench.planning.schema import settings

    return settings(config, col.prescreen)["min_share"]
