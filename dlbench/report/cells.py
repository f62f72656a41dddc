"""The report's throughput tables: one entry per cell, linked from the findings by its id."""

from __future__ import annotations

import re

import pandas as pd
from markupsafe import Markup, escape

from dlbench import labels
from dlbench.analysis import sanity, tables
from dlbench.analysis.columns import col
from dlbench.analysis.stats import finite
from dlbench.coords import SINGLE_DEVICE, TRAINING_DEFAULTS, CellKey
from dlbench.findings import vocabulary as fnd

REASON_CHARS = 400  # a failure reason longer than this is cut in the notes (full text on hover)


def cell_id(key: CellKey) -> str:
    """The HTML id of a cell's table entry (coordinates are safe names, see coords.py). The
    report shows a cell's training options in its strategy (labels.with_training_in_strategy)."""
    names = [str(v) for k, v in key.as_dict().items() if k not in TRAINING_DEFAULTS]
    return "cell-" + "-".join(names).replace("+", "-")


def compact_reason(reason: str) -> str:
    """`rank 0: oom: X; rank 1: oom: X | rank 0: oom: X` → `ranks 0, 1: oom: X` (one line per distinct message)."""
    by_message: dict[str, list[str]] = {}
    for part in (p.strip() for run in reason.split(" | ") for p in run.split("; ")):
        if not part:
            continue
        match = re.fullmatch(r"rank (\S+): (.*)", part, flags=re.DOTALL)
        ranks, message = ([match.group(1)], match.group(2)) if match else ([], part)
        by_message.setdefault(message, [])
        by_message[message] += [r for r in ranks if r not in by_message[message]]
    return "; ".join(
        (f"rank{'s' if len(ranks) > 1 else ''} {', '.join(ranks)}: " if ranks else "") + message
        for message, ranks in by_message.items()
    )


def finding_html(finding: fnd.Finding) -> Markup:
    """A finding with every number marked up: linked to its table cell, its cells on hover."""
    out = []
    for part in finding.parts:
        if not isinstance(part, fnd.Number):
            out.append(escape(part))
            continue
        names = [labels.cell_label(k) for k in part.cells[:8]] + (["…"] if len(part.cells) > 8 else [])
        title = f"{part.quantity} from: " + "; ".join(names)
        if len(part.cells) <= 2:
            out.append(
                Markup('<a class="num" href="#{}" title="{}">{}</a>').format(cell_id(part.cells[0]), title, part.text)
            )
        else:
            out.append(Markup('<span class="num" title="{}">{}</span>').format(title, part.text))
    return Markup("").join(out)


def throughput_tables(cells: pd.DataFrame, emulated: frozenset = frozenset()) -> list[dict]:
    """Per model/batch/precision/data: rows framework (strategy), columns scales.

    The 1-device column shows the single-process cell in every row of its framework.
    Each entry carries the cell's id (first appearance only), its text (marked where its
    (framework, precision) is in `emulated`, analysis.tables.emulated), speedup and
    efficiency, CSS classes, and a footnote number when the cell has a reason.
    """
    out = []
    for (model, batch, precision, data), group in cells.groupby(fnd.GROUP, sort=True):
        scales = labels.sorted_scales(group[col.scale])
        rows, notes, seen = [], [], set()
        for fw in sorted(group[col.framework].unique()):
            mine = group[group[col.framework] == fw]
            strategies = sorted(s for s in mine[col.strategy].unique() if s != SINGLE_DEVICE) or [SINGLE_DEVICE]
            for strategy in strategies:
                entries = []
                for scale in scales:
                    wanted = SINGLE_DEVICE if labels.devices(scale) == 1 else strategy
                    match = mine[(mine[col.scale] == scale) & (mine[col.strategy] == wanted)]
                    entries.append(None if match.empty else _table_entry(match.iloc[0], seen, notes, emulated))
                rows.append({"label": labels.series_label(fw, strategy), col.framework: fw, "entries": entries})
        out.append(
            {
                "key": (model, batch, precision, data),
                "title": labels.group_title(model, batch, precision, data),
                "unit": labels.unit(model),
                "columns": [{col.scale: s, "label": labels.caict(s), col.devices: labels.devices(s)} for s in scales],
                "rows": rows,
                "notes": notes,
                "cells": len(group),
                "numbers": int(group[col.throughput].map(finite).sum()),
            }
        )
    return out


def _note(key: CellKey, status: str, reason: str, notes: list) -> int:
    """The footnote number of a cell's reason (one footnote per cell)."""
    existing = next((n for n in notes if n["key"] == key), None)
    if existing is None:
        existing = {
            col.n: len(notes) + 1,
            "key": key,
            "label": labels.cell_label(key),
            col.status: labels.status_label(status),
            col.reason: reason[:REASON_CHARS] + ("…" if len(reason) > REASON_CHARS else ""),
            "full_reason": reason,
        }
        notes.append(existing)
    return existing[col.n]


def _hover(cell: pd.Series, key: CellKey, status: str, has_number: bool) -> str:
    hover = [labels.cell_label(key), f"status {status}"]
    if labels.text(cell.get(col.sanity)):
        hover.append(f"sanity {labels.sanity_label(cell[col.sanity])}")
    if has_number:
        hover.append(f"{cell.get(col.statistic, '')} of {int(cell[col.n])}/{int(cell[col.repeats])} repeats")
        if labels.text(cell.get(col.repeats_stop)):
            hover.append(labels.text(cell.get(col.repeats_stop)))
        if finite(cell.get(col.cv)):
            hover.append(f"CV {cell[col.cv]:.2f}")
        if finite(cell.get(col.tflops)):
            hover.append(f"{cell[col.tflops]:.3g} TFLOP/s")
        if finite(cell.get(col.mfu)):
            hover.append(f"MFU {cell[col.mfu]:.1%} of {cell.get(col.peak_basis, '')}")
        if cell.get(col.python_env) == "site":
            hover.append(labels.SITE_ENV_TEXT)
        if labels.text(cell.get(col.energy_note)):
            hover.append(f"energy {cell[col.energy_note]}")
    return " · ".join(hover)


def _ci_text(cell: pd.Series, has_number: bool) -> str:
    if has_number and finite(cell.get(col.ci95_low)) and finite(cell.get(col.ci95_high)) and int(cell[col.n]) > 1:
        return f"95% CI {cell[col.ci95_low]:.1f}–{cell[col.ci95_high]:.1f}"
    return ""


def _tflops_text(cell: pd.Series, has_number: bool) -> str:
    if not (has_number and finite(cell.get(col.tflops))):
        return ""
    text = f"{cell[col.tflops]:.3g} TFLOP/s" + (f" · MFU {cell[col.mfu]:.0%}" if finite(cell.get(col.mfu)) else "")
    if finite(cell.get(col.joules_per_sample)):
        text += f" · {cell[col.joules_per_sample]:.3g} J/sample, {cell[col.avg_power_w]:.0f} W"
    return text


def _table_entry(cell: pd.Series, seen: set, notes: list, emulated: frozenset = frozenset()) -> dict:
    key = fnd.cell_key(cell)
    status = labels.text(cell[col.status], "missing")
    has_number = finite(cell.get(col.throughput))
    suspect = cell.get(col.sanity) == sanity.SUSPECT
    classes = ["status-" + status] + ([col.noisy] if bool(cell.get(col.noisy, False)) is True else [])
    classes += ["sanity-suspect"] if suspect else []
    scaled = has_number and labels.devices(key.scale) > 1 and finite(cell.get(col.speedup))
    reason = compact_reason(labels.text(cell.get(col.reason)))
    if suspect:  # a cell whose training failed the sanity check: its note says why
        reason = "; ".join(r for r in (reason, labels.sanity_label(sanity.SUSPECT, cell[col.sanity_reason])) if r)
    noted = (status != "ok" and (reason or not has_number)) or suspect
    note = _note(key, sanity.SUSPECT if status == "ok" else status, reason, notes) if noted else None
    entry = {
        "id": None if key in seen else cell_id(key),
        "text": tables.cell_text(cell, emulated),
        "has_number": has_number,
        "ci": _ci_text(cell, has_number),
        col.tflops: _tflops_text(cell, has_number),
        col.speedup: f"{cell[col.speedup]:.2f}×" if scaled else "",
        col.efficiency: f"{cell[col.efficiency]:.2f}" if scaled else "",
        "classes": " ".join(classes),
        "note": note,
        "title": _hover(cell, key, status, has_number),
    }
    seen.add(key)
    return entry
