"""The report's communication prescreen section (docs/slurm.md), self-contained: from
prescreen.csv (beside cells.csv) to one HTML <section>, or nothing where no prescreen ran."""

from __future__ import annotations

from pathlib import Path

import jinja2
import markupsafe
import pandas as pd

from dlbench.analysis.stats import finite

TABLE = "prescreen.csv"
SECTION = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True).from_string(
    """<section id="prescreen">
<h2>Communication prescreen</h2>
<p>Before the timed grid, every allocation shape with more than one rank ran a short all-reduce
({{ backends }}) through the same launcher and srun as the runs. As nccl-tests define them:
<b>algbw</b> = message size ÷ time of one all-reduce (the mean over its ranks);
<b>busbw</b> = algbw × 2(n−1)/n for n ranks, the bandwidth each link carried, comparable across rank
counts. On several nodes with several ranks each, every node's ranks also reduced among themselves,
all nodes at once; a node whose busbw at the largest size is below {{ min_share }} of the best node's is
flagged, and so is every multi-node cell that ran on it (its numbers are kept, never averaged away).</p>
<table class="prescreen">
<tr><th>Shape</th><th>Nodes × ranks</th><th>Ranks reducing</th><th>Size</th><th>Time (µs)</th>
<th>algbw (GB/s)</th><th>busbw (GB/s)</th><th>Flag</th></tr>
{% for r in rows %}
<tr><td>{{ r.scale }}</td><td>{{ r.shape }}</td><td>{{ r.who }}</td><td>{{ r.size }}</td><td>{{ r.time }}</td>
<td>{{ r.algbw }}</td><td>{{ r.busbw }}</td><td>{{ r.flag }}</td></tr>
{% endfor %}
</table>
{% if cells %}
<p>Multi-node cells that ran on a flagged node:</p>
<ul>{% for c in cells %}<li>{{ c }}</li>{% endfor %}</ul>
{% else %}
<p>No multi-node cell ran on a flagged node.</p>
{% endif %}
</section>
"""
)


def size_text(size) -> str:
    size = int(size)
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def _number(value) -> str:
    return f"{value:.3g}" if finite(value) else "—"


def _row(r: pd.Series) -> dict:
    who = "all" if r["scope"] == "all" else f"node {r['node']}"
    if r["status"] != "ok":
        return {
            "scale": r["scale"],
            "shape": "",
            "who": who,
            "size": "",
            "time": "",
            "algbw": "",
            "busbw": "",
            "flag": f"FAILED: {r['reason']}",
        }
    return {
        "scale": r["scale"],
        "shape": f"{int(r['nodes'])} × {int(r['ranks_per_node'])}",
        "who": f"{who} ({int(r['ranks'])})",
        "size": size_text(r["bytes"]),
        "time": f"{r['time_us']:.1f}" if finite(r["time_us"]) else "—",
        "algbw": _number(r["algbw_gbps"]),
        "busbw": _number(r["busbw_gbps"]),
        "flag": (r["flag"] if isinstance(r["flag"], str) else "")
        + ("" if r["correct"] in (True, "True") else " wrong sum"),
    }


def section(tables_dir: str | Path, cells: pd.DataFrame, min_share: float) -> markupsafe.Markup | None:
    """The section from `tables_dir`/prescreen.csv, None where there is none."""
    path = Path(tables_dir) / TABLE
    if not path.exists():
        return None
    table = pd.read_csv(path, keep_default_na=False, na_values=[""])
    table["flag"] = table["flag"].fillna("")
    flagged = cells[cells["prescreen"].fillna("") != ""] if "prescreen" in cells else cells.iloc[0:0]
    return markupsafe.Markup(
        SECTION.render(
            backends=", ".join(sorted(set(table["backend"].dropna().astype(str)))) or "no backend recorded",
            min_share=min_share,
            rows=[_row(r) for _, r in table.iterrows()],
            cells=[
                f"{c['framework']} {c['model']} {c['precision']} {c['data']} bs{c['batch']} {c['scale']} "
                f"{c['strategy']}: {c['prescreen']}"
                for _, c in flagged.iterrows()
            ],
        )
    )
