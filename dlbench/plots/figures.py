"""Figures from cells.csv (matplotlib). One style: each framework's colour and label from its
capabilities (dlbench.runners), units on axes."""

from __future__ import annotations

import base64
import io
import math
import zlib
from collections.abc import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.container import BarContainer  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

from dlbench import labels  # noqa: E402
from dlbench.analysis.aggregate import real_data_pairs  # noqa: E402
from dlbench.analysis.columns import col
from dlbench.coords import SINGLE_DEVICE  # noqa: E402
from dlbench.runners import capabilities, framework_names  # noqa: E402

# For a framework that is not registered (an archive's raw logs).
FALLBACK_COLOURS = ["#2ca02c", "#9467bd", "#8c564b", "#e377c2"]

# Constrained layout (_grid) fits titles and labels; a "tight" bounding box would draw each figure twice.
plt.rcParams.update({"font.size": 10, "axes.titlesize": 11, "figure.dpi": 110, "savefig.bbox": None})


def colour(framework: str) -> str:
    if framework in framework_names():
        return capabilities(framework).colour
    # crc32, not hash(): str hashes differ between processes, and the colour must not.
    return FALLBACK_COLOURS[zlib.crc32(framework.encode()) % len(FALLBACK_COLOURS)]


# Facets: rows (model, batch) by columns (data, precision); more panels than this are not drawn
# in one figure (the caller splits by model, docs/report.md: how the report scales).
MAX_PANELS = 24
PANEL_WIDTH, PANEL_HEIGHT = 4.4, 3.0
FACET_ROWS, FACET_COLUMNS = [col.model, col.batch], [col.data, col.precision]


def _grid(n: int, width: float = 5.0, height: float = 3.6, cols: int = 2):
    """`n` panels, `cols` to a row, laid out by matplotlib's constrained layout (titles never
    overlap the row above)."""
    cols = max(1, min(n, cols))
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False, layout="constrained")
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, axes.flat


def _batch_order(batch) -> tuple:
    return (str(batch) == "max", str(batch).zfill(8))


def facets(cells: pd.DataFrame) -> list[tuple[tuple, pd.DataFrame]]:
    """The panels that have cells, as ((model, batch, data, precision), cells): model, batch per
    device (numbers, then max), data, precision."""
    keys = FACET_ROWS + FACET_COLUMNS
    groups = list(cells.groupby(keys, sort=False))
    groups.sort(key=lambda g: (_model_order(g[0][0]), _batch_order(g[0][1]), g[0][2] != "synthetic", g[0][3]))
    return groups


def _model_order(model: str) -> int:
    from dlbench.models import CATALOGUE

    return list(CATALOGUE).index(model) if model in CATALOGUE else len(CATALOGUE)


def _facet_axes(panels: list, width: float = PANEL_WIDTH, height: float = PANEL_HEIGHT):
    """A figure with one axes per panel: a row per (model, batch), a column per (data,
    precision) where the panels fill such a grid, else `cols` to a row."""
    columns = list(dict.fromkeys((k[2], k[3]) for k, _ in panels))
    cols = len(columns) if 1 < len(columns) <= 3 else min(len(panels), 3 if len(columns) == 1 else 2)
    fig, axes = _grid(len(panels), width, height, cols=cols)
    return fig, list(axes)[: len(panels)]


def _panel_title(key: tuple, with_model: bool = True) -> str:
    model, batch, data, precision = key
    head = f"{labels.model_title(model)}\n" if with_model else ""
    return f"{head}batch {batch}/device · {data} · {precision}"


# Legend rows a figure's own height holds; each further row adds its height in inches.
LEGEND_ROWS_FITTED, LEGEND_ROW_INCHES = 3, 0.2


def _figure_legend(fig, axes) -> None:
    """One legend for the whole figure, above the panels (not one per panel over the bars), as
    wide as the panels; a bar's entry is its plain colour (a hatched first bar is not the series)."""
    unique: dict = {}
    for ax in axes:
        for handle, name in zip(*ax.get_legend_handles_labels(), strict=False):
            if isinstance(handle, BarContainer):
                handle = Patch(facecolor=handle.patches[0].get_facecolor())
            unique.setdefault(name, handle)
    if unique:
        columns = 2 * axes[0].get_gridspec().ncols if axes else 2
        # A long legend (many strategies and training options) gets height of its own.
        rows = -(-len(unique) // min(len(unique), columns))
        if rows > LEGEND_ROWS_FITTED:
            fig.set_figheight(fig.get_figheight() + LEGEND_ROW_INCHES * (rows - LEGEND_ROWS_FITTED))
        fig.legend(
            unique.values(), unique.keys(), loc="outside upper center", ncols=min(len(unique), columns), fontsize=8
        )


def _too_many(fig, panels: list, shown: int) -> None:
    if len(panels) > shown:
        fig.suptitle(f"first {shown} of {len(panels)} panels", fontsize=9)


def png_data_uri(draw: Callable[[pd.DataFrame, io.BytesIO], None], data: pd.DataFrame) -> str:
    """A figure drawn by `draw(data, file)` as a `data:` URI, for a self-contained HTML page."""
    png = io.BytesIO()
    draw(data, png)
    return "data:image/png;base64," + base64.b64encode(png.getvalue()).decode()


def _one_model(panels: list) -> bool:
    return len({k[0] for k, _ in panels}) == 1


def _message_figure(path, text: str) -> None:
    """A figure file the pipeline asked for, where nothing can be drawn: the reason, in words."""
    fig, ax = plt.subplots(figsize=(6.0, 1.2), layout="constrained")
    ax.text(0.5, 0.5, text, ha="center", va="center")
    ax.set_axis_off()
    fig.savefig(path)
    plt.close(fig)


def throughput_figure(cells: pd.DataFrame, path) -> None:
    """Bars per scale, grouped by framework (and strategy), a panel per model, batch, data and
    precision with cells; failed cells are labelled with their status."""
    _faceted(facets(cells), _throughput_panel, path, "no cell in this grid")


def _faceted(panels: list, draw_panel, path, nothing: str) -> None:
    """Up to MAX_PANELS panels, each drawn by `draw_panel(ax, key, cells, with_model)`, one legend
    above them; `nothing`: the figure's text where there is no panel."""
    if not panels:
        _message_figure(path, nothing)
        return
    shown = panels[:MAX_PANELS]
    fig, axes = _facet_axes(shown)
    for ax, (key, panel) in zip(axes, shown, strict=True):
        draw_panel(ax, key, panel, with_model=not _one_model(shown))
    _figure_legend(fig, axes)
    _too_many(fig, panels, len(shown))
    fig.savefig(path)
    plt.close(fig)


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


def _scale_ticks(ax, scales: list[str]) -> None:
    ax.set_xticks(range(len(scales)))
    ax.set_xticklabels([f"{s}\n{labels.caict(s)}" for s in scales], fontsize=8)


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
    _scale_ticks(ax, scales)
    ax.set_xlim(-0.5, len(scales) - 0.5)  # status labels of the outer bars stay inside
    ax.set_ylabel(f"throughput ({labels.unit(key[0])})")
    ax.set_title(_panel_title(key, with_model), fontsize=9)
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
    _faceted(scaled_facets(cells)[0], _speedup_panel, path, "one scale: no speedup")


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
    ax.set_title(_panel_title(key, with_model), fontsize=9)
    ax.grid(alpha=0.3)


def data_figure(cells: pd.DataFrame, path) -> None:
    """Real ÷ synthetic throughput per scale (seed 000's comparison), a bar per framework and
    strategy, a panel per model, batch and precision; while bars are few, each is labelled with
    its ratio and the share of step time spent waiting for data."""
    pairs = real_data_pairs(cells)
    groups = list(pairs.groupby([col.model, col.batch, col.precision], sort=True))[:MAX_PANELS]
    if not groups:
        _message_figure(path, "no real-data cell with a synthetic twin in this grid")
        return
    fig, axes = _grid(len(groups), PANEL_WIDTH, PANEL_HEIGHT, cols=min(len(groups), 2))
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
        _scale_ticks(ax, scales)
        ax.set_ylabel("real ÷ synthetic throughput")
        ax.set_title(f"{labels.model_title(model)} · batch {batch}/device · {precision}", fontsize=9)
        ax.margins(y=0.25)
        ax.grid(axis="y", alpha=0.3)
    _figure_legend(fig, list(axes)[: len(groups)])
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
