"""Peak memory per rank, from the step logs' footers: on a GPU the framework allocator's peak
(`device_memory`: PyTorch's caching allocator reservation where it has one, else the tensors'
peak; JAX's peak bytes in use; the whole run's, docs/gpu.md), on a CPU the process's peak
resident set over the measured window (`window_rss_mb`; the whole run's `max_rss_mb` where a
log has no window figure). A run's figure is its largest rank's: the rank that runs out first.
Beside it, an LLM run's estimate as planning made it (dlbench.planning.fit), from the run's
coordinates and its header's sequence length and device, and the compilers' where planning made
one (dlbench.planning.compiled: the working directory's copy, never made here)."""

from __future__ import annotations

import math
import os

from dlbench.analysis.columns import col
from dlbench.planning import compiled, fit

GIB = 2**30
DEVICE, HOST, HOST_RUN = "device allocator peak", "host peak RSS (measured window)", "host peak RSS (whole run)"


def rank_peak(log) -> tuple[float, str, float]:
    """(bytes, basis, capacity bytes or NaN) of one rank; NaN where its device's memory is not
    recorded (a GPU run's log older than `device_memory`: the host's RSS is not the GPU's)."""
    footer = log.footer or {}
    device = footer.get("device_memory")
    if device:
        peak = device.get("reserved_bytes") or device["peak_bytes"]
        return float(peak), DEVICE, float(device.get("limit_bytes") or math.nan)
    if (log.header or {}).get("device", "cpu") != "cpu":
        return math.nan, "", math.nan
    if footer.get("window_rss_mb") is not None:
        return float(footer["window_rss_mb"]) * 2**20, HOST, math.nan
    rss = footer.get("max_rss_mb")
    return (float(rss) * 2**20 if rss is not None else math.nan), HOST_RUN, math.nan


def run_memory(logs, coords, root=".") -> dict:
    """A run's memory columns: the largest rank's peak in GiB, what it measures, its share of
    the allocator's limit where one is reported (PyTorch: the device's memory; JAX: the pool
    XLA preallocated, 75 % of the device by default), planning's estimate, and the compilers'
    as planning copied it into the working directory `root`."""
    peaks = [rank_peak(log) for log in logs]
    peak, basis, capacity = max(peaks, key=lambda p: -1.0 if math.isnan(p[0]) else p[0])
    header = logs[0].header or {}
    seq_len, device = int(header.get("seq_len") or 0), header.get("device", "cpu")
    estimate = fit.cell_estimate_gib(coords.cell, seq_len, device)
    made = compiled.lookup(coords.cell, seq_len, device, os.path.join(root, compiled.WORKDIR_DIR), code=False)
    return {
        col.peak_memory_gib: peak / GIB,
        col.memory_estimate_gib: math.nan if estimate is None else estimate,
        col.compiled_estimate_gib: math.nan if made is None else made.gib,
        col.compiled_estimate_basis: "" if made is None else made.basis,
        col.memory_basis: basis if not math.isnan(peak) else "",
        col.memory_share: peak / capacity if capacity > 0 else math.nan,
    }


def cell_memory(group) -> dict:
    """A cell's memory columns: the means over its runs that finished; the basis they share."""
    numbers = (col.peak_memory_gib, col.memory_estimate_gib, col.compiled_estimate_gib, col.memory_share)
    texts = (col.memory_basis, col.compiled_estimate_basis)
    if col.peak_memory_gib not in group:
        return {**dict.fromkeys(numbers, math.nan), **dict.fromkeys(texts, "")}
    ok = group[group[col.status] == "ok"]
    out = {c: float(ok[c].dropna().mean()) if c in ok and ok[c].notna().any() else math.nan for c in numbers}
    shared = {c: " / ".join(sorted({b for b in ok[c].fillna("") if b})) if c in ok else "" for c in texts}
    return out | shared
