"""`python -m dlbench.launch`: as the launcher, start the run and write launch.json; as a
rank, run the worker (or a helper task's `serve()`). The package docstring says more."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from dlbench import provenance
from dlbench.launch import allocator
from dlbench.launch.container import ImageMismatch
from dlbench.launch.launchers import launcher_for, this_rank
from dlbench.launch.prescreen import run_prescreen_rank
from dlbench.launch.record import set_aside_earlier_attempt, write_launch_record
from dlbench.launch.request import LaunchRequest
from dlbench.launch.worker import LOG_NOT_WRITTEN, run_rank
from dlbench.runners import capabilities, run_layout
from dlbench.runners.base import Distributed, RunSpec
from dlbench.steplog import rank_log_name


def spec_from(request: LaunchRequest, dist: Distributed) -> RunSpec:
    coords = request.coords
    if coords.batch == "max":
        from dlbench.launch.max_batch import read_result

        if not request.max_batch_file:
            sys.exit("dlbench: --batch max needs --max-batch-file")
        batch = read_result(request.max_batch_file)
    else:
        batch = int(coords.batch)
    if coords.data == "real" and not request.data_dir:
        sys.exit("dlbench: --data real needs --data-dir (the framework's converted dataset)")
    return RunSpec(
        coords=coords,
        batch=batch,
        image_size=request.image_size,
        seq_len=request.seq_len,
        threads=max(1, request.threads // max(1, dist.local_world_size)),
        device=request.device,
        local_devices=run_layout(coords).local_devices,
        compile=request.compile,
        seed=coords.repeat,
        dist=dist,
        data_dir=request.data_dir,
        data_workers=max(1, request.data_workers),
        options=capabilities(coords.framework).parse_options(request.options),
    )


def run_as_rank(request: LaunchRequest, dist: Distributed) -> int:
    allocator.preload(request.allocator)
    if request.task == "prescreen":
        return run_prescreen_rank(request, dist)
    spec = spec_from(request, dist)
    if dist.rank >= run_layout(spec.coords).step_logs:
        # A helper task (e.g. a parameter-server node without the coordinator): it serves
        # its node's devices until the coordinator is done and writes no step log.
        from dlbench.runners import framework_module

        return framework_module(spec.coords.framework).serve(spec, time_limit_s=request.time_limit)
    log_path = Path(request.run_dir) / rank_log_name(dist.rank)
    status = run_rank(
        spec,
        request.protocol,
        str(log_path),
        progress_every=request.progress_every,
        time_limit_s=request.time_limit,
        provenance=provenance.collect(
            request.env_lock, site=request.python_env == "site", slurm_request=request.slurm_request()
        ),
        memory_cap_mb=request.memory_cap_mb,
        allocator=request.allocator,
    )
    return 1 if status == LOG_NOT_WRITTEN else 0


def run_as_launcher(request: LaunchRequest) -> int:
    launcher = launcher_for(request)
    run_dir = Path(request.run_dir)
    recorded = launcher.previous_attempt()
    if recorded is not None:
        write_launch_record(request, recorded, time.monotonic(), launcher.verdict())
        return 0
    moved = set_aside_earlier_attempt(run_dir)
    if moved:
        print(
            f"[dlbench] {run_dir}: an earlier attempt ended without launch.json (interrupted); its files "
            f"are kept in {moved.name}/ and the run starts again",
            file=sys.stderr,
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        image = launcher.runtime.verify()
    except ImageMismatch as error:
        # A result, not a crash: the cell says why, and nothing of the run directory is touched.
        print(f"dlbench: ERROR: {error}", file=sys.stderr)
        write_launch_record(request, [], started, refused=f"image refused: {error}")
        return 0
    exit_codes = launcher.launch()
    write_launch_record(request, exit_codes, started, launcher.verdict(), container=image)
    return 0


def main(argv: list[str] | None = None) -> int:
    request = LaunchRequest.from_argv(sys.argv[1:] if argv is None else list(argv))
    dist = this_rank()
    if dist is not None:
        return run_as_rank(request, dist)
    return run_as_launcher(request)
