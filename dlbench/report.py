"""The report document: one self-contained HTML page from the aggregated tables only."""

from __future__ import annotations

import base64
import datetime as dt
from pathlib import Path

import jinja2
import pandas as pd

from dlbench import tables

TEMPLATES = Path(__file__).parent / "templates"


def embed_png(path: str) -> str:
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode()


def render(cells: pd.DataFrame, runs: pd.DataFrame, figures: dict[str, str], protocol: dict, config: dict) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True)
    ok_runs = runs[runs["status"] == "ok"]
    environment = (
        ok_runs.groupby("framework")
        .agg(version=("framework_version", "first"), nodes=("nodes", lambda s: ", ".join(sorted(set(s)))))
        .reset_index()
        .to_dict("records")
        if not ok_runs.empty
        else []
    )
    return env.get_template("report.html.j2").render(
        generated=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        protocol=protocol,
        run=config["run"],
        grid=config["grid"],
        n_runs=len(runs),
        n_ok=int((runs["status"] == "ok").sum()),
        tables=[(title, table.to_html(classes="results", border=0)) for title, table in tables.pivot(cells)],
        problems=cells[cells["status"] != "ok"].to_dict("records"),
        status_text=tables.STATUS_TEXT,
        environment=environment,
        figures={name: embed_png(path) for name, path in figures.items()},
    )
