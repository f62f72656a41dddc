"""The report's profiles section (config `profile`; docs/report.md, Profiles): per cell, each
framework's top operations by self time side by side, with a link to its trace. From
profiles.csv beside cells.csv; nothing where no run was profiled."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dlbench import labels
from dlbench.analysis.columns import col, read_keyed
from dlbench.analysis.profiles import PROFILES_FILE
from dlbench.coords import CELL_FIELDS, PROFILE_REPEAT, RUN_PATH_TEMPLATE, RunCoords, training_suffix

# What makes frameworks' profiles comparable: the cell but who trained it and how it was split.
SAME_CELL = [col.model, col.precision, col.data, col.batch, col.scale, col.activation_checkpointing, col.grad_accum]


def _trace_link(r: pd.Series) -> str:
    """The trace, relative to the report (results/report/ → results/runs/)."""
    run = RunCoords.from_dict({**{k: r[k] for k in CELL_FIELDS}, col.repeat: PROFILE_REPEAT})
    return f"../runs/{RUN_PATH_TEMPLATE.format(**run.wildcards())}/{r['trace']}"


def _column(rows: pd.DataFrame) -> dict:
    first = rows.iloc[0]
    head = f"{labels.framework_label(first[col.framework])} ({first[col.strategy]})"
    if first[col.reason]:
        return {"head": head, "link": "", "profiler": first["profiler"], "why": first[col.reason], "ops": []}
    ops = [f"{r['operation']} — {r['self_ms_per_step']:.3g} ms ({r['share']:.0%})" for _, r in rows.iterrows()]
    return {"head": head, "link": _trace_link(first), "profiler": first["profiler"], "why": "", "ops": ops}


def profiles_section(tables_dir: Path) -> dict | None:
    path = Path(tables_dir) / PROFILES_FILE
    if not path.exists():
        return None
    table = read_keyed(path)
    if table.empty:
        return None
    table[col.reason] = table[col.reason].astype(object).fillna("")
    groups = []
    for key, cell in table.groupby(SAME_CELL, sort=True):
        model, precision, data, batch, scale, checkpointing, accum = key
        training = training_suffix(checkpointing, int(accum))
        title = f"{labels.model_title(model)}, {labels.setup(batch, precision, data)}, {scale}{training}"
        columns = [_column(rows) for _, rows in cell.groupby([col.framework, col.strategy], sort=True)]
        depth = max(len(c["ops"]) for c in columns)
        groups.append({"title": title, "columns": columns, "rows": range(depth)})
    return {"groups": groups}
