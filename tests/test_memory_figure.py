"""The report's memory figure (dlbench/plots/memory.py): a bar per cell, a tick per estimate."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from dlbench import labels  # noqa: E402
from dlbench.analysis.columns import col  # noqa: E402
from dlbench.plots.memory import _memory_panel, memory_figure  # noqa: E402


def _cells() -> pd.DataFrame:
    row = {col.model: "llama_small", col.batch: "2", col.data: "synthetic", col.precision: "fp32"}
    return pd.DataFrame(
        [
            {**row, col.framework: "pytorch", col.scale: "1x2", col.strategy: "fsdp",
             col.peak_memory_gib: 1.8, col.memory_estimate_gib: 0.6, col.compiled_estimate_gib: 1.3},
            {**row, col.framework: "jax", col.scale: "1x2", col.strategy: "sharded",
             col.peak_memory_gib: 2.1, col.memory_estimate_gib: 1.1, col.compiled_estimate_gib: math.nan},
        ]
    )  # fmt: skip


def test_each_bar_has_a_tick_per_estimate_made_solid_for_the_compilers():
    fig, ax = plt.subplots()
    _memory_panel(ax, ("llama_small", "2", "synthetic", "fp32"), _cells())
    ticks = {c.get_label(): c for c in ax.collections}
    formula, compiler = ticks[labels.MEMORY_ESTIMATE], ticks[labels.COMPILED_ESTIMATE]
    assert formula.get_linestyle() != compiler.get_linestyle()
    # JAX's cell has no compiler's estimate here: one compiler's tick (PyTorch's), two formula's.
    formulas = [c for c in ax.collections if c.get_label() == labels.MEMORY_ESTIMATE]
    ys = sorted(segment[0][1] for c in formulas for segment in c.get_segments())
    assert ys == [0.6, 1.1]
    assert [segment[0][1] for segment in compiler.get_segments()] == [1.3]
    plt.close(fig)


def test_the_figure_is_drawn_from_cells_with_both_estimates(tmp_path):
    path = tmp_path / "memory.png"
    memory_figure(_cells(), path)
    assert path.stat().st_size > 1000
