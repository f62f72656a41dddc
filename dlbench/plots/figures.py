"""Figures from cells.csv (matplotlib): throughput, speedup, real vs synthetic data, and measured
vs reference numbers. One style (layout): each framework's colour and label from its
capabilities (dlbench.runners), units on axes."""

from __future__ import annotations

import pandas as pd
from matplotlib.ticker import FuncFormatter, NullFormatter

from dlbench import labels
from dlbench.analysis.aggregate import real_data_pairs
from dlbench.analysis.columns import col
from dlbench.coords import SINGLE_DEVICE
from dlbench.plots.layout import (
    MAX_PANELS,
    PANEL_HEIGHT,
    PANEL_WIDTH,
    colour,
    faceted,
    facets,
    figure_legend,
    grid,
    message_figure,
    panel_title,
    plt,
    scale_ticks,
)


def throughput_figure(cells: pd.DataFrame, path) -> None:
    """Bars per scale, grouped by framework (and strategy), a panel per model, batch, data and
    precision with cells; failed cells are labelled with their status."""
    faceted(facets(cells), _throughput_panel, path, "no cell in this grid")


def _series(panel: pd.DataFrame) -> list[tuple[str, str]]:
    """(framework, strategy) per bar group: a framework's multi-device strategies, else `single`."""
    series = []
    for fw in sorted(panel[col.framework].unique()):
        strategies = sorted(panel[panel[col.framework] == fw][col.strategy].unique(), key=lambda s: s != SINGLE_DEVICE)
        multi = [s for s in strategies if s != SINGLE_DEVICE] or [SINGLE_DEVICE]
        series.extend((fw, s) for s in multi)
    return series


def _error_bar(cell) -> list[list[float]] | float | None:
    """The cell's 95% CI as an asymmetric error bar; its std where no CI was computed."""
    low, high, value = cell.get(col.ci95_low), cell.get(col.ci95_high), cell[col.throughput]
    if low == low and high == high and low is not None and high is not None:
        return [[max(0.0, value - low)], [max(0.0, high - value)]]
    std = cell.get(col.std)
    return std if std == std else None


def _throughput_panel(ax, key: tuple, panel: pd.DataFrame, with_model: bool = True) -> None:
    scales = labels.sorted_scales(panel[col.scale].unique())
    series = _series(panel)
    width = 0.8 / max(1, len(series))
    top = panel[col.throughput].max()
    top = top if top == top and top > 0 else 1.0
    by_coords = {(c[col.framework], c[col.scale], c[col.strategy]): c for _, c in panel.iterrows()}
    drawn = set()  # a framework's 1-device cell once, not once per multi-device strategy
    for i, (fw, strategy) in enumerate(series):
        for j, scale in enumerate(scales):
            cell = by_coords.get((fw, scale, strategy), by_coords.get((fw, scale, SINGLE_DEVICE)))
            if cell is None or (fw, scale, cell[col.strategy]) in drawn:
                continue
            drawn.add((fw, scale, cell[col.strategy]))
            x = j - 0.4 + width * (i + 0.5)
            value = cell[col.throughput]
            if value == value and value > 0:
                ax.bar(
                    x,
                    value,
                    width,
                    color=colour(fw),
                    yerr=_error_bar(cell),
                    capsize=2,
                    label=labels.framework_label(fw),  # a colour per framework; strategies: the tables
                    hatch="//" if bool(cell.get(col.noisy, False)) else None,
                    edgecolor="white",
                )
            if cell[col.status] != "ok":
                text = labels.status_label(cell[col.status])
                ax.text(x, top * 0.04, text, rotation=90, ha="center", va="bottom", fontsize=7, color="black")
    scale_ticks(ax, scales)
    ax.set_xlim(-0.5, len(scales) - 0.5)  # status labels of the outer bars stay inside
    ax.set_ylabel(f"throughput ({labels.unit(key[0])})")
    ax.set_title(panel_title(key, with_model), fontsize=9)
    ax.grid(axis="y", alpha=0.3)


def scaled_facets(cells: pd.DataFrame) -> tuple[list[tuple[tuple, pd.DataFrame]], list[tuple]]:
    """(panels with a multi-device speedup, keys of the panels measured at one scale only)."""
    drawn, single = [], []
    for key, panel in facets(cells):
        multi = panel[(panel[col.devices] > 1) & panel[col.speedup].map(lambda v: v == v and v is not None)]
        (drawn.append((key, panel)) if not multi.empty else single.append(key))
    return drawn, single


def speedup_figure(cells: pd.DataFrame, path) -> None:
    """Speedup over the 1-device cell against devices, with the ideal (linear) line; only the
    panels with a multi-device speedup (a one-scale panel has none to draw)."""
    faceted(scaled_facets(cells)[0], _speedup_panel, path, "one scale: no speedup")


def _speedup_panel(ax, key: tuple, panel: pd.DataFrame, with_model: bool = True) -> None:
    devices_max = int(panel[col.devices].max())
    ax.plot([1, devices_max], [1, devices_max], "k--", lw=1, label="ideal (linear)")
    lines = [
        (k, s)
        for k, s in panel.groupby([col.framework, col.strategy])
        if k[1] != SINGLE_DEVICE and s[col.speedup].map(lambda v: v == v and v is not None).any()
    ]
    for (fw, strategy), series in lines:
        single = panel[(panel[col.framework] == fw) & (panel[col.devices] == 1)]
        points = pd.concat([single, series]).sort_values(col.devices)
        ax.plot(
            points[col.devices], points[col.speedup], "o-", color=colour(fw), label=labels.legend_label(fw, strategy)
        )
        # Efficiency beside each point while there are few lines; with more, the tables hold it.
        for _, cell in series[series[col.efficiency].notna()].iterrows() if len(lines) <= 2 else ():
            ax.annotate(
                f"eff. {cell[col.efficiency]:.2f}",
                (cell[col.devices], cell[col.speedup]),
                textcoords="offset points",
                xytext=(7, -3),
                ha="left",
                va="top",
                fontsize=8,
                color=colour(fw),
            )
        for _, cell in series[series[col.status] != "ok"].iterrows() if len(lines) <= 2 else ():
            ax.annotate(labels.status_label(cell[col.status]), (cell[col.devices], 1), fontsize=7)
    ticks = sorted(set(int(d) for d in panel[col.devices]))
    ax.set_xticks(ticks)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.margins(x=0.08)
    ax.set_xlabel(col.devices)
    ax.set_ylabel("speedup over 1 device")
    ax.set_title(panel_title(key, with_model), fontsize=9)
    ax.grid(alpha=0.3)


def data_figure(cells: pd.DataFrame, path) -> None:
    """Real ÷ synthetic throughput per scale (seed 000's comparison), a bar per framework and
    strategy, a panel per model, batch and precision; while bars are few, each is labelled with
    its ratio and the share of step time spent waiting for data."""
    pairs = real_data_pairs(cells)
    groups = list(pairs.groupby([col.model, col.batch, col.precision], sort=True))[:MAX_PANELS]
    if not groups:
        message_figure(path, "no real-data cell with a synthetic twin in this grid")
        return
    fig, axes = grid(len(groups), PANEL_WIDTH, PANEL_HEIGHT, cols=min(len(groups), 2))
    for ax, ((model, batch, precision), group) in zip(axes, groups, strict=False):
        scales = labels.sorted_scales(group[col.scale].unique())
        series = list(dict.fromkeys(zip(group[col.framework], group[col.strategy], strict=True)))
        names = list(dict.fromkeys(labels.framework_label(fw) for fw, _ in series))
        width = 0.8 / max(1, len(names))
        annotate = len(group) <= 8
        for _, real in group.iterrows():
            i, j = names.index(labels.framework_label(real[col.framework])), scales.index(real[col.scale])
            x = j - 0.4 + width * (i + 0.5)
            ratio = real[col.real_vs_synthetic]
            ax.bar(
                x, ratio, width, color=colour(real[col.framework]), label=labels.framework_label(real[col.framework])
            )
            if annotate:
                wait = real.get(col.data_wait_fraction)
                note = f"×{ratio:.2f}" + (f"\nwait {wait:.0%}" if wait == wait and wait is not None else "")
                ax.annotate(note, (x, ratio), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8)
        ax.axhline(1.0, color="black", ls="--", lw=1)
        scale_ticks(ax, scales)
        ax.set_ylabel("real ÷ synthetic throughput")
        ax.set_title(f"{labels.model_title(model)} · batch {batch}/device · {precision}", fontsize=9)
        ax.margins(y=0.25)
        ax.grid(axis="y", alpha=0.3)
    figure_legend(fig, list(axes)[: len(groups)])
    fig.savefig(path)
    plt.close(fig)


def reference_figure(refs: pd.DataFrame, tolerance: float, path) -> None:
    """measured ÷ reference per comparison (references.csv), with 1 (equal) and the tolerance band."""
    names = [
        f"{labels.framework_label(r[col.framework])} {labels.model_title(r[col.model])} "
        f"bs{r[col.batch]} {r[col.scale]} vs "
        f"{labels.text(r.get('reference_framework')) or r['kind']} ({labels.text(r.get('hardware'))[:28] or r['kind']})"
        for _, r in refs.iterrows()
    ]
    height = max(2.2, 0.32 * len(refs) + 1.2)
    fig, ax = plt.subplots(figsize=(8.0, height), layout="constrained")
    y = list(range(len(refs)))[::-1]
    ax.axvspan(1 - tolerance, 1 + tolerance, color="#dddddd", alpha=0.6, lw=0, label=f"within ±{tolerance:.0%}")
    ax.axvline(1.0, color="black", ls="--", lw=1, label="equal to the reference")
    ax.scatter(refs["ratio"], y, c=[colour(fw) for fw in refs[col.framework]], zorder=3)
    ax.set_yticks(y)
    ax.set_yticklabels(names, fontsize=8)
    ax.set_xscale("log")
    low = min(float(refs["ratio"].min()), 1 - tolerance) / 1.15
    high = max(float(refs["ratio"].max()), 1 + tolerance) * 1.15
    ax.set_xlim(low, high)
    ticks = [t for t in (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 10, 20, 50) if low <= t <= high]
    ax.set_xticks(ticks)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("measured ÷ reference throughput (log scale)")
    ax.set_title("Measured vs published and baseline numbers")
    ax.legend(fontsize=8, loc="best")
    ax.grid(axis="x", alpha=0.3)
    fig.savefig(path)
    plt.close(fig)
