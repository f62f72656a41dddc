"""The campaign history figure (dlbench.campaigns.history finds the change points; this draws
them): a panel per cell, its throughput per campaign, each change marked with the provenance
change beside it."""

from __future__ import annotations

from dlbench import labels
from dlbench.analysis.columns import col
from dlbench.coords import CELL_FIELDS
from dlbench.plots.layout import colour, grid, plt


def history_figure(history, path, most: int = 6) -> None:
    """Per cell (those with a change first), its value per campaign with the spread of its
    repeats, a line where the level changes and the provenance change written beside it."""
    keyed = history.series.groupby(CELL_FIELDS, sort=True)
    changed = {tuple(r[f] for f in CELL_FIELDS) for _, r in history.changes.iterrows()}
    keys = sorted(keyed.groups, key=lambda k: (k not in changed, k))[:most]
    fig, axes = grid(max(1, len(keys)), width=6.0, height=3.4)
    names = [f"{c['id']}\n{c['date'][:10]}" for c in history.campaigns]
    for ax, key in zip(axes, keys, strict=False):
        points = keyed.get_group(key)
        ax.errorbar(
            points["order"],
            points["value"],
            yerr=points[col.std].fillna(0),
            fmt="o-",
            capsize=3,
            color=colour(key[0]),
        )
        mine = history.changes[(history.changes[CELL_FIELDS] == list(key)).all(axis=1)]
        for _, change in mine.iterrows():
            x = next(i for i, c in enumerate(history.campaigns) if c["id"] == change["after"]) - 0.5
            ax.axvline(x, color="crimson", ls="--", lw=1)
            note = f"×{change['ratio']:.2f}\n" + "\n".join(p[:48] for p in change["provenance"].split("; ")[:3])
            ax.annotate(
                note,
                (x, ax.get_ylim()[1]),
                xytext=(4, -4),
                textcoords="offset points",
                va="top",
                fontsize=7,
                color="crimson",
            )
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, fontsize=7)
        ax.set_title(
            f"{key[0]} {labels.model_title(key[1])} {key[2]} {key[3]} bs{key[4]} {key[5]} {key[6]}", fontsize=9
        )
        ax.set_ylabel(f"throughput ({labels.unit(key[1])})")
        ax.grid(alpha=0.3)
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
