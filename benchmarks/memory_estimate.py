"""Planning's memory estimate (dlbench/planning/fit.py) against the peaks runs measure.

    .venvs/analysis/bin/python benchmarks/memory_estimate.py [--seq 1024] [--base-seq 16]

Each case is a real run of the launcher (llama_small, fp32, CPU ranks) at two sequence
lengths; a rank's peak is its measured window's peak RSS (the step-log footer's
window_rss_mb, max over ranks). The peak holds the framework's own resident memory, which
the estimate leaves out on the CPU, so beside the whole peak the table gives the growth
from --base-seq to --seq, measured and estimated: the terms that scale with the tokens
(activations and logits), free of that constant. On a GPU the device script's footers
(device_memory) give the allocator's peak instead (docs/memory.md has both).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dlbench.coords import RunCoords  # noqa: E402
from dlbench.launch import LaunchRequest  # noqa: E402
from dlbench.planning import fit  # noqa: E402
from dlbench.protocol import RunProtocol  # noqa: E402
from dlbench.steplog import rank_log_name, read_steplog  # noqa: E402

# (framework, strategy, scale, activation checkpointing, micro-batches a step)
CASES = [
    ("pytorch", "single", "1x1", "none", 1),
    ("pytorch", "ddp", "1x2", "none", 1),
    ("pytorch", "fsdp", "1x2", "none", 1),
    ("jax", "single", "1x1", "none", 1),
    ("pytorch", "single", "1x1", "selective", 1),
    ("pytorch", "single", "1x1", "full", 1),
    ("jax", "single", "1x1", "selective", 1),
    ("jax", "single", "1x1", "full", 1),
    ("pytorch", "fsdp", "1x2", "none", 2),
]
MIB = 2**20


def coords_of(case: tuple, batch: int) -> RunCoords:
    framework, strategy, scale, checkpointing, accum = case
    return RunCoords(
        framework, "llama_small", "fp32", "synthetic", str(batch), scale, strategy, 1,
        activation_checkpointing=checkpointing, grad_accum=accum,
    )  # fmt: skip


def measured_peak_mib(case: tuple, batch: int, seq_len: int, threads: int) -> float:
    coords = coords_of(case, batch)
    framework, scale = coords.framework, coords.scale
    with tempfile.TemporaryDirectory() as root:
        run_dir = Path(root) / coords.run_dir
        request = LaunchRequest(
            coords, RunProtocol("caict2020", 1, 3, "mean"), str(run_dir), seq_len=seq_len, threads=threads,
            progress_every=0,
        )  # fmt: skip
        python = REPO / ".venvs" / framework / "bin/python"
        cmd = [str(python), "-m", "dlbench.launch", *request.to_argv()]
        subprocess.run(cmd, cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, check=True)
        peaks = []
        for rank in range(int(scale.split("x")[1])):
            log = read_steplog(run_dir / rank_log_name(rank))
            if log.status != "ok":
                raise RuntimeError(f"{coords.run_dir} rank {rank}: {log.status} {log.footer}")
            peaks.append(log.footer["window_rss_mb"])
        return max(peaks)


def estimated_mib(case: tuple, batch: int, seq_len: int) -> float:
    return fit.cell_estimate_gib(coords_of(case, batch).cell, seq_len, "cpu") * fit.GIB / MIB


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--base-seq", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--only", default="", help="cases whose name contains this text, e.g. 'ac_' or 'jax'")
    args = p.parse_args()
    print(f"llama_small fp32, batch {args.batch}, CPU ranks; MiB per rank (window peak RSS, max over ranks)")
    print("case                           est@seq  meas@seq  est growth  meas growth  growth error")
    for case in CASES:
        name = f"{case[0]} {case[2]} {coords_of(case, args.batch).cell.strategy}{coords_of(case, args.batch).training}"
        if args.only not in name:
            continue
        est = {s: estimated_mib(case, args.batch, s) for s in (args.base_seq, args.seq)}
        got = {s: measured_peak_mib(case, args.batch, s, args.threads) for s in est}
        grown_est, grown_got = est[args.seq] - est[args.base_seq], got[args.seq] - got[args.base_seq]
        print(
            f"{name:29s}  {est[args.seq]:7.0f}  {got[args.seq]:8.0f}  "
            f"{grown_est:10.0f}  {grown_got:11.0f}  {grown_est / grown_got - 1:+12.1%}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
