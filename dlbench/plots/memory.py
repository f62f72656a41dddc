"""Peak memory per rank from cells.csv (dlbench.analysis.memory): bars per scale, one per
framework and strategy, a panel per model, batch, data and precision as the throughput
figures facet: where FSDP's sharding or activation memory shows. Ticks over a bar are planning's
estimates for that cell, where one was made: dashed the formula's (dlbench.planning.fit), solid
the compiler's (dlbench.planning.compiled)."""

from __future__ import annotations

import pandas as pd
from matplotlib.patches import Rectangle

from dlbench import labels
from dlbench.analysis.columns import col
from dlbench.plots.layout import colour, faceted, facets, panel_title, scale_ticks

# Each estimate's tick: the formula's dashed, the compiler's solid.
ESTIMATE_TICKS = {
    col.memory_estimate_gib: {"linestyles": "--", "label": labels.MEMORY_ESTIMATE},
    col.compiled_estimate_gib: {"linestyles": "-", "label": labels.COMPILED_ESTIMATE},
}
STRATEGY_HATCHES = ["", "//", "..", "xx", "\\\\", "++", "oo", "--", "||", "**"]


def has_memory(cells: pd.DataFrame) -> bool:
    return col.peak_memory_gib in cells and cells[col.peak_memory_gib].notna().any()


def memory_figure(cells: pd.DataFrame, path) -> None:
    faceted(facets(cells[cells[col.peak_memory_gib].notna()]), _memory_panel, path, "no run recorded its memory")


def _memory_panel(ax, key: tuple, panel: pd.DataFrame, with_model: bool = True) -> None:
    """Per scale, a bar per cell there: its framework's colour, its strategy's hatch (the
    training options are part of the strategy's name here: labels.with_training_in_strategy)."""
    scales = labels.sorted_scales(panel[col.scale].unique())
    strategies = sorted(panel[col.strategy].unique())
    hatch = {s: STRATEGY_HATCHES[i % len(STRATEGY_HATCHES)] for i, s in enumerate(strategies)}
    for position, scale in enumerate(scales):
        here = panel[panel[col.scale] == scale].sort_values([col.framework, col.strategy])
        width = 0.8 / max(1, len(here))
        for i, (_, cell) in enumerate(here.iterrows()):
            x = position - 0.4 + width * (i + 0.5)
            ax.bar(x, cell[col.peak_memory_gib], width, color=colour(cell[col.framework]), edgecolor="white",
                   hatch=hatch[cell[col.strategy]], label=labels.framework_label(cell[col.framework]))  # fmt: skip
            for column, style in ESTIMATE_TICKS.items():
                estimate = cell.get(column)
                if estimate == estimate and estimate is not None:  # NaN: no estimate of this kind
                    ax.hlines(estimate, x - width / 2, x + width / 2, colors="black", linewidth=1, **style)
    for strategy in strategies:  # the legend's key to the hatches: empty patches, not drawn
        ax.add_patch(
            Rectangle((0, 0), 0, 0, facecolor="white", edgecolor="black", hatch=hatch[strategy], label=strategy)
        )
    scale_ticks(ax, scales)
    ax.set_xlim(-0.5, len(scales) - 0.5)
    ax.set_ylabel("peak memory per rank (GiB)")
    ax.set_title(panel_title(key, with_model), fontsize=9)
    ax.grid(axis="y", alpha=0.3)
