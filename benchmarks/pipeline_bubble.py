"""Pipeline parallelism's bubble, measured beside each schedule's theory (dlbench/pipelining.py).

    .venvs/analysis/bin/python benchmarks/pipeline_bubble.py [--scale 1x2] [--microbatches 2 4 8]

Each case is a real run of the launcher (PyTorch `pp`, llama_small, fp32, gloo CPU ranks):
each rank's bubble is the share of the schedule's time its stages did not compute (the step
records' `bubble`, mean over the measured steps); the pipeline's is the least idle rank's,
the stage that sets the pace. Theory assumes equal stages; llama_small's are not (its head
is 5.2 blocks' worth of matmuls, on the last stage), which the per-rank figures show. Beside
them, each rank's peak RSS over the measured window and planning's estimate for the worst rank.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dlbench import pipelining  # noqa: E402
from dlbench.coords import PIPELINE_SCHEDULES, RunCoords, Scale  # noqa: E402
from dlbench.launch import LaunchRequest  # noqa: E402
from dlbench.planning import fit  # noqa: E402
from dlbench.protocol import RunProtocol  # noqa: E402
from dlbench.steplog import rank_log_name, read_steplog  # noqa: E402

MIB = 2**20


def run(schedule: str, microbatches: int, args) -> tuple[list[float], list[float], RunCoords]:
    """(each rank's measured bubble, each rank's window peak RSS in MiB, the run's coordinates)."""
    coords = RunCoords(
        "pytorch", "llama_small", "fp32", "synthetic", str(args.batch), args.scale, "pp", 1,
        pp_schedule=schedule, pp_microbatches=microbatches,
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as root:
        run_dir = Path(root) / coords.run_dir
        request = LaunchRequest(
            coords, RunProtocol("caict2020", 2, args.steps, "mean"), str(run_dir), seq_len=args.seq,
            threads=args.threads, progress_every=0,
        )  # fmt: skip
        python = Path(args.venvs) / "pytorch/bin/python"
        cmd = [str(python), "-m", "dlbench.launch", *request.to_argv()]
        subprocess.run(cmd, cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, check=True)
        bubbles, peaks = [], []
        for rank in range(Scale.parse(args.scale).devices):
            log = read_steplog(run_dir / rank_log_name(rank))
            if log.status != "ok":
                raise RuntimeError(f"{coords.run_dir} rank {rank}: {log.status} {log.footer}")
            bubbles.append(statistics.fmean(s["bubble"] for s in log.measured_steps()))
            peaks.append(log.footer["window_rss_mb"])
    return bubbles, peaks, coords


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", default="1x2")
    p.add_argument("--batch", type=int, default=4, help="per device; the pipeline's batch is batch × ranks")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--steps", type=int, default=6, help="measured steps (2 warm-up)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--microbatches", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--schedules", nargs="+", default=list(PIPELINE_SCHEDULES))
    p.add_argument("--venvs", default=str(REPO / ".venvs"))
    args = p.parse_args()
    ranks = Scale.parse(args.scale).devices
    print(f"llama_small fp32 pp {args.scale}, batch {args.batch} × {ranks} ranks × {args.seq} tokens")
    print("schedule          m  theory  measured  per rank          peak MiB per rank   estimate MiB (worst rank)")
    for schedule in args.schedules:
        for m in args.microbatches:
            problem = pipelining.pipeline_problem("llama_small", schedule, ranks, args.batch, m)
            if problem:
                print(f"{schedule:16s} {m:2d}  -- {problem}")
                continue
            bubbles, peaks, coords = run(schedule, m, args)
            theory = pipelining.schedule(schedule).bubble(ranks, m)
            estimate = fit.cell_estimate_gib(coords.cell, args.seq, "cpu") * fit.GIB / MIB
            ranks_text = " ".join(f"{b:.3f}" for b in bubbles)
            peaks_text = " ".join(f"{x:.0f}" for x in peaks)
            print(
                f"{schedule:16s} {m:2d}  {theory:6.3f}  {min(bubbles):8.3f}  {ranks_text:16s}  {peaks_text:18s}"
                f"  {estimate:.0f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
