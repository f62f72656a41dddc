"""Peak memory per rank from cells.csv (dlbench.analysis.memory): bars per scale, one per
framework and strategy, a panel per model, batch, data and precision as the throughput
figures facet: where FSDP's sharding or activation memory shows."""

from __future__ import annotations

import pandas as pd

from dlbench import labels
from dlbench.analysis.columns import col
from dlbench.plots.figures import _faceted, _panel_title, _scale_ticks, colour, facets

STRATEGY_HATCHES = ["", "//", "..", "xx", "\\\\"]


def has_memory(cells: pd.DataFrame) -> bool:
    return col.peak_memory_gib in cells and cells[col.peak_memory_gib].notna().any()


def memory_figure(cells: pd.DataFrame, path) -> None:
    _faceted(facets(cells[cells[col.peak_memory_gib].notna()]), _memory_panel, path, "no run recorded its memory")


def _memory_panel(ax, key: tuple, panel: pd.DataFrame, with_model: bool = True) -> None:
    scales = labels.sorted_scales(panel[col.scale].unique())
    series = sorted(panel.groupby([col.framework, col.strategy]).groups)
    width = 0.8 / max(1, len(series))
    strategies = sorted({s for _, s in series})
    for i, (framework, strategy) in enumerate(series):
        mine = panel[(panel[col.framework] == framework) & (panel[col.strategy] == strategy)]
        for _, cell in mine.iterrows():
            x = scales.index(cell[col.scale]) - 0.4 + width * (i + 0.5)
            ax.bar(x, cell[col.peak_memory_gib], width, color=colour(framework), edgecolor="white",
                   hatch=STRATEGY_HATCHES[strategies.index(strategy) % len(STRATEGY_HATCHES)],
                   label=f"{labels.framework_label(framework)} ({strategy})")  # fmt: skip
    _scale_ticks(ax, scales)
    ax.set_xlim(-0.5, len(scales) - 0.5)
    ax.set_ylabel("peak memory per rank (GiB)")
    ax.set_title(_panel_title(key, with_model), fontsize=9)
    ax.grid(axis="y", alpha=0.3)
