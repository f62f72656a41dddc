"""Energy per sample, average power and MFU's basis: from the step logs' `energy` footers
(dlbench.launch.energy) and the devices' dense peaks (dlbench.devices). Analysis environment.
"""

from __future__ import annotations

import math

from dlbench.analysis.columns import col
from dlbench.devices import peak

NOT_MEASURED = "not measured"


def run_energy(logs, samples: int) -> dict:
    """A run's energy columns from its ranks' footers: joules over all ranks' devices, per
    measured sample, and average power over the longest rank's window."""
    records = [(log.footer or {}).get("energy") for log in logs]
    names = [d["name"] for r in records if r and r.get("measured") for d in r[col.devices]]
    row = {col.energy_j: math.nan, col.joules_per_sample: math.nan, col.avg_power_w: math.nan, col.energy_note: ""}
    row[col.device_name] = names[0] if names else logs[0].header["framework"].get("device_name", "")
    if any(r is None for r in records):
        row[col.energy_note] = f"{NOT_MEASURED}: the step log has no energy record (schema dlbench.steplog/1)"
        return row
    missing = [r[col.reason] for r in records if not r["measured"]]
    if missing:
        row[col.energy_note] = f"{NOT_MEASURED}: {missing[0]}"
        return row
    joules = sum(r["joules"] for r in records)
    window = max(r[col.window_s] for r in records)
    row.update(energy_j=joules, joules_per_sample=joules / samples if samples else math.nan)
    row[col.avg_power_w] = joules / window if window > 0 else math.nan
    if any(r["too_short"] for r in records):
        row[col.energy_note] = "window too short for the energy counter (fewer than 20 refreshes)"
    return row


def cell_energy(group) -> dict:
    """A cell's energy columns: means over its runs that measured energy; the first note."""
    columns = (col.joules_per_sample, col.avg_power_w)
    if col.joules_per_sample not in group:
        return {c: math.nan for c in columns} | {col.energy_note: "", col.device_name: ""}
    ok = group[group[col.status] == "ok"]
    out = {c: float(ok[c].dropna().mean()) if ok[c].notna().any() else math.nan for c in columns}
    notes = [n for n in group[col.energy_note].fillna("") if n]
    names = [n for n in group[col.device_name].fillna("") if n]
    return out | {col.energy_note: notes[0] if notes else "", col.device_name: names[0] if names else ""}


def mfu_basis(cells, peak_tflops: float) -> tuple[list[float], list[str]]:
    """Per cell: the per-device peak MFU divides by, and its name (run.peak_tflops wins)."""
    if peak_tflops:
        return [peak_tflops] * len(cells), [f"run.peak_tflops {peak_tflops:g} TFLOP/s"] * len(cells)
    names = cells[col.device_name] if col.device_name in cells else [""] * len(cells)
    found = [peak(str(n or ""), p) for n, p in zip(names, cells[col.precision], strict=True)]
    return [f[0] if f else math.nan for f in found], [f[1] if f else "" for f in found]


def energy_table(cells):
    """The cells with a number: J/sample, average W, MFU and the peak it divides by; None when
    no cell measured energy or knows its peak (then `not_measured_note` says why)."""
    import pandas as pd

    if cells.empty or col.joules_per_sample not in cells:
        return None
    rows = cells[cells[col.throughput].notna()]
    known = rows[col.joules_per_sample].notna() | rows.get(col.mfu, pd.Series(dtype=float)).notna()
    if not known.any():
        return None
    rows = rows[known]
    return pd.DataFrame(
        {
            "cell": [
                f"{r.framework} {r.model} {r.precision} {r.data} bs{r.batch} {r.scale}" for r in rows.itertuples()
            ],
            "J/sample": rows[col.joules_per_sample].round(3),
            "average W": rows[col.avg_power_w].round(1),
            "MFU": rows[col.mfu].map(lambda m: f"{m:.1%}" if m == m else ""),
            "peak": rows[col.peak_basis],
            "energy note": rows[col.energy_note],
        }
    )


def not_measured_note(cells) -> str:
    """One line for a table with no energy: the first reason the runs recorded."""
    notes = [n for n in cells.get(col.energy_note, []) if isinstance(n, str) and n]
    return f"Energy per sample and MFU: {notes[0]}." if notes else ""
