"""Memory from the compilers, beside the formula (dlbench.planning.fit): each LLM cell's peak
per rank as the framework itself works it out before launch, with no device. JAX: XLA's memory
analysis of the runner's step compiled for abstract arguments; PyTorch: the runner's step on
fake tensors under its memory tracker (FSDP-aware where the strategy shards). On the CPU each
adds what the framework's process holds besides its tensors, measured in the estimating process
(the tables' CPU peak is a process's resident set); docs/memory.md gives both against the peaks.

The estimators run in the framework's environment (dlbench/runners/<fw>/memory_estimate.py)
as subprocesses of planning, once per distinct shape: the result is cached on disk under
CACHE_DIR (the checkout's, shared by every working directory) keyed by the shape, the code that
makes it and the framework's environment lock, so a second plan spawns nothing.
Planning only spawns (`prepare`); the fit check and the tables read the cache (`lookup`). An
estimate that fails leaves the formula's in place, and planning says so. Stdlib only.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from dlbench.coords import CellKey

GIB = 2**30
REPO = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO / ".cache" / "memory_estimates"
# A working directory's copy of its grid's estimates, which its tables read: a campaign's
# tables regenerated elsewhere then do not depend on what that checkout's cache holds.
WORKDIR_DIR = "results/memory_estimates"
# The module each framework's estimate runs, and whether it takes one shape per process (XLA
# reads its device count once) or a list of them (torch's imports paid once).
ESTIMATORS = {
    "pytorch": ("dlbench.runners.pytorch.memory_estimate", 0),
    "jax": ("dlbench.runners.jax.memory_estimate", 1),
}
# What the estimate is, as the tables and the N/A reason name it.
BASIS = {
    "pytorch": "torch MemTracker on fake tensors",
    "jax": "XLA memory analysis of the compiled step",
}
TIMEOUT_S = 900
WORKERS = 2  # estimator processes at once (torch's shapes split in two)
# Strategies the estimators do not build: Horovod's step is its optimizer's allreduce hooks.
NOT_ESTIMATED = ("horovod",)
# Estimators that compile for a GPU described by run.gpu_target_config (XLA's deviceless compile);
# PyTorch's needs no device at all.
COMPILES_FOR_TARGET = ("jax",)


@dataclass(frozen=True)
class Estimate:
    gib: float
    basis: str  # what made it, e.g. "XLA memory analysis of the compiled step + 0.43 GiB runtime"


def request(cell: CellKey, seq_len: int, device: str) -> dict | None:
    """The shape an estimate is made for: the cell without its data (synthetic and real
    batches have the same shapes), at `seq_len` on `device`; None where no estimator applies."""
    if cell.framework not in ESTIMATORS or cell.strategy in NOT_ESTIMATED or not str(cell.batch).isdigit():
        return None
    coords = {**cell.as_dict(), "data": "synthetic", "repeat": 1}
    return {"coords": coords, "seq_len": int(seq_len), "device": device}


@functools.cache
def code_digest(framework: str, device: str) -> str:
    """The sha256 of what an estimate depends on besides its shape: the framework's runner,
    dlbench's Llama shapes and the environment's lock. A changed one is estimated anew."""
    from dlbench.runners import env_name

    digest = hashlib.sha256()
    lock = REPO / "envs" / f"{env_name(framework, device)}.txt"
    paths = sorted((REPO / "dlbench/runners" / framework).glob("*.py")) + [REPO / "dlbench/llm.py"]
    for path in paths + ([lock] if lock.exists() else []):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def key(shape: dict, code: bool = True, target: str = "") -> str:
    """The record's name: the shape and (`code`) the digest of the code that makes it and of the
    GPU `target` it was compiled for (target_digest), as the checkout's cache names it. A working
    directory's copy is named by the shape alone: it is what that grid's planning used, which its
    tables read whatever the code is later."""
    named = {"shape": shape}
    if code:
        named["code"] = code_digest(shape["coords"]["framework"], shape["device"])
        if target and _for_target(shape):
            named["target"] = target
    return hashlib.sha256(json.dumps(named, sort_keys=True).encode()).hexdigest()[:24]


def cache_path(shape: dict, cache_dir: str | Path | None = None, code: bool = True, target: str = "") -> Path:
    return Path(cache_dir or CACHE_DIR) / shape["coords"]["framework"] / f"{key(shape, code, target)}.json"


def target_config(run: dict) -> str:
    """The absolute path of run.gpu_target_config on a CUDA grid ("" where none is set): the
    device XLA compiles the JAX cells' steps for when no GPU is attached (docs/memory.md)."""
    path = run.get("gpu_target_config") or ""
    return os.path.abspath(path) if path and run.get("device") == "cuda" else ""


def target_digest(run: dict) -> str:
    """What the estimates' cache keys of a grid's CUDA shapes add for its target (its text)."""
    path = target_config(run)
    return _file_digest(path, os.stat(path).st_mtime_ns) if path and os.path.isfile(path) else ""


@functools.cache
def _file_digest(path: str, mtime_ns: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def _for_target(shape: dict) -> bool:
    return shape["device"] == "cuda" and shape["coords"]["framework"] in COMPILES_FOR_TARGET


def of_record(record: dict, device: str) -> Estimate:
    """An estimator's result as a rank's estimate: the tensors' peak, and on the CPU the
    framework's resident runtime (the tables' CPU peak is the process's resident set)."""
    framework = record["shape"]["coords"]["framework"]
    runtime = record["runtime"] if device == "cpu" else 0
    basis = BASIS[framework] + (f" + {runtime / GIB:.2f} GiB process runtime" if runtime else "")
    return Estimate((record["tensors"] + runtime) / GIB, basis)


def lookup(
    cell: CellKey,
    seq_len: int,
    device: str,
    cache_dir: str | Path | None = None,
    code: bool = True,
    target: str = "",
) -> Estimate | None:
    """The cached compiler estimate of `cell` (None: not made, or no estimator applies);
    `code=False` in a working directory's copy (WORKDIR_DIR, named by the shape alone);
    `target`: the grid's target_digest."""
    shape = request(cell, seq_len, device)
    if shape is None:
        return None
    path = os.path.abspath(cache_path(shape, cache_dir, code, target))
    try:
        read = (path, os.stat(path).st_mtime_ns)  # a working directory's copy may be rewritten
        if read not in _READ:
            _READ[read] = of_record(json.loads(Path(path).read_text()), device)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # not made (yet): asked again next time
    return _READ[read]


_READ: dict[tuple[str, int], Estimate] = {}


def python_of(framework: str, device: str, run: dict) -> str:
    """The framework's Python, as the runs find it (dlbench.planning.deployment)."""
    from dlbench.planning import venvs  # only where an estimate is spawned

    return venvs.venv_python(venvs.venvs_dir(str(REPO)), framework, device, run.get("python") or {})


def prepare(shapes: list[dict], run: dict, cache_dir: str | Path | None = None) -> list[str]:
    """Make and cache the estimate of every shape not cached yet (spawning the estimators);
    returns what planning says of it: the count, and each failure, whose cells keep the formula."""
    if not shapes:
        return []
    from concurrent.futures import ThreadPoolExecutor  # only where an LLM grid is planned

    target = target_digest(run)
    missing = {key(s): s for s in shapes if not cache_path(s, cache_dir, target=target).exists()}
    batches = _batches(list(missing.values()))
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        outcomes = list(pool.map(lambda batch: _spawn(batch, run), batches))
    for batch, results in zip(batches, outcomes, strict=True):
        for shape, result in zip(batch, results, strict=True):
            if result.get("spawn"):  # the process, not the shape, failed: asked again next time
                continue
            path = cache_path(shape, cache_dir, target=target)
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(f".{os.getpid()}.part")  # another planner may write it too
            partial.write_text(json.dumps({"shape": shape, **result}, indent=1))
            os.replace(partial, path)
    failures = [
        f"  {_named(s)}: {error}: the formula's estimate is used"
        for s, error in _errors(shapes, outcomes, batches, cache_dir, target)
    ]
    made = sum(1 for batch, results in zip(batches, outcomes, strict=True) for r in results if "error" not in r)
    lines = [
        f"memory estimates from the compilers: {len(shapes)} shape(s), {len(shapes) - len(missing)} cached, "
        f"{made} made now ({cache_dir or CACHE_DIR}), {len(failures)} failed"
    ]
    return lines + failures


def _errors(shapes, outcomes, batches, cache_dir, target):
    """(shape, error) of every shape without an estimate: its process's failure now, or the
    estimator's error as cached (a shape it cannot estimate is not asked again)."""
    failed = {
        key(s): r["error"]
        for b, rs in zip(batches, outcomes, strict=True)
        for s, r in zip(b, rs, strict=True)
        if r.get("spawn")
    }
    for shape in shapes:
        if key(shape) in failed:
            yield shape, failed[key(shape)]
            continue
        try:
            error = json.loads(cache_path(shape, cache_dir, target=target).read_text()).get("error")
        except (OSError, ValueError):
            error = "no estimate"
        if error:
            yield shape, error


def copy_to_workdir(
    shapes: list[dict], workdir_copy: str, cache_dir: str | Path | None = None, run: dict | None = None
) -> None:
    """The grid's cached estimates into the working directory (WORKDIR_DIR at planning), named
    by their shapes, each written where it differs."""
    digest = target_digest(run or {})
    for shape in shapes:
        source, target = cache_path(shape, cache_dir, target=digest), cache_path(shape, workdir_copy, code=False)
        if not source.exists() or (target.exists() and target.read_bytes() == source.read_bytes()):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.part")
        partial.write_bytes(source.read_bytes())
        os.replace(partial, target)


def _batches(shapes: list[dict]) -> list[list[dict]]:
    """The subprocesses' requests: one shape each where the estimator takes one, else the
    framework's shapes split in two (planning's two workers)."""
    batches = []
    for framework, (_, one_each) in ESTIMATORS.items():
        mine = [s for s in shapes if s["coords"]["framework"] == framework]
        if one_each:
            batches += [[s] for s in mine]
        elif mine:
            half = (len(mine) + 1) // 2
            batches += [part for part in (mine[:half], mine[half:]) if part]
    return batches


def _spawn(batch: list[dict], run: dict) -> list[dict]:
    """One estimator process's results for `batch`; each an error where the process failed."""
    framework, device = batch[0]["coords"]["framework"], batch[0]["device"]
    python = python_of(framework, device, run)
    target = target_config(run)
    if target and _for_target(batch[0]):  # compiled for that GPU with none attached
        batch = [{**shape, "target_config": target} for shape in batch]
    if not os.access(python, os.X_OK):
        return [{"error": f"no {framework} environment at {python} yet", "spawn": True}] * len(batch)
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}
    try:
        done = subprocess.run(
            [python, "-m", ESTIMATORS[framework][0]],
            input=json.dumps(batch),
            capture_output=True,
            text=True,
            env=env,
            timeout=TIMEOUT_S,
            check=False,
        )
        results = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError) as error:
        return [{"error": f"{framework}'s estimator: {error}", "spawn": True}] * len(batch)
    if not isinstance(results, list) or len(results) != len(batch):
        tail = (done.stderr or "").strip().splitlines()[-1:] or ["no output"]
        return [{"error": f"{framework}'s estimator exited {done.returncode}: {tail[0][:300]}", "spawn": True}] * len(
            batch
        )
    return results


def _named(shape: dict) -> str:
    c = CellKey(**{name: value for name, value in shape["coords"].items() if name != "repeat"})
    return (
        f"{c.framework} {c.model} {c.precision} bs{c.batch} {c.scale} {c.strategy}{c.training} seq {shape['seq_len']}"
    )
