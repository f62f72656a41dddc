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
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter  # noqa: E402

from dlbench import labels  # noqa: E402
from dlbench.analysis.aggregate import real_data_pairs  # noqa: E402
from dlbench.coords import SINGLE_DEVICE  # noqa: E402
from dlbench.runners import capabilities, framework_names  # noqa: E402

# For a framework that is not registered (an archive's raw logs).
FALLBACK_COLOURS = ["#2ca02c", "#9467bd", "#8c564b", "#e377c2"]

plt.rcParams.update({"font.size": 10, "axes.titlesize": 11, "figure.dpi": 110, "savefig.bbox": "tight"})


def colour(framework: str) -> str:
    if framework in framework_names():
        return capabilities(framework).colour
    # crc32, not hash(): str hashes differ between processes, and the colour must not.
    return FALLBACK_COLOURS[zlib.crc32(framework.encode()) % len(FALLBACK_COLOURS)]


def _panels(cells: pd.DataFrame) -> list[tuple[tuple, pd.DataFrame]]:
    keys = ["model", "batch", "precision", "data"]
    return list(cells.groupby(keys, sort=True))


def _grid(n: int, width: float = 5.0, height: float = 3.6):
    cols = min(n, 2)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, axes.flat


def _panel_title(key: tuple) -> str:
    model, batch, precision, data = key
    return f"{labels.model_title(model)} — {labels.setup(batch, precision, data)}"


def png_data_uri(draw: Callable[[pd.DataFrame, io.BytesIO], None], data: pd.DataFrame) -> str:
    """A figure drawn by `draw(data, file)` as a `data:` URI, for a self-contained HTML page."""
    png = io.BytesIO()
    draw(data, png)
    return "data:image/png;base64," + base64.b64encode(png.getvalue()).decode()


def throughput_figure(cells: pd.DataFrame, path) -> None:
    """Bars per scale, grouped by framework (and strategy); failed cells are labelled."""
    panels = _panels(cells)
    fig, axes = _grid(max(1, len(panels)))
    for ax, (key, panel) in zip(axes, panels, strict=False):
        _throughput_panel(ax, key, panel)
    fig.savefig(path)
    plt.close(fig)


def _series(panel: pd.DataFrame) -> list[tuple[str, str]]:
    """(framework, strategy) per bar group: a framework's multi-device strategies, else `single`."""
    series = []
    for fw in sorted(panel["framework"].unique()):
        strategies = sorted(panel[panel["framework"] == fw]["strategy"].unique(), key=lambda s: s != SINGLE_DEVICE)
        multi = [s for s in strategies if s != SINGLE_DEVICE] or [SINGLE_DEVICE]
        series.extend((fw, s) for s in multi)
    return series


def _error_bar(cell) -> list[list[float]] | float | None:
    """The cell's 95% CI as an asymmetric error bar; its std where no CI was computed."""
    low, high, value = cell.get("ci95_low"), cell.get("ci95_high"), cell["throughput"]
    if low == low and high == high and low is not None and high is not None:
        return [[max(0.0, value - low)], [max(0.0, high - value)]]
    std = cell.get("std")
    return std if std == std else None


def _throughput_panel(ax, key: tuple, panel: pd.DataFrame) -> None:
    scales = labels.sorted_scales(panel["scale"].unique())
    series = _series(panel)
    width = 0.8 / max(1, len(series))
    top = panel["throughput"].max()
    top = top if top == top and top > 0 else 1.0
    for i, (fw, strategy) in enumerate(series):
        for j, scale in enumerate(scales):
            chosen = panel[(panel["framework"] == fw) & (panel["scale"] == scale)]
            chosen = chosen[chosen["strategy"].isin([strategy, SINGLE_DEVICE])]
            if chosen.empty:
                continue
            cell = chosen.iloc[0]
            x = j - 0.4 + width * (i + 0.5)
            value = cell["throughput"]
            if value == value and value > 0:
                err = _error_bar(cell)
                ax.bar(
                    x,
                    value,
                    width,
                    color=colour(fw),
                    yerr=err,
                    capsize=2,
                    label=labels.legend_label(fw, strategy) if j == 0 or cell["strategy"] != SINGLE_DEVICE else None,
                    hatch="//" if bool(cell.get("noisy", False)) else None,
                    edgecolor="white",
                )
            if cell["status"] != "ok":
                text = labels.status_label(cell["status"])
                ax.text(x, top * 0.04, text, rotation=90, ha="center", va="bottom", fontsize=8, color="black")
    ax.set_xticks(range(len(scales)))
    ax.set_xticklabels([f"{s}\n({labels.caict(s)})" for s in scales])
    ax.set_xlabel(labels.SCALE_AXIS)
    ax.set_ylabel(f"throughput ({labels.unit(key[0])})")
    ax.set_title(_panel_title(key))
    handles, names = ax.get_legend_handles_labels()
    unique = dict(zip(names, handles, strict=False))
    if unique:
        ax.legend(unique.values(), unique.keys(), fontsize=8)
    ax.grid(axis="y", alpha=0.3)


def speedup_figure(cells: pd.DataFrame, path) -> None:
    """Speedup over the 1-device cell against devices, with the ideal (linear) line."""
    panels = _panels(cells)
    fig, axes = _grid(max(1, len(panels)))
    for ax, (key, panel) in zip(axes, panels, strict=False):
        devices_max = int(panel["devices"].max())
        ax.plot([1, devices_max], [1, devices_max], "k--", lw=1, label="ideal (linear); labels: scaling efficiency")
        for (fw, strategy), series in panel.groupby(["framework", "strategy"]):
            if strategy == SINGLE_DEVICE:
                continue
            single = panel[(panel["framework"] == fw) & (panel["devices"] == 1)]
            points = pd.concat([single, series]).sort_values("devices")
            ax.plot(
                points["devices"], points["speedup"], "o-", color=colour(fw), label=labels.legend_label(fw, strategy)
            )
            for _, cell in series[series["efficiency"].notna()].iterrows():
                ax.annotate(
                    f"eff. {cell['efficiency']:.2f}",
                    (cell["devices"], cell["speedup"]),
                    textcoords="offset points",
                    xytext=(7, -3),
                    ha="left",
                    va="top",
                    fontsize=8,
                    color=colour(fw),
                    bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.8},
                )
            for _, cell in series[series["status"] != "ok"].iterrows():
                ax.annotate(labels.status_label(cell["status"], unknown=str), (cell["devices"], 1), fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.margins(x=0.15)
        ax.set_xlabel("devices")
        ax.set_ylabel("speedup over 1 device")
        ax.set_title(_panel_title(key))
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.savefig(path)
    plt.close(fig)


def data_figure(cells: pd.DataFrame, path) -> None:
    """Synthetic vs real data per framework and scale (seed 000's comparison), each real bar
    labelled with its ratio to synthetic and the share of step time spent waiting for data."""
    pairs = real_data_pairs(cells)
    groups = list(pairs.groupby(["model", "batch", "precision"], sort=True))
    fig, axes = _grid(max(1, len(groups)))
    for ax, ((model, batch, precision), group) in zip(axes, groups, strict=False):
        ticks = []
        for j, (_, real) in enumerate(group.iterrows()):
            synthetic = real["synthetic_throughput"]
            ax.bar(
                j - 0.2,
                synthetic,
                0.4,
                color=colour(real["framework"]),
                alpha=0.45,
                label="synthetic" if j == 0 else None,
            )
            ax.bar(j + 0.2, real["throughput"], 0.4, color=colour(real["framework"]), label="real" if j == 0 else None)
            wait = real.get("data_wait_fraction")
            note = f"×{real['real_vs_synthetic']:.2f}"
            if wait == wait and wait is not None:
                note += f"\nwait {wait:.0%}"
            ax.annotate(
                note, (j + 0.2, real["throughput"]), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8
            )
            ticks.append(f"{real['framework']}\n{labels.scale_and_strategy(real['scale'], real['strategy'])}")
        ax.set_xticks(range(len(ticks)))
        ax.set_xticklabels(ticks, fontsize=8)
        ax.set_ylabel(f"throughput ({labels.unit(model)})")
        ax.set_title(f"{labels.model_title(model)} — batch {batch}/device, {precision}: synthetic vs real data")
        ax.legend(fontsize=8, title="light: synthetic, dark: real", title_fontsize=8)
        ax.margins(y=0.2)
        ax.grid(axis="y", alpha=0.3)
    if not groups:
        axes[0].text(0.5, 0.5, "no real-data cell with a synthetic twin in this grid", ha="center", va="center")
        axes[0].set_axis_off()
    fig.savefig(path)
    plt.close(fig)


def reference_figure(refs: pd.DataFrame, tolerance: float, path) -> None:
    """measured ÷ reference per comparison (references.csv), with 1 (equal) and the tolerance band."""
    names = [
        f"{r['framework']} {labels.model_title(r['model'])} bs{r['batch']} {r['scale']} vs "
        f"{labels.text(r.get('reference_framework')) or r['kind']} ({labels.text(r.get('hardware'))[:28] or r['kind']})"
        for _, r in refs.iterrows()
    ]
    height = max(2.2, 0.32 * len(refs) + 1.2)
    fig, ax = plt.subplots(figsize=(8.0, height))
    y = list(range(len(refs)))[::-1]
    ax.axvspan(1 - tolerance, 1 + tolerance, color="#dddddd", alpha=0.6, lw=0, label=f"within ±{tolerance:.0%}")
    ax.axvline(1.0, color="black", ls="--", lw=1, label="equal to the reference")
    ax.scatter(refs["ratio"], y, c=[colour(fw) for fw in refs["framework"]], zorder=3)
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
