"""The report document: one self-contained HTML page (figures embedded as base64 PNG).

Inputs: the aggregated tables (cells.csv, runs.csv), the resolved protocol and config,
the step-log *headers* of the runs in runs.csv (for the environment section only), and,
when it exists, a table of published reference numbers. Sections: summary (generated
findings), test method, environment, per model (throughput table per batch group,
throughput figure, speedup figure with the ideal line, cells without a number and why),
published vs measured.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
import re
import tempfile
from collections import Counter
from pathlib import Path

import jinja2
import pandas as pd
from markupsafe import Markup, escape
from matplotlib.ticker import FuncFormatter, NullFormatter

from dlbench import figures as figs
from dlbench import findings as fnd
from dlbench import tables
from dlbench.aggregate import real_data_pairs
from dlbench.coords import SINGLE_DEVICE, CellKey, Scale
from dlbench.models import CATALOGUE, sample_unit
from dlbench.steplog import read_steplog

TEMPLATES = Path(__file__).parent / "templates"
REASON_CHARS = 400  # a failure reason longer than this is cut in the notes (full text on hover)

STRATEGY_TEXT = {
    SINGLE_DEVICE: "one process, no communication",
    "ddp": "PyTorch DistributedDataParallel: synchronous data parallelism, gradients all-reduced every step "
    "(gloo on CPU, NCCL on GPU)",
    "multi_worker_mirrored": "TensorFlow MultiWorkerMirroredStrategy: synchronous data parallelism, "
    "gradients all-reduced every step",
    "dist_sync": "MXNet KVStore dist_sync: synchronous data parallelism through a parameter server",
}
DATA_TEXT = {
    "synthetic": "synthetic data: one random batch created once on the device and reused, so no input "
    "pipeline is measured",
    "real": "real data: samples read from disk through the framework's input pipeline, which is measured too",
}
STATUS_MEANING = {
    "partial": "only n of the N repeats produced a number; the others' reason is in the note",
    "oom": "ran out of memory",
    "timeout": "exceeded the run's time limit",
    "cancelled": "cancelled (e.g. by the scheduler)",
    "failed": "the run raised an error",
    "killed": "a process died before finishing its step log",
    "invalid": "a step log failed validation",
    "missing": "no step log was written",
    "unavailable": "not run: the framework cannot build this model",
}
PRECISION_TEXT = {"fp32": "32-bit floating point", "amp": "automatic mixed precision"}


# ---------------------------------------------------------------- small helpers


def embed_png(path: str | Path) -> str:
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode()


def cell_id(key: CellKey) -> str:
    """The HTML id of a cell's table entry (coordinates are safe names, see coords.py)."""
    return "cell-" + "-".join(str(v) for v in key.as_dict().values())


def _text(value, default: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return default
    return str(value)


def _finite(value) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _devices(scale: str) -> int:
    return Scale.parse(scale).devices


def _sorted_scales(scales) -> list[str]:
    return sorted(set(scales), key=lambda s: (_devices(s), s))


def _join_unique(values) -> str:
    seen = [v for v in dict.fromkeys(_text(v) for v in values) if v]
    return ", ".join(seen)


def compact_reason(reason: str) -> str:
    """`rank 0: oom: X; rank 1: oom: X | rank 0: oom: X` → `ranks 0, 1: oom: X` (one line per distinct message)."""
    by_message: dict[str, list[str]] = {}
    for part in (p.strip() for run in reason.split(" | ") for p in run.split("; ")):
        if not part:
            continue
        match = re.fullmatch(r"rank (\S+): (.*)", part, flags=re.DOTALL)
        ranks, message = ([match.group(1)], match.group(2)) if match else ([], part)
        by_message.setdefault(message, [])
        by_message[message] += [r for r in ranks if r not in by_message[message]]
    return "; ".join(
        (f"rank{'s' if len(ranks) > 1 else ''} {', '.join(ranks)}: " if ranks else "") + message
        for message, ranks in by_message.items()
    )


def finding_html(finding: fnd.Finding) -> Markup:
    """A finding with every number marked up: linked to its table cell, its cells on hover."""
    out = []
    for part in finding.parts:
        if not isinstance(part, fnd.Number):
            out.append(escape(part))
            continue
        labels = [k.label for k in part.cells[:8]] + (["…"] if len(part.cells) > 8 else [])
        title = f"{part.quantity} from: " + "; ".join(labels)
        if len(part.cells) <= 2:
            out.append(
                Markup('<a class="num" href="#{}" title="{}">{}</a>').format(cell_id(part.cells[0]), title, part.text)
            )
        else:
            out.append(Markup('<span class="num" title="{}">{}</span>').format(title, part.text))
    return Markup("").join(out)


# ---------------------------------------------------------------- tables


def group_title(model: str, batch: str, precision: str, data: str) -> str:
    per_device = "the largest batch that fits" if batch == "max" else f"batch {batch}"
    return f"{fnd.model_title(model)}, {per_device} per device, {precision}, {data} data"


def throughput_tables(cells: pd.DataFrame) -> list[dict]:
    """Per model/batch/precision/data: rows framework (strategy), columns scales.

    The 1-device column shows the single-process cell in every row of its framework.
    Each entry carries the cell's id (first appearance only), its text, speedup and
    efficiency, CSS classes, and a footnote number when the cell has a reason.
    """
    out = []
    for (model, batch, precision, data), group in cells.groupby(fnd.GROUP, sort=True):
        scales = _sorted_scales(group["scale"])
        rows, notes, seen = [], [], set()
        for fw in sorted(group["framework"].unique()):
            mine = group[group["framework"] == fw]
            strategies = sorted(s for s in mine["strategy"].unique() if s != SINGLE_DEVICE) or [SINGLE_DEVICE]
            for strategy in strategies:
                entries = []
                for scale in scales:
                    wanted = SINGLE_DEVICE if _devices(scale) == 1 else strategy
                    match = mine[(mine["scale"] == scale) & (mine["strategy"] == wanted)]
                    if match.empty:
                        entries.append(None)
                        continue
                    entries.append(_table_entry(match.iloc[0], seen, notes))
                label = fw if strategy == SINGLE_DEVICE else f"{fw} ({strategy})"
                rows.append({"label": label, "framework": fw, "entries": entries})
        out.append(
            {
                "key": (model, batch, precision, data),
                "title": group_title(model, batch, precision, data),
                "unit": f"{sample_unit(model) if model in CATALOGUE else 'samples'}/s",
                "columns": [{"scale": s, "label": Scale.parse(s).caict_label, "devices": _devices(s)} for s in scales],
                "rows": rows,
                "notes": notes,
            }
        )
    return out


def _table_entry(cell: pd.Series, seen: set, notes: list) -> dict:
    key = fnd.cell_key(cell)
    status = _text(cell["status"], "missing")
    has_number = _finite(cell.get("throughput"))
    classes = ["status-" + status]
    if bool(cell.get("noisy", False)) is True:
        classes.append("noisy")
    scaled = has_number and _devices(key.scale) > 1 and _finite(cell.get("speedup"))
    reason = compact_reason(_text(cell.get("reason")))
    note = None
    if status != "ok" and (reason or not has_number):
        existing = next((n for n in notes if n["key"] == key), None)
        if existing is None:
            existing = {
                "n": len(notes) + 1,
                "key": key,
                "label": key.label,
                "status": tables.STATUS_TEXT.get(status, status.upper()),
                "reason": reason[:REASON_CHARS] + ("…" if len(reason) > REASON_CHARS else ""),
                "full_reason": reason,
            }
            notes.append(existing)
        note = existing["n"]
    hover = [key.label, f"status {status}"]
    if has_number:
        hover.append(f"{cell.get('statistic', '')} of {int(cell['n'])}/{int(cell['repeats'])} repeats")
        if _finite(cell.get("cv")):
            hover.append(f"CV {cell['cv']:.2f}")
        if _finite(cell.get("tflops")):
            hover.append(f"{cell['tflops']:.3g} TFLOP/s")
        if _finite(cell.get("mfu")):
            hover.append(f"MFU {cell['mfu']:.1%}")
    entry = {
        "id": None if key in seen else cell_id(key),
        "text": tables.cell_text(cell),
        "has_number": has_number,
        "ci": f"95% CI {cell['ci95_low']:.1f}–{cell['ci95_high']:.1f}"
        if has_number and _finite(cell.get("ci95_low")) and _finite(cell.get("ci95_high")) and int(cell["n"]) > 1
        else "",
        "tflops": (
            f"{cell['tflops']:.3g} TFLOP/s" + (f" · MFU {cell['mfu']:.0%}" if _finite(cell.get("mfu")) else "")
            if has_number and _finite(cell.get("tflops"))
            else ""
        ),
        "speedup": f"{cell['speedup']:.2f}×" if scaled else "",
        "efficiency": f"{cell['efficiency']:.2f}" if scaled else "",
        "classes": " ".join(classes),
        "note": note,
        "title": " · ".join(hover),
    }
    seen.add(key)
    return entry


# ---------------------------------------------------------------- environment


def read_headers(runs: pd.DataFrame, root: str | Path = ".") -> list[dict]:
    """Step-log headers of every rank of every run in runs.csv (environment facts only)."""
    headers = []
    if runs.empty or "log_files" not in runs:
        return headers
    for files in runs["log_files"]:
        for rel in _text(files).split(";"):
            path = Path(root) / rel
            if rel and path.exists():
                log = read_steplog(path)
                if log.header is not None:
                    headers.append(log.header)
    return headers


def _short_sha(value, n: int = 12) -> str:
    return _text(value)[:n]


def _container(provenance: dict) -> str:
    """The image a run ran in, with its verified sha256 when the header has one."""
    container = provenance.get("container") or {}
    path = container.get("path") or provenance.get("container_image")
    if not path:
        return ""
    return f"{path} sha256 {_short_sha(container['sha256'])}" if container.get("sha256") else str(path)


def environment(runs: pd.DataFrame, headers: list[dict]) -> dict:
    """Software per framework, machines per node, and where/when the runs ran."""
    if not headers:
        ok = runs[runs["status"] == "ok"] if not runs.empty else runs
        software = (
            [
                {
                    "framework": fw,
                    "version": _join_unique(g.get("framework_version", pd.Series(dtype=str))),
                    "python": "",
                    "env_lock": "",
                    "container": "",
                    "runs": len(g),
                }
                for fw, g in ok.groupby("framework")
            ]
            if not ok.empty
            else []
        )
        nodes = sorted({n for v in ok.get("nodes", []) for n in _text(v).split(";") if n}) if not ok.empty else []
        return {
            "from_headers": False,
            "software": software,
            "machines": [{"node": n} for n in nodes],
            "facts": [],
        }

    software = []
    by_fw: dict[str, list[dict]] = {}
    for h in headers:
        by_fw.setdefault(h.get("run", {}).get("framework") or h.get("framework", {}).get("name", "?"), []).append(h)
    for fw, hs in sorted(by_fw.items()):
        prov = [h.get("provenance") or {} for h in hs]
        locks = dict.fromkeys(
            f"{p.get('env_lock') or 'lock'} sha256 {_short_sha(p.get('env_lock_sha256'))}"
            for p in prov
            if p.get("env_lock_sha256")
        )
        software.append(
            {
                "framework": fw,
                "version": _join_unique(h.get("framework", {}).get("version") for h in hs),
                "python": _join_unique(h.get("python") for h in hs),
                "env_lock": ", ".join(locks),
                "container": _join_unique(_container(p) for p in prov) or "none (Python venv)",
                "runs": len({tuple(sorted(h.get("run", {}).items())) for h in hs}),
            }
        )

    machines = {}
    for h in headers:
        node = h.get("node") or h.get("host") or "?"
        if node in machines:
            continue
        p = h.get("provenance") or {}
        gpu = p.get("gpu") or {}
        machines[node] = {
            "node": node,
            "cpu_model": _text(p.get("cpu_model"), "not recorded"),
            "cpu_count": _text(p.get("cpu_count"), "?")
            + (
                f" ({p['cpus_allowed']} allowed)"
                if _finite(p.get("cpus_allowed")) and p.get("cpus_allowed") != p.get("cpu_count")
                else ""
            ),
            "memory_gb": (f"{p['memory_gb']:g} GB" if _finite(p.get("memory_gb")) else "not recorded")
            + (f" (limit {p['memory_limit_gb']:g} GB)" if _finite(p.get("memory_limit_gb")) else ""),
            "os": _text(p.get("os"), "not recorded"),
            "gpu": "; ".join(gpu.get("gpus", [])) if gpu else "none",
        }

    facts = []
    devices = Counter(_text(h.get("device"), "?") for h in headers)
    if set(devices) == {"cpu"}:
        facts.append(("Devices", "CPU only: each “device” of a scale is one CPU process (a stand-in for a GPU)"))
    else:
        facts.append(("Devices", ", ".join(f"{d} ({n} processes)" for d, n in sorted(devices.items()))))
    threads: dict[int, set[int]] = {}  # processes per node → threads per process
    for h in headers:
        scale = (h.get("run") or {}).get("scale")
        if _finite(h.get("threads")) and scale:
            threads.setdefault(Scale.parse(scale).devices_per_node, set()).add(int(h["threads"]))
    if threads:
        facts.append(
            (
                "Threads per process",
                "; ".join(
                    f"{', '.join(map(str, sorted(t)))} with {p} process{'es' if p > 1 else ''} per node"
                    for p, t in sorted(threads.items())
                ),
            )
        )
    gits = {}
    for h in headers:
        g = (h.get("provenance") or {}).get("git") or {}
        if g.get("commit"):
            gits[(g["commit"][:10], bool(g.get("dirty")))] = None
    facts.append(
        (
            "dlbench code (git)",
            ", ".join(f"{c}" + (" with uncommitted changes" if d else "") for c, d in gits) or "not recorded",
        )
    )
    slurm = [(h.get("provenance") or {}).get("slurm") for h in headers]
    slurm = [s for s in slurm if s]
    if slurm:
        jobs = sorted({s.get("slurm_job_id", "?") for s in slurm})
        clusters = _join_unique(s.get("slurm_cluster_name") for s in slurm)
        nodelists = _join_unique(s.get("slurm_job_nodelist") for s in slurm)
        text = f"{len(jobs)} job(s) ({', '.join(jobs[:6])}{', …' if len(jobs) > 6 else ''})"
        text += f" on cluster {clusters}" if clusters else ""
        text += f", nodes {nodelists}" if nodelists else ""
        facts.append(("Slurm", text))
    else:
        facts.append(("Slurm", "not used (processes launched locally)"))
    starts = sorted(_text(h.get("start_time")) for h in headers if h.get("start_time"))
    if starts:
        facts.append(("Runs started", f"{starts[0][:16].replace('T', ' ')} to {starts[-1][:16].replace('T', ' ')} UTC"))
    return {"from_headers": True, "software": software, "machines": list(machines.values()), "facts": facts}


# ---------------------------------------------------------------- method, models, references


def method(protocol: dict, config: dict, cells: pd.DataFrame, runs: pd.DataFrame, noisy_cv: float) -> dict:
    run = config.get("run", {}) or {}
    grid = config.get("grid", {}) or {}
    models = list(dict.fromkeys(cells["model"])) if not cells.empty else list(grid.get("models", []))
    sizes = []
    for m in models:
        spec = CATALOGUE.get(m, {})
        if spec.get("kind") == "text":
            n = run.get("seq_len") or spec.get("default_seq_len")
            sizes.append(f"{fnd.model_title(m)}: sequences of {n} tokens")
        else:
            n = run.get("image_size") or spec.get("default_image_size")
            sizes.append(f"{fnd.model_title(m)}: {n}×{n} px images")
    image_sizes = {run.get("image_size") or CATALOGUE.get(m, {}).get("default_image_size") for m in models}
    smaller = bool(run.get("image_size")) and any(
        run["image_size"] < CATALOGUE.get(m, {}).get("default_image_size", 0) for m in models
    )
    strategies = sorted(set(cells["strategy"])) if not cells.empty else []
    units = list(dict.fromkeys(sample_unit(m) if m in CATALOGUE else "samples" for m in models))
    return {
        "units": units,
        "frameworks": sorted(set(cells["framework"])) if not cells.empty else list(grid.get("frameworks", [])),
        "models": [fnd.model_title(m) for m in models],
        "batches": sorted({str(b) for b in cells["batch"]}, key=lambda b: (b == "max", b.zfill(8)))
        if not cells.empty
        else [],
        "scales": _sorted_scales(cells["scale"]) if not cells.empty else [],
        "data": [DATA_TEXT.get(d, d) for d in dict.fromkeys(cells["data"])] if not cells.empty else [],
        "precision": [f"{p} ({PRECISION_TEXT.get(p, p)})" for p in dict.fromkeys(cells["precision"])]
        if not cells.empty
        else [],
        "strategies": [(s, STRATEGY_TEXT.get(s, s)) for s in strategies],
        "sizes": sizes,
        "image_sizes": image_sizes,
        "smaller_than_published": smaller,
        "device": run.get("device", "cpu"),
        "threads": run.get("threads"),
        "time_limit_s": run.get("time_limit_s"),
        "noisy_cv": noisy_cv,
        "statistic": str(protocol.get("statistic", "")).replace("_", " "),
    }


def model_sections(cells: pd.DataFrame, runs: pd.DataFrame, found: list[fnd.Finding], workdir: Path) -> list[dict]:
    """Per model: facts, findings, tables, and figures drawn from its cells only."""
    sections = []
    all_tables = throughput_tables(cells)
    for model in sorted(cells["model"].unique(), key=lambda m: list(CATALOGUE).index(m) if m in CATALOGUE else 99):
        mine = cells[cells["model"] == model]
        throughput = None
        if mine["throughput"].map(_finite).any():
            throughput_png = workdir / f"{model}-throughput.png"
            figs.throughput_figure(mine, str(throughput_png))
            throughput = embed_png(throughput_png)
        scaled = mine[(mine["devices"] > 1) & mine["speedup"].map(_finite)]
        speedup = None
        if not scaled.empty:
            speedup_png = workdir / f"{model}-speedup.png"
            figs.speedup_figure(mine, str(speedup_png))
            speedup = embed_png(speedup_png)
        data_rows, data_figure = data_comparison(mine, workdir / f"{model}-data.png")
        params: dict[str, list[str]] = {}  # "25.6 M" → frameworks
        if not runs.empty and "trainable_params" in runs:
            for fw, g in runs[(runs["model"] == model) & runs["trainable_params"].map(_finite)].groupby("framework"):
                params.setdefault(f"{g['trainable_params'].iloc[0] / 1e6:.1f} M", []).append(fw)
        sections.append(
            {
                "model": model,
                "id": f"model-{model}",
                "title": fnd.model_title(model),
                "unit": f"{sample_unit(model) if model in CATALOGUE else 'samples'}/s",
                "params": [f"{p} ({', '.join(fws)})" for p, fws in params.items()],
                "findings": [finding_html(f) for f in found if f.model == model],
                "tables": [t for t in all_tables if t["key"][0] == model],
                "throughput_figure": throughput,
                "speedup_figure": speedup,
                "data_rows": data_rows,
                "data_figure": data_figure,
                "scales": _sorted_scales(mine["scale"]),
            }
        )
    return sections


def data_comparison(cells: pd.DataFrame, png: Path) -> tuple[list[dict], str | None]:
    """Rows and figure of real-data cells beside their synthetic twins (none: no such pair)."""
    pairs = real_data_pairs(cells)
    if pairs.empty:
        return [], None
    rows = [
        {
            "framework": c["framework"],
            "scale": figs.scale_text(c["scale"], c["strategy"]),
            "batch": c["batch"],
            "precision": c["precision"],
            "synthetic": f"{c['synthetic_throughput']:.1f}",
            "real": f"{c['throughput']:.1f}",
            "ratio": f"{c['real_vs_synthetic']:.2f}",
            "wait": f"{c['data_wait_fraction']:.1%}" if _finite(c.get("data_wait_fraction")) else "—",
        }
        for _, c in pairs.iterrows()
    ]
    figs.data_figure(cells, str(png))
    return rows, embed_png(png)


def published_vs_measured(
    references: pd.DataFrame | None, settings: dict, workdir: Path, found: list[fnd.Finding]
) -> dict | None:
    """The references table (results/tables/references.csv, from dlbench.references): each
    measured cell beside the published number or baseline it matched, ratio and verdict,
    and a figure of the ratios. None (no section) when there is no such table."""
    if references is None:
        return None
    refs = references.copy()
    hardware = settings.get("hardware") or ""
    out = {
        "hardware": hardware,
        "baseline": settings.get("baseline") or "",
        "tolerance": float(settings.get("tolerance", 0.1)),
        "rows": [],
        "figure": None,
        "findings": [finding_html(f) for f in found if f.topic == "reference"],
    }
    if refs.empty:
        return out
    refs["batch"] = refs["batch"].astype(str)
    refs = refs.sort_values(["kind", "model", "devices", "framework", "source"], kind="stable")
    for _, r in refs.iterrows():
        key = fnd.cell_key(r)
        out["rows"].append(
            {
                "cell_id": cell_id(key),
                "cell": f"{r['framework']} {fnd.model_title(r['model'])}, batch {r['batch']}, {r['scale']}"
                + (f" {r['strategy']}" if r["strategy"] != SINGLE_DEVICE else ""),
                "kind": _text(r.get("kind")),
                "source": _text(r.get("source")),
                "hardware": _text(r.get("hardware")),
                "reference_setup": " ".join(
                    v for v in (_text(r.get("reference_framework")), _text(r.get("reference_strategy"))) if v
                ),
                "reference": f"{r['reference']:.1f}" if _finite(r.get("reference")) else "—",
                "measured": f"{r['measured']:.1f}" if _finite(r.get("measured")) else "—",
                "ratio": f"{r['ratio']:.2f}×" if _finite(r.get("ratio")) else "—",
                "verdict": _text(r.get("verdict")),
            }
        )
    plotted = refs[refs["ratio"].map(_finite)]
    if not plotted.empty:
        path = workdir / "references.png"
        reference_figure(plotted, out["tolerance"], path)
        out["figure"] = embed_png(path)
    return out


def reference_figure(refs: pd.DataFrame, tolerance: float, path: Path) -> None:
    """measured ÷ reference per comparison, with 1 (equal) and the tolerance band."""
    plt = figs.plt
    labels = [
        f"{r['framework']} {fnd.model_title(r['model'])} bs{r['batch']} {r['scale']} vs "
        f"{_text(r.get('reference_framework')) or r['kind']} ({_text(r.get('hardware'))[:28] or r['kind']})"
        for _, r in refs.iterrows()
    ]
    height = max(2.2, 0.32 * len(refs) + 1.2)
    fig, ax = plt.subplots(figsize=(8.0, height))
    y = list(range(len(refs)))[::-1]
    ax.axvspan(1 - tolerance, 1 + tolerance, color="#dddddd", alpha=0.6, lw=0, label=f"within ±{tolerance:.0%}")
    ax.axvline(1.0, color="black", ls="--", lw=1, label="equal to the reference")
    ax.scatter(refs["ratio"], y, c=[figs.colour(fw) for fw in refs["framework"]], zorder=3)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=8)
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


# ---------------------------------------------------------------- the document


def _status_order(status: str) -> int:
    return list(STATUS_MEANING).index(status) if status in STATUS_MEANING else len(STATUS_MEANING)


def and_join(items) -> str:
    items = [str(i) for i in items]
    return " and ".join(items) if len(items) < 3 else ", ".join(items[:-1]) + " and " + items[-1]


def render(
    cells: pd.DataFrame,
    runs: pd.DataFrame,
    protocol: dict,
    config: dict,
    *,
    root: str | Path = ".",
    references: pd.DataFrame | None = None,
    generated: str | None = None,
    sources: dict[str, str] | None = None,
) -> str:
    """The report as one HTML string. `root`: the directory runs.csv's log paths are relative to."""
    if not cells.empty:
        # Read back from CSV, n and repeats are floats where an N/A cell has none.
        cells = cells.assign(
            batch=cells["batch"].astype(str),
            n=cells["n"].fillna(0).astype(int),
            repeats=cells["repeats"].fillna(0).astype(int),
        )
    noisy_cv = float(((config.get("analysis") or {}).get("noisy_cv")) or 0.1)
    found = fnd.findings(cells, noisy_cv)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["and_join"] = and_join
    reference_settings = config.get("references") or {}
    found += fnd.reference_verdicts(references, float(reference_settings.get("tolerance", 0.1)))
    with tempfile.TemporaryDirectory(prefix="dlbench-report-") as tmp:
        models = model_sections(cells, runs, found, Path(tmp)) if not cells.empty else []
        compared = published_vs_measured(references, reference_settings, Path(tmp), found)
    n_numbers = int(cells["throughput"].map(_finite).sum()) if not cells.empty else 0
    return env.get_template("report.html.j2").render(
        generated=generated or dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        protocol=protocol,
        method=method(protocol, config, cells, runs, noisy_cv),
        environment=environment(runs, read_headers(runs, root)),
        overall=[finding_html(f) for f in found if f.model is None],
        models=models,
        references=compared,
        counts={
            "runs": len(runs),
            "runs_ok": int((runs["status"] == "ok").sum()) if not runs.empty else 0,
            "cells": len(cells),
            "cells_with_number": n_numbers,
        },
        sources={"cells": "", "cells_sha256": "", "runs": "", **(sources or {})},
        statuses=sorted(set(cells["status"]) - {"ok"}, key=_status_order) if not cells.empty else [],
        status_meaning=STATUS_MEANING,
        status_text={**tables.STATUS_TEXT, "partial": "* (n/N)"},
        colour=figs.colour,
    )


def render_files(
    cells_path: str | Path,
    runs_path: str | Path,
    protocol: dict,
    config: dict,
    references_path: str | Path | None = None,
    root: str | Path = ".",
) -> str:
    """The report from the table files, as the pipeline writes them (references.csv optional)."""
    from dlbench.provenance import sha256_file

    cells = pd.read_csv(cells_path, dtype={"batch": str})
    runs = pd.read_csv(runs_path, dtype={"batch": str})
    references = None
    if references_path is not None and Path(references_path).exists():
        references = pd.read_csv(references_path, dtype={"batch": str})
    return render(
        cells,
        runs,
        protocol,
        config,
        root=root,
        references=references,
        sources={"cells": str(cells_path), "cells_sha256": sha256_file(cells_path), "runs": str(runs_path)},
    )
