"""One rank of one run: build the framework runner, time the steps, write the step log.

This is the single timing loop for every framework. Stdlib only.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import platform
import resource
import signal
import socket
import sys
import time
import traceback

from dlbench import __version__
from dlbench.runners import framework_module
from dlbench.runners.base import RunSpec
from dlbench.steplog import Header, StepLogWriteError, StepLogWriter

# run_rank's answer when the step log could not be written: the rank's exit code is 1.
LOG_NOT_WRITTEN = "log not written"

clock = time.perf_counter  # monotonic, highest resolution available


class Cancelled(Exception):
    """SIGTERM arrived (scancel, or Slurm's time limit)."""


class TimeLimitExceeded(Exception):
    pass


def _utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def _raise_cancelled(signum, frame):
    raise Cancelled(f"received signal {signal.Signals(signum).name}")


def _raise_time_limit(signum, frame):
    raise TimeLimitExceeded("run exceeded its time limit")


def classify(runner, exc: BaseException) -> str:
    if isinstance(exc, TimeLimitExceeded):
        return "timeout"
    if isinstance(exc, (Cancelled, KeyboardInterrupt)):
        return "cancelled"
    if isinstance(exc, MemoryError) or (runner is not None and runner.is_oom(exc)):
        return "oom"
    return "failed"


def time_steps(runner, warmup_steps: int, measured_steps: int, progress_every: int, rank: int) -> list[dict]:
    """The timed loop. Each step's end is read after `sync()`; the next step starts there.

    A step is `next_batch()` (the wait for input data, recorded as `data_wait`) then
    `step()`. Nothing but these, the sync and the clock runs between timestamps, apart
    from a progress line every `progress_every` steps.
    """
    total = warmup_steps + measured_steps
    samples = runner.spec.batch * runner.spec.local_devices
    times = [0.0] * (total + 1)
    data_ready = [0.0] * total
    losses = [None] * total
    next_batch, step, sync = runner.next_batch, runner.step, runner.sync
    sync()
    times[0] = clock()
    for i in range(total):
        batch = next_batch()
        data_ready[i] = clock()
        losses[i] = step(batch)
        sync()
        times[i + 1] = clock()
        if progress_every and (i + 1) % progress_every == 0 and rank == 0:
            phase = "warm-up" if i < warmup_steps else "measure"
            print(
                f"[dlbench] step {i + 1}/{total} ({phase}) {times[i + 1] - times[i]:.3f} s/step",
                file=sys.stderr,
                flush=True,
            )
    return [
        {
            "i": i,
            "phase": "warmup" if i < warmup_steps else "measure",
            "t_start": times[i],
            "t_end": times[i + 1],
            "samples": samples,
            "data_wait": data_ready[i] - times[i],
            "loss": _finite_or_none(runner.loss_value(losses[i])),
        }
        for i in range(total)
    ]


def _finite_or_none(x: float):
    x = float(x)
    return x if x == x and abs(x) != float("inf") else None


def _mapped_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def apply_memory_cap(cap_mb: int) -> None:
    """Give the run `cap_mb` of address space beyond what the imported framework maps, so
    that running out of memory is a testable, classified failure on a CPU (the stand-in
    for a GPU's fixed memory). Libraries map far more than they use, hence the offset."""
    if cap_mb:
        limit = _mapped_bytes() + cap_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def run_rank(
    spec: RunSpec,
    protocol: dict,
    log_path: str,
    progress_every: int = 10,
    time_limit_s: int = 0,
    provenance: dict | None = None,
    memory_cap_mb: int = 0,
) -> str:
    """Run one rank and write its step log. Returns the footer status, or LOG_NOT_WRITTEN
    when the log could not be written (disk full...); never raises."""
    signal.signal(signal.SIGTERM, _raise_cancelled)
    if time_limit_s:
        signal.signal(signal.SIGALRM, _raise_time_limit)
        signal.alarm(time_limit_s)
    module = framework_module(spec.coords.framework)
    runner = None
    writer = None
    steps: list[dict] = []
    status, error = "ok", None
    start_time = _utc_now()
    try:
        runner = module.Runner(spec)
        runner.import_framework()
        apply_memory_cap(memory_cap_mb)
        runner.build()
        writer = StepLogWriter(log_path, _header(spec, protocol, runner, start_time, provenance))
        steps = time_steps(runner, protocol["warmup_steps"], protocol["measured_steps"], progress_every, spec.dist.rank)
    except BaseException as exc:  # every failure becomes a footer, never a lost log
        status = classify(runner, exc)
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()[-2000:]
        print(f"[dlbench] rank {spec.dist.rank}: {status}: {error}", file=sys.stderr, flush=True)
        if status == "failed":
            traceback.print_exc()
    finally:
        signal.alarm(0)
        try:
            if writer is None:
                writer = StepLogWriter(log_path, _header(spec, protocol, runner, start_time, provenance))
            writer.write_steps(steps)
            writer.close(
                status,
                error,
                end_time=_utc_now(),
                steps_completed=len(steps),
                max_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                memory_cap_mb=memory_cap_mb or None,
            )
        except StepLogWriteError as exc:
            # What was written stays (no footer: never read as valid); the rank exits non-zero.
            print(f"[dlbench] rank {spec.dist.rank}: {exc}", file=sys.stderr, flush=True)
            status = LOG_NOT_WRITTEN
        if runner is not None:
            # Teardown of a broken process group must not hide the status.
            with contextlib.suppress(Exception):
                runner.close()
    return status


def _header(spec: RunSpec, protocol: dict, runner, start_time: str, provenance: dict | None) -> Header:
    try:
        described = runner.describe() if runner is not None else {}
    except Exception as exc:  # describe() after a failed build may itself fail
        described = {"describe_error": str(exc)}
    return Header(
        run=spec.coords.as_dict(),
        protocol=protocol,
        batch=spec.batch,
        image_size=spec.image_size,
        seq_len=spec.seq_len,
        threads=spec.threads,
        device=spec.device,
        local_devices=spec.local_devices,
        compile=spec.compile,
        rank=spec.dist.rank,
        world_size=spec.dist.world_size,
        local_rank=spec.dist.local_rank,
        node=spec.dist.node,
        host=socket.gethostname(),
        pid=os.getpid(),
        start_time=start_time,
        clock="time.perf_counter",
        python=platform.python_version(),
        dlbench_version=__version__,
        framework={"name": spec.coords.framework, **described},
        provenance=provenance or {},
    )
