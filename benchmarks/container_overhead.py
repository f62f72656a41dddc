"""What a container costs a user, side by side in one sitting: pyxis (enroot), Apptainer and podman
vs the venv (no container), the same 1x1 cell under the same launcher (srun) on the local Slurm
cluster.

    .venvs/analysis/bin/python benchmarks/container_overhead.py [--framework pytorch] [--starts 5]
        [--modes none podman pyxis apptainer] [--model resnet50] [--batch 8] [--image-size 64]
        [--warmup 4] [--steps 15] [--threads 2] [--squashfs-builds 2] [--sif-builds 2]
        [--tolerance 0.05] [--json OUT]

1. Image → squashfs: `dlbench.images.squashfs.build` of the framework's pinned podman image,
   --squashfs-builds times (the median; the same bytes every time). Image → SIF: `apptainer
   build` from the image's OCI archive, --sif-builds times (the median), the last one pinned.
2. Start-up: per start, from just before this process runs the launcher (`python -m
   dlbench.launch`) to step 0's t_start in the rank's step log, both read from CLOCK_MONOTONIC
   (time.perf_counter is that clock on Linux, in a container too). It includes what every run
   pays: the launcher's image check (the squashfs's sha256), the srun step, the container
   (pyxis: enroot extracting the squashfs on the node, "container setup" in slurmd's log), the
   framework's import and the model's construction. The median over --starts.
3. Throughput: each start is one run of the cell (its warm-up, then its measured window);
   the ratio container ÷ venv of the medians with a 95 % bootstrap interval
   (dlbench.analysis.stats.ratio_ci) and its verdict (stats.ratio_verdict): 'same' only when the
   whole interval lies within 1 ± --tolerance (the container costs no throughput that this many
   starts can see); 'higher'/'lower' when it lies wholly beyond; 'inconclusive' when it crosses
   the band, with the starts it would take to decide it (stats.decide_factor).

Every round runs each mode once, in an order that rotates from round to round, so that the
shared machine's drift hits all alike. Runs inside one allocation of the local cluster
(tools/slurm-local/up.sh): the script re-runs itself under `salloc -N1 -n1` when started
outside one. Needs the framework's venv and podman image; pyxis and Apptainer where they are
installed (by their own guides: docs/containers.md), else that mode is left out, saying why.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dlbench import labels  # noqa: E402
from dlbench.analysis import stats  # noqa: E402
from dlbench.analysis.aggregate import summarize_run  # noqa: E402
from dlbench.coords import RunCoords  # noqa: E402
from dlbench.images import podman as images  # noqa: E402
from dlbench.images import sif, squashfs  # noqa: E402
from dlbench.launch import LaunchRequest  # noqa: E402
from dlbench.protocol import RunProtocol  # noqa: E402
from dlbench.steplog import read_steplog  # noqa: E402

MODES = ("none", "podman", "pyxis", "apptainer")
PYXIS_PLUGIN = Path(os.environ.get("DLBENCH_PYXIS_PLUGIN", "/usr/local/lib/slurm/spank_pyxis.so"))
SETUP = re.compile(r"\[(\d+)\.(\d+)\] pyxis: completed container setup in (\d+) ms")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--framework", default="pytorch")
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    p.add_argument("--starts", type=int, default=5)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mem-mb", type=int, default=6000)
    p.add_argument("--squashfs-builds", type=int, default=2)
    p.add_argument("--sif-builds", type=int, default=2)
    p.add_argument("--tolerance", type=float, default=stats.SAME_TOLERANCE, help="± band of 'same' throughput")
    p.add_argument("--json", type=Path, default=None, help="write every figure here too")
    return p.parse_args(argv)


def pyxis_missing() -> str | None:
    if shutil.which("enroot") is None or not PYXIS_PLUGIN.is_file():
        return "enroot/pyxis not installed (their own install guides: docs/containers.md)"
    said = subprocess.run(["srun", "--help"], capture_output=True, text=True).stdout
    return None if "--container-image" in said else "pyxis not loaded by the cluster (tools/slurm-local/up.sh)"


def missing(mode: str) -> str | None:
    """Why a runtime's mode cannot run here (None: it can)."""
    if mode == "pyxis":
        return pyxis_missing()
    if mode == "apptainer" and shutil.which("apptainer") is None:
        return "apptainer not installed (its own install guide: docs/containers.md)"
    return None


def sif_builds(framework: str, count: int) -> dict:
    """Image → SIF from the pinned OCI archive (dlbench.images.sif), `count` times (at least
    once: the last one is pinned): seconds each, and the file's size."""
    return derived_builds(sif.build, framework, max(count, 1), "sif_bytes")


def derived_builds(build, framework: str, count: int, size_key: str) -> dict:
    seconds, lock = [], {}
    images.ensure(framework, images.images_dir())
    for _ in range(count):
        started = time.monotonic()
        with images.build_lock(images.images_dir()):
            lock = build(framework, images.images_dir())
        seconds.append(round(time.monotonic() - started, 2))
    return {"seconds": seconds, "median_s": stats.median(seconds), "bytes": lock.get(size_key)}


def squashfs_builds(framework: str, count: int) -> dict:
    """Image → squashfs, `count` times: seconds each, and the file's size."""
    return derived_builds(squashfs.build, framework, count, "squashfs_bytes")


def request(mode: str, args) -> LaunchRequest:
    coords = RunCoords(args.framework, args.model, "fp32", "synthetic", str(args.batch), "1x1", "single", 1)
    in_image = mode != "none"
    return LaunchRequest(
        coords, RunProtocol("caict2020", args.warmup, args.steps, "mean"), coords.run_dir,
        image_size=args.image_size, threads=args.threads, progress_every=0, time_limit=900, launcher="srun",
        container=mode, images=str(images.images_dir()),
        env_lock=f"/opt/dlbench/envs/{args.framework}.txt" if in_image else str(REPO / f"envs/{args.framework}.txt"),
    )  # fmt: skip


def pyxis_plugstack() -> str | None:
    """The local cluster's pyxis line (tools/slurm-local): its options decide how a step starts."""
    try:
        lines = Path("/etc/slurm/plugstack.conf.d/dlbench-pyxis.conf").read_text().splitlines()
    except OSError:
        return None
    return next((line for line in lines if line.startswith("required")), None)


def container_setup_ms(job_id: str) -> float | None:
    """pyxis's own figure for the latest step of the job: enroot creating the container."""
    log = Path(os.environ.get("DLBENCH_SLURM_DIR", "/tmp/dlbench-slurm")) / "log/slurmd-n1.log"
    try:
        found = [m for m in SETUP.finditer(log.read_text(errors="replace")) if m.group(1) == job_id]
    except OSError:
        return None
    return float(found[-1].group(3)) if found else None


def one_start(mode: str, args, round_index: int, root: Path) -> dict:
    """One run of the cell in `mode`: its start-up (launcher start → step 0) and throughput."""
    req, workdir = request(mode, args), root / f"{mode}-{round_index}"  # the run's own results/
    workdir.mkdir()
    python = REPO / ".venvs" / args.framework / "bin/python"  # the launcher itself is stdlib only
    env = dict(os.environ, PYTHONPATH=str(REPO))
    started = time.monotonic()
    done = subprocess.run([python, "-m", "dlbench.launch", *req.to_argv()], cwd=workdir, env=env, capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"{mode}: launcher failed: {done.stderr.decode(errors='replace')[-2000:]}")
    row = summarize_run(req.coords, workdir)
    if row["status"] != "ok":
        raise RuntimeError(f"{mode} round {round_index}: {row['status']} {row['reason']}")
    log = read_steplog(workdir / req.run_dir / "rank0.steps.jsonl")
    result = {"startup_s": log.steps[0]["t_start"] - started, "throughput": row["throughput"]}
    if mode == "pyxis":
        result["container_setup_ms"] = container_setup_ms(os.environ["SLURM_JOB_ID"])
    return result


def measure(args, modes: list[str]) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="container-overhead-", ignore_cleanup_errors=True) as root:
        for r in range(args.starts):
            shift = r % len(modes)
            for mode in modes[shift:] + modes[:shift]:
                found[mode].append(one_start(mode, args, r, Path(root)))
                print(f"[container_overhead] round {r + 1}/{args.starts} {mode}: {found[mode][-1]}", flush=True)
    return found


def throughput_verdict(reference: list[float], throughput: list[float], tolerance: float) -> dict:
    """container ÷ venv: the ratio of the medians, its 95% CI, the verdict and, where it is
    inconclusive, how many starts it would take to decide it."""
    ci = stats.ratio_ci("median", reference, throughput)
    ratio = stats.median(throughput) / stats.median(reference)
    starts = (len(reference), len(throughput))
    row = {"throughput_ratio": ratio, "ratio_ci95": ci, "verdict": stats.ratio_verdict(ci, starts, tolerance=tolerance)}
    if row["verdict"] == labels.INCONCLUSIVE:
        factor = stats.decide_factor(ratio, ci, stats.ratio_band(tolerance))
        row["to_decide"] = labels.crosses(tolerance, starts, factor, unit="starts")
    return row


def summary(found: dict[str, list[dict]], tolerance: float = stats.SAME_TOLERANCE) -> dict:
    reference = [s["throughput"] for s in found.get("none", [])]
    out = {}
    for mode, starts in found.items():
        startup, throughput = [s["startup_s"] for s in starts], [s["throughput"] for s in starts]
        row = {"startup_median_s": stats.median(startup), "startup_s": [round(v, 2) for v in startup]}
        row |= {"throughput_median": stats.median(throughput), "throughput": [round(v, 3) for v in throughput]}
        setups = [s["container_setup_ms"] for s in starts if s.get("container_setup_ms") is not None]
        if setups:
            row["container_setup_median_ms"] = stats.median(setups)
        if reference and mode != "none":
            row |= throughput_verdict(reference, throughput, tolerance)
            row["startup_extra_s"] = row["startup_median_s"] - stats.median([s["startup_s"] for s in found["none"]])
        out[mode] = row
    return out


def report(result: dict) -> None:
    for kind in ("squashfs", "sif"):
        if result.get(kind):
            built = result[kind]
            builds = f"{built['median_s']:.1f} s median of {built['seconds']}"
            print(f"image → {kind} ({result['framework']}): {builds}, {built['bytes']} bytes")
    print(f"{'mode':8} {'start-up s':>11} {'+ vs venv':>10} {'img/s':>8} {'÷ venv [95 % CI]':>26}  verdict")
    for mode, row in result["modes"].items():
        extra = f"{row['startup_extra_s']:+.1f}" if "startup_extra_s" in row else ""
        ratio = ""
        if "throughput_ratio" in row:
            low, high = row["ratio_ci95"]
            ratio = f"{row['throughput_ratio']:.3f} [{low:.3f}, {high:.3f}]"
        line = f"{mode:8} {row['startup_median_s']:11.1f} {extra:>10} {row['throughput_median']:8.2f} {ratio:>26}"
        print(f"{line}  {row.get('verdict', '')}" + (f": {row['to_decide']}" if "to_decide" in row else ""))
        if "container_setup_median_ms" in row:
            setup = row["container_setup_median_ms"]
            print(f"{'':9}pyxis container setup (enroot, slurmd's log): {setup:.0f} ms median")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if "SLURM_JOB_ID" not in os.environ:  # one allocation for every start: salloc's own wait is not measured
        alloc = ["salloc", "-N1", "-n1", f"-c{args.threads}", f"--mem={args.mem_mb}", "-t", "180"]
        os.execvp("salloc", [*alloc, sys.executable, __file__, *(sys.argv[1:] if argv is None else argv)])
    modes = list(args.modes)
    for mode, why in [(mode, missing(mode)) for mode in modes]:
        if why:
            print(f"[container_overhead] {mode} left out: {why}", flush=True)
            modes.remove(mode)
    for mode in modes:
        if mode != "none":
            (squashfs.ensure if mode == "pyxis" else images.ensure)(args.framework, images.images_dir())
    result = {"framework": args.framework, "cell": vars(args) | {"json": None, "modes": modes}}
    result["started"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    result["load_before"] = os.getloadavg()
    if "pyxis" in modes:
        result["pyxis_plugstack"] = pyxis_plugstack()
        print(f"[container_overhead] pyxis: {result['pyxis_plugstack']}", flush=True)
    if "pyxis" in modes and args.squashfs_builds:
        result["squashfs"] = squashfs_builds(args.framework, args.squashfs_builds)
    if "apptainer" in modes:
        result["sif"] = sif_builds(args.framework, args.sif_builds)
    result["modes"] = summary(measure(args, modes), args.tolerance)
    result["load_after"] = os.getloadavg()
    report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
