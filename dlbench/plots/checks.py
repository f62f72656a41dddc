"""The measurement checks' figures (matplotlib): step-time histograms of flagged runs, and
each framework's relative throughput against run order."""

from __future__ import annotations

import pandas as pd

from dlbench import labels
from dlbench.analysis.columns import col
from dlbench.analysis.stability import parse_step_times
from dlbench.findings.checks import run_name
from dlbench.plots.layout import colour, figure_legend, grid, plt


def step_histograms(flagged: pd.DataFrame, path) -> None:
    """One panel per run given (the caller chooses which): its measured steps' times, first- and
    last-third medians marked."""
    shown = flagged
    fig, axes = grid(max(1, len(shown)), width=4.2, height=2.8, cols=3)
    for ax, (_, run) in zip(axes, shown.iterrows(), strict=False):
        times = parse_step_times(run[col.step_times_s]) * 1e3
        ax.hist(times, bins=min(30, max(5, times.size // 3)), color=colour(run[col.framework]))
        for value, style, name in (
            (run[col.step_first_third_s], "--", "first third"),
            (run[col.step_last_third_s], ":", "last third"),
        ):
            ax.axvline(value * 1e3, color="black", linestyle=style, label=f"median, {name}")
        ax.set_title(f"{run_name(run)}:\n{labels.STABILITY_TEXT[run[col.stability]]}", fontsize=8)
        ax.set_xlabel("step time (ms)")
        ax.set_ylabel("steps")
    figure_legend(fig, list(axes)[:1])
    fig.savefig(path)
    plt.close(fig)


def drift_figure(ordered: pd.DataFrame, path) -> None:
    """Throughput ÷ its cell's median against run order, one colour per framework."""
    fig, (ax,) = grid(1, width=7.0, height=3.2)
    for framework, group in ordered.groupby(col.framework, sort=True):
        ax.plot(
            group["order"],
            group["relative"],
            "o",
            ms=4,
            color=colour(framework),
            label=labels.framework_label(framework),
        )
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xlabel("run order (by start time)")
    ax.set_ylabel("throughput ÷ its cell's median")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.savefig(path)
    plt.close(fig)
