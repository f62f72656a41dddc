"""Start the processes of one run, locally or through `srun`.

    python -m dlbench.launch --framework pytorch --model resnet50 ... --run-dir DIR

As the launcher it starts the run's tasks (`RunCoords.tasks`, from the strategy's
`dlbench.runners.layout`: one per device, one per node for single-process multi-device
strategies, one per node with rank 0 as coordinator for parameter-server strategies) as
local subprocesses, or with `srun` inside a Slurm allocation, waits for them and writes
`launch.json` (rank exit codes, wall time): the file Snakemake tracks. As a rank
(DLBENCH_RANK, or SLURM_PROCID under srun) it runs `dlbench.worker.run_rank`, which writes
`rank<k>.steps.jsonl`; a helper rank (beyond the layout's step logs) runs the framework
module's `serve()` instead and writes no step log.

A failed, OOM or killed run is a result, not an error: the launcher exits 0 once it has
written `launch.json`, so Snakemake never deletes the raw logs of a failed run and the
rest of the grid goes on. It refuses to start where raw logs already exist. Stdlib only.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from dlbench import provenance
from dlbench.coords import RUN_FIELDS, RunCoords
from dlbench.models import CATALOGUE
from dlbench.runners.base import Distributed, RunSpec
from dlbench.steplog import rank_log_name
from dlbench.worker import run_rank


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in RUN_FIELDS:
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--preset", required=True)
    p.add_argument("--warmup-steps", type=int, required=True)
    p.add_argument("--measured-steps", type=int, required=True)
    p.add_argument("--statistic", required=True)
    p.add_argument("--image-size", type=int, default=0, help="0: the model's default")
    p.add_argument("--seq-len", type=int, default=0, help="0: the model's default")
    p.add_argument("--max-batch-file", default=None, help="batch_search result to use when --batch is 'max'")
    p.add_argument("--threads", type=int, default=1, help="CPU threads for the whole run")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--compile", action="store_true")
    p.add_argument("--time-limit", type=int, default=0, help="seconds per rank; 0 = none")
    p.add_argument("--progress-every", type=int, default=10)
    p.add_argument("--memory-cap-mb", type=int, default=0, help="address-space cap per rank (CPU OOM); 0 = none")
    p.add_argument("--env-lock", default=None, help="the environment's lock file (hashed into the header)")
    p.add_argument("--launcher", default="local", choices=["local", "srun"])
    p.add_argument("--data-dir", default="", help="real data: the framework's converted dataset")
    p.add_argument("--data-workers", type=int, default=1, help="real data: input-pipeline workers per rank")
    return p.parse_args(argv)


def coords_from(args: argparse.Namespace) -> RunCoords:
    return RunCoords.from_dict({name: getattr(args, name) for name in RUN_FIELDS})


def spec_from(args: argparse.Namespace, dist: Distributed) -> RunSpec:
    coords = coords_from(args)
    meta = CATALOGUE[coords.model]
    if coords.batch == "max":
        from dlbench.batch_search import read_result

        if not args.max_batch_file:
            sys.exit("dlbench: --batch max needs --max-batch-file")
        batch = read_result(args.max_batch_file)
    else:
        batch = int(coords.batch)
    if coords.data == "real" and not args.data_dir:
        sys.exit("dlbench: --data real needs --data-dir (the framework's converted dataset)")
    return RunSpec(
        coords=coords,
        batch=batch,
        image_size=args.image_size or meta.get("default_image_size", 0),
        seq_len=args.seq_len or meta.get("default_seq_len", 0),
        threads=max(1, args.threads // max(1, dist.local_world_size)),
        device=args.device,
        local_devices=coords.layout.local_devices,
        compile=args.compile,
        seed=coords.repeat,
        dist=dist,
        data_dir=args.data_dir,
        data_workers=max(1, args.data_workers),
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_environment() -> Distributed | None:
    """This process's place in the run, if it is a rank (else None: it is the launcher)."""
    env = os.environ
    if "DLBENCH_RANK" in env:
        return Distributed(
            rank=int(env["DLBENCH_RANK"]),
            world_size=int(env["DLBENCH_WORLD_SIZE"]),
            local_rank=int(env["DLBENCH_LOCAL_RANK"]),
            local_world_size=int(env["DLBENCH_LOCAL_WORLD_SIZE"]),
            master_addr=env["DLBENCH_MASTER_ADDR"],
            master_port=int(env["DLBENCH_MASTER_PORT"]),
            node=env.get("DLBENCH_NODE", socket.gethostname()),
            # Every node's address in node order (what srun ranks get from Slurm), for a
            # multi-node layout started by hand, e.g. several "nodes" on one host in a test.
            endpoints={"nodes": env["DLBENCH_NODES"].split(",")} if env.get("DLBENCH_NODES") else {},
        )
    if "SLURM_PROCID" in env and "DLBENCH_SRUN" in env:
        from dlbench import slurm

        return slurm.distributed_from_environment()
    return None


def run_as_rank(args: argparse.Namespace, dist: Distributed) -> int:
    protocol = {
        "preset": args.preset,
        "warmup_steps": args.warmup_steps,
        "measured_steps": args.measured_steps,
        "statistic": args.statistic,
    }
    spec = spec_from(args, dist)
    if dist.rank >= spec.coords.processes:
        # A helper task (e.g. a parameter-server node without the coordinator): it serves
        # its node's devices until the coordinator is done and writes no step log.
        from dlbench.runners import framework_module

        return framework_module(spec.coords.framework).serve(spec, time_limit_s=args.time_limit)
    log_path = Path(args.run_dir) / rank_log_name(dist.rank)
    run_rank(
        spec,
        protocol,
        str(log_path),
        progress_every=args.progress_every,
        time_limit_s=args.time_limit,
        provenance=provenance.collect(args.env_lock),
        memory_cap_mb=args.memory_cap_mb,
    )
    return 0


def launch_local(args: argparse.Namespace, argv: list[str]) -> list[int | None]:
    coords = coords_from(args)
    scale = coords.scale_obj
    if scale.nodes != 1:
        sys.exit(f"scale {coords.scale}: {scale.nodes} nodes need a Slurm allocation (--launcher srun)")
    world = coords.tasks
    per_node = coords.layout.tasks_per_node
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(
            os.environ,
            DLBENCH_RANK=str(rank),
            DLBENCH_WORLD_SIZE=str(world),
            DLBENCH_LOCAL_RANK=str(rank),
            DLBENCH_LOCAL_WORLD_SIZE=str(per_node),
            DLBENCH_MASTER_ADDR="127.0.0.1",
            DLBENCH_MASTER_PORT=str(port),
            DLBENCH_NODE=socket.gethostname(),
        )
        procs.append(subprocess.Popen([sys.executable, "-m", "dlbench.launch", *argv], env=env))
    return wait_for_ranks(procs, args)


def wait_for_ranks(procs: list[subprocess.Popen], args: argparse.Namespace) -> list[int | None]:
    """Wait for every rank; returns their exit codes (None: killed by this launcher)."""
    # Ranks enforce their own time limit; this bound catches a rank stuck in a collective.
    deadline = time.monotonic() + args.time_limit + 120 if args.time_limit else None
    killed = set()
    for proc in procs:
        remaining = None if deadline is None else max(1.0, deadline - time.monotonic())
        try:
            proc.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            for j, other in enumerate(procs):
                if other.poll() is None:
                    other.kill()
                    killed.add(j)
            proc.wait()
    return [None if i in killed else p.returncode for i, p in enumerate(procs)]


def write_launch_record(args: argparse.Namespace, world: int, exit_codes: list, started: float) -> None:
    """`world`: tasks started (one exit code each); the first `coords.processes` write logs."""
    run_dir = Path(args.run_dir)
    logs = coords_from(args).processes
    missing = [r for r in range(logs) if not (run_dir / rank_log_name(r)).exists()]
    if missing:
        print(f"[dlbench] ranks {missing} left no step log in {run_dir}", file=sys.stderr)
    record = {
        "world_size": world,
        "step_logs": logs,
        "rank_exit_codes": exit_codes,
        "ranks_without_log": missing,
        "wall_seconds": round(time.monotonic() - started, 3),
        "launcher": args.launcher,
    }
    (run_dir / "launch.json").write_text(json.dumps(record, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    dist = rank_environment()
    if dist is not None:
        return run_as_rank(args, dist)
    run_dir = Path(args.run_dir)
    tasks = coords_from(args).tasks
    if args.launcher == "srun":
        from dlbench import slurm

        # Slurm ended an earlier attempt (scancel, time limit) before it wrote launch.json:
        # a retry moves its files to attempt<k>/; a later invocation records it as it ended.
        recorded = slurm.previous_attempt(run_dir, tasks)
        if recorded is not None:
            write_launch_record(args, tasks, recorded, time.monotonic())
            return 0
    existing = sorted(run_dir.glob("rank*.steps.jsonl"))
    if existing:
        sys.exit(
            f"dlbench: raw step logs already exist in {run_dir} ({existing[0].name}); dlbench never "
            "overwrites raw logs: move that directory away to run this cell again"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if args.launcher == "srun":
        from dlbench import slurm

        exit_codes = slurm.launch(args, argv)
    else:
        # Even one rank runs in its own process: a framework that aborts (e.g. TensorFlow
        # on an mmap failure under the memory cap) must not take the launcher with it.
        exit_codes = launch_local(args, argv)
    write_launch_record(args, tasks, exit_codes, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
