"""What every figure shares (matplotlib): the backend and style, each framework's colour, the
panel grid, facets by (model, batch, data, precision) with their titles and one legend above
them, and a figure as a `data:` URI for the report. The figures themselves: figures, memory,
curves, checks, history."""

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

from dlbench import labels  # noqa: E402
from dlbench.analysis.columns import col  # noqa: E402
from dlbench.runners import capabilities, framework_names  # noqa: E402

# Constrained layout (grid) fits titles and labels; a "tight" bounding box would draw each figure twice.
plt.rcParams.update({"font.size": 10, "axes.titlesize": 11, "figure.dpi": 110, "savefig.bbox": None})


# For a framework that is not registered (an archive's raw logs).
FALLBACK_COLOURS = ["#2ca02c", "#9467bd", "#8c564b", "#e377c2"]


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


def grid(n: int, width: float = 5.0, height: float = 3.6, cols: int = 2):
    """`n` panels, `cols` to a row, laid out by matplotlib's constrained layout (titles never
    overlap the row above)."""
    cols = max(1, min(n, cols))
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False, layout="constrained")
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, axes.flat


def batch_order(batch) -> tuple:
    """A batch per device's sort key: numbers in order, then `max`."""
    return (str(batch) == "max", str(batch).zfill(8))


def facets(cells: pd.DataFrame) -> list[tuple[tuple, pd.DataFrame]]:
    """The panels that have cells, as ((model, batch, data, precision), cells): model, batch per
    device (numbers, then max), data, precision."""
    keys = FACET_ROWS + FACET_COLUMNS
    groups = list(cells.groupby(keys, sort=False))
    groups.sort(key=lambda g: (_model_order(g[0][0]), batch_order(g[0][1]), g[0][2] != "synthetic", g[0][3]))
    return groups


def _model_order(model: str) -> int:
    from dlbench.models import CATALOGUE

    return list(CATALOGUE).index(model) if model in CATALOGUE else len(CATALOGUE)


def _facet_axes(panels: list, width: float = PANEL_WIDTH, height: float = PANEL_HEIGHT):
    """A figure with one axes per panel: a row per (model, batch), a column per (data,
    precision) where the panels fill such a grid, else `cols` to a row."""
    columns = list(dict.fromkeys((k[2], k[3]) for k, _ in panels))
    cols = len(columns) if 1 < len(columns) <= 3 else min(len(panels), 3 if len(columns) == 1 else 2)
    fig, axes = grid(len(panels), width, height, cols=cols)
    return fig, list(axes)[: len(panels)]


def panel_title(key: tuple, with_model: bool = True) -> str:
    model, batch, data, precision = key
    head = f"{labels.model_title(model)}\n" if with_model else ""
    return f"{head}batch {batch}/device · {data} · {precision}"


# Legend rows a figure's own height holds; each further row adds its height in inches.
LEGEND_ROWS_FITTED, LEGEND_ROW_INCHES = 3, 0.2


def figure_legend(fig, axes) -> None:
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


def message_figure(path, text: str) -> None:
    """A figure file the pipeline asked for, where nothing can be drawn: the reason, in words."""
    fig, ax = plt.subplots(figsize=(6.0, 1.2), layout="constrained")
    ax.text(0.5, 0.5, text, ha="center", va="center")
    ax.set_axis_off()
    fig.savefig(path)
    plt.close(fig)


def faceted(panels: list, draw_panel, path, nothing: str) -> None:
    """Up to MAX_PANELS panels, each drawn by `draw_panel(ax, key, cells, with_model)`, one legend
    above them; `nothing`: the figure's text where there is no panel."""
    if not panels:
        message_figure(path, nothing)
        return
    shown = panels[:MAX_PANELS]
    fig, axes = _facet_axes(shown)
    for ax, (key, panel) in zip(axes, shown, strict=True):
        draw_panel(ax, key, panel, with_model=not _one_model(shown))
    figure_legend(fig, axes)
    _too_many(fig, panels, len(shown))
    fig.savefig(path)
    plt.close(fig)


def scale_ticks(ax, scales: list[str]) -> None:
    """One tick per scale, labelled with the scale and its CAICT name."""
    ax.set_xticks(range(len(scales)))
    ax.set_xticklabels([f"{s}\n{labels.caict(s)}" for s in scales], fontsize=8)
