"""The environment table: what ran where -- software per framework, machines, and facts
(devices, threads, code version, Slurm jobs, dates) -- from the step-log headers of the
runs in runs.csv.

The aggregate stage writes it (`results/tables/environment.json`), so that the report
reads tables only. Without headers (logs moved or deleted) it falls back to what
runs.csv records: framework versions and nodes.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pandas as pd

from dlbench import labels
from dlbench.analysis.columns import col
from dlbench.analysis.stats import finite
from dlbench.coords import Scale
from dlbench.labels import text
from dlbench.steplog import read_header


def read_headers(runs: pd.DataFrame, root: str | Path = ".") -> list[dict]:
    """Step-log headers of every rank of every run in runs.csv (`log_files`, relative to root)."""
    if runs.empty or col.log_files not in runs:
        return []
    paths = (Path(root) / rel for files in runs[col.log_files] for rel in text(files).split(";") if rel)
    return [h for h in (read_header(p) for p in paths) if h is not None]


def table(runs: pd.DataFrame, root: str | Path = ".") -> dict:
    """The environment of the runs in runs.csv, from their logs under root."""
    return summarize(runs, read_headers(runs, root))


def summarize(runs: pd.DataFrame, headers: list[dict]) -> dict:
    """Software per framework, machines per node, and where/when the runs ran."""
    if not headers:
        return from_runs(runs)
    return {
        "from_headers": True,
        "software": _software(headers),
        "machines": _machines(headers),
        "facts": _facts(headers),
    }


def to_json(environment: dict) -> str:
    return json.dumps(environment, indent=1, ensure_ascii=False) + "\n"


def read(path: str | Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def from_runs(runs: pd.DataFrame) -> dict:
    """What runs.csv alone says: versions per framework and the nodes of runs with a number."""
    ok = runs[runs[col.status] == "ok"] if not runs.empty else runs
    software = [
        {
            col.framework: fw,
            "version": _join_unique(g.get(col.framework_version, pd.Series(dtype=str))),
            "python": "",
            "env_lock": "",
            "container": "",
            "runs": len(g),
        }
        for fw, g in (ok.groupby(col.framework) if not ok.empty else [])
    ]
    nodes = sorted({n for v in ok.get(col.nodes, []) for n in text(v).split(";") if n}) if not ok.empty else []
    return {"from_headers": False, "software": software, "machines": [{"node": n} for n in nodes], "facts": []}


def _join_unique(values) -> str:
    return ", ".join(v for v in dict.fromkeys(text(v) for v in values) if v)


def _short_sha(value, n: int = 12) -> str:
    return text(value)[:n]


def _container(provenance: dict) -> str:
    """The image a run ran in, with its verified sha256 when the header has one."""
    container = provenance.get("container") or {}
    path = container.get("path") or provenance.get("container_image")
    if not path:
        return ""
    if container.get("runtime"):  # run.container: the launcher verified it against its lock
        lock = _short_sha(container.get("env_lock_in_image_sha256")) or "not recorded"
        return f"{container['runtime']} {path} {text(container.get('digest'))[:19]} (env lock sha256 {lock})"
    return f"{path} sha256 {_short_sha(container['sha256'])}" if container.get("sha256") else str(path)


def site_text(site: dict) -> str:
    """A site environment as the tables name it (run.python): its interpreter and the sha256
    of its installed distributions, which stands in for a lock."""
    return (
        f"{labels.SITE_ENV_TEXT}: {site.get('python')} "
        f"({len(site.get('distributions') or ())} distributions, sha256 {_short_sha(site.get('distributions_sha256'))})"
    )


def _software(headers: list[dict]) -> list[dict]:
    by_fw: dict[str, list[dict]] = {}
    for h in headers:
        by_fw.setdefault(h.get("run", {}).get("framework") or h.get("framework", {}).get("name", "?"), []).append(h)
    software = []
    for fw, hs in sorted(by_fw.items()):
        prov = [h.get("provenance") or {} for h in hs]
        locks = dict.fromkeys(
            f"{p.get('env_lock') or 'lock'} sha256 {_short_sha(p.get('env_lock_sha256'))}"
            for p in prov
            if p.get("env_lock_sha256")
        ) | dict.fromkeys(site_text(p["site_environment"]) for p in prov if p.get("site_environment"))
        software.append(
            {
                col.framework: fw,
                "version": _join_unique(h.get("framework", {}).get("version") for h in hs),
                "python": _join_unique(h.get("python") for h in hs),
                "env_lock": ", ".join(locks),
                "container": _join_unique(_container(p) for p in prov) or "none (Python venv)",
                "runs": len({tuple(sorted(h.get("run", {}).items())) for h in hs}),
            }
        )
    return software


def _machine(node: str, p: dict) -> dict:
    gpu = p.get("gpu") or {}
    allowed = p.get("cpus_allowed")
    return {
        "node": node,
        "cpu_model": text(p.get("cpu_model"), "not recorded"),
        "cpu_count": text(p.get("cpu_count"), "?")
        + (f" ({allowed} allowed)" if finite(allowed) and allowed != p.get("cpu_count") else ""),
        "memory_gb": (f"{p['memory_gb']:g} GB" if finite(p.get("memory_gb")) else "not recorded")
        + (f" (limit {p['memory_limit_gb']:g} GB)" if finite(p.get("memory_limit_gb")) else ""),
        "os": text(p.get("os"), "not recorded"),
        "gpu": "; ".join(gpu.get("gpus", [])) if gpu else "none",
    }


def _machines(headers: list[dict]) -> list[dict]:
    """One row per node, from the first header that names it."""
    machines: dict[str, dict] = {}
    for h in headers:
        node = h.get("node") or h.get("host") or "?"
        if node not in machines:
            machines[node] = _machine(node, h.get("provenance") or {})
    return list(machines.values())


def _facts(headers: list[dict]) -> list[tuple[str, str]]:
    facts = [("Devices", _devices_fact(headers))]
    threads = _threads_fact(headers)
    if threads:
        facts.append(("Threads per process", threads))
    allocators = _allocator_fact(headers)
    if allocators:  # headers older than the field say nothing: their campaigns' pages stay as they were
        facts.append(("Memory allocator (malloc)", allocators))
    gits = {}
    for h in headers:
        g = (h.get("provenance") or {}).get("git") or {}
        if g.get("commit"):
            gits[(g["commit"][:10], bool(g.get("dirty")))] = None
    code = ", ".join(f"{c}" + (" with uncommitted changes" if d else "") for c, d in gits)
    facts.append(("dlbench code (git)", code or "not recorded"))
    facts.append(("Slurm", _slurm_fact(headers)))
    request = _slurm_request_fact(headers)
    if request:
        facts.append(("Slurm request (site knobs)", request))
    starts = sorted(text(h.get("start_time")) for h in headers if h.get("start_time"))
    if starts:
        facts.append(("Runs started", f"{starts[0][:16].replace('T', ' ')} to {starts[-1][:16].replace('T', ' ')} UTC"))
    return facts


def _allocator_fact(headers: list[dict]) -> str:
    """Each malloc the ranks mapped (run.allocator, or a site's preload), with its processes."""
    mapped = Counter(
        f"{a['name']} ({a.get('library') or 'library not read'})" for a in (h.get("allocator") for h in headers) if a
    )
    return ", ".join(f"{name}: {n} process{'es' if n > 1 else ''}" for name, n in sorted(mapped.items()))


def _devices_fact(headers: list[dict]) -> str:
    devices = Counter(text(h.get("device"), "?") for h in headers)
    if set(devices) == {"cpu"}:
        return "CPU only: each “device” of a scale is one CPU process (a stand-in for a GPU)"
    return ", ".join(f"{d} ({n} processes)" for d, n in sorted(devices.items()))


def _threads_fact(headers: list[dict]) -> str:
    threads: dict[int, set[int]] = {}  # processes per node → threads per process
    for h in headers:
        scale = (h.get("run") or {}).get("scale")
        if finite(h.get("threads")) and scale:
            threads.setdefault(Scale.parse(scale).devices_per_node, set()).add(int(h["threads"]))
    return "; ".join(
        f"{', '.join(map(str, sorted(t)))} with {p} process{'es' if p > 1 else ''} per node"
        for p, t in sorted(threads.items())
    )


def _slurm_fact(headers: list[dict]) -> str:
    slurm = [s for s in ((h.get("provenance") or {}).get("slurm") for h in headers) if s]
    if not slurm:
        return "not used (processes launched locally)"
    jobs = sorted({s.get("slurm_job_id", "?") for s in slurm})
    clusters = _join_unique(s.get("slurm_cluster_name") for s in slurm)
    nodelists = _join_unique(s.get("slurm_job_nodelist") for s in slurm)
    out = f"{len(jobs)} job(s) ({', '.join(jobs[:6])}{', …' if len(jobs) > 6 else ''})"
    out += f" on cluster {clusters}" if clusters else ""
    out += f", nodes {nodelists}" if nodelists else ""
    return out


def _slurm_request_fact(headers: list[dict]) -> str:
    """What the runs asked of Slurm beyond their shape (run.gpu_request ... run.distribution),
    and the CPU binding and distribution srun reported to the ranks; '' when not srun."""
    asked, applied = {}, {}
    for h in headers:
        p = h.get("provenance") or {}
        if p.get("slurm_request"):
            asked[tuple(sorted(p["slurm_request"].items()))] = None
        slurm = p.get("slurm") or {}
        if slurm.get("slurm_cpu_bind") or slurm.get("slurm_distribution"):
            applied[(text(slurm.get("slurm_cpu_bind"), "default"), text(slurm.get("slurm_distribution"), "?"))] = None
    texts = []
    for items in asked:
        knobs = dict(items)
        gpu = f"GPUs by {knobs['gpu_request']}" + (f" (type {knobs['gpu_type']})" if knobs["gpu_type"] else "")
        nodes = "whole nodes (--exclusive, --mem=0)" if knobs["exclusive"] else "shared nodes"
        bind = f"--cpu-bind={knobs['cpu_bind']}" if knobs["cpu_bind"] else "the cluster's CPU binding"
        texts.append(f"{gpu}; {nodes}; {bind}; --distribution={knobs['distribution']}")
    if applied:
        texts.append("srun applied: " + ", ".join(f"cpu_bind {b}, distribution {d}" for b, d in applied))
    return "; ".join(texts)
