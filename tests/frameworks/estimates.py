"""The compilers' memory estimates as planning makes them (dlbench.planning.compiled: the
framework's estimator in its environment, cached), and a run's measured peak per rank, for the
framework tests that hold one against the other."""

from __future__ import annotations

from dlbench.analysis import memory
from dlbench.coords import CellKey, RunCoords


def compiler_estimates(tmp_path, cells: dict[str, CellKey], seq_len: int) -> dict:
    """name → the compilers' estimate of each cell at `seq_len` on the CPU."""
    from dlbench.planning import compiled

    shapes = [compiled.request(cell, seq_len, "cpu") for cell in cells.values()]
    lines = compiled.prepare(shapes, {}, tmp_path)
    assert lines[0].endswith(" 0 failed"), lines
    return {name: compiled.lookup(cell, seq_len, "cpu", tmp_path) for name, cell in cells.items()}


def measured_peak_gib(logs) -> float:
    """The tables' peak per rank of one run (its largest rank's, over the measured window)."""
    return memory.run_memory(logs, RunCoords.from_dict(logs[0].header["run"]))["peak_memory_gib"]
