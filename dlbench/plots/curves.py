"""Loss curves from losses.csv: loss against the samples (tokens for an LLM) seen, a panel per
model, batch, data and precision as the throughput figures facet, one line per framework,
strategy and scale (colour: framework; dash: scale), the median over repeats with their range
shaded. The warm-up steps are drawn too: the curve starts where training starts."""

from __future__ import annotations

import pandas as pd

from dlbench import labels
from dlbench.analysis.columns import col
from dlbench.coords import Scale
from dlbench.plots.layout import colour, faceted, facets, panel_title

DASHES = ["-", "--", ":", "-."]


def loss_figure(curves: pd.DataFrame, path) -> None:
    faceted(facets(curves), _loss_panel, path, "no run recorded a loss")


def _loss_panel(ax, key: tuple, panel: pd.DataFrame, with_model: bool = True) -> None:
    scales = sorted(panel[col.scale].unique(), key=lambda s: Scale.parse(s).devices)
    for (framework, strategy, scale), run_steps in panel.groupby([col.framework, col.strategy, col.scale], sort=True):
        by_step = run_steps.groupby("step").agg(
            seen=("samples_seen", col.median), loss=("loss", col.median), low=("loss", "min"), high=("loss", "max")
        )
        style = DASHES[scales.index(scale) % len(DASHES)]
        name = f"{labels.framework_label(framework)} ({strategy}) {scale}"
        ax.plot(by_step["seen"], by_step["loss"], style, color=colour(framework), label=name, linewidth=1.4)
        ax.fill_between(by_step["seen"], by_step["low"], by_step["high"], color=colour(framework), alpha=0.15)
    model = key[0]
    ax.set_title(panel_title(key, with_model))
    ax.set_xlabel(f"{labels.unit(model).removesuffix('/s')} seen")
    ax.set_ylabel("training loss")
    ax.grid(alpha=0.3)
