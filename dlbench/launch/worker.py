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
from dlbench.launch import allocator as allocators
from dlbench.launch import energy, host_memory, profiling
from dlbench.models import samples_per_example
from dlbench.protocol import RunProtocol
from dlbench.runners import capabilities, framework_module
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


def time_steps(
    runner, warmup_steps: int, measured_steps: int, progress_every: int, rank: int, meter=None
) -> list[dict]:
    """The timed loop. A step is `next_batch()` (the wait for input data, recorded as
    `data_wait`) then `step()`. Nothing but these, the sync and the clock runs between
    timestamps, apart from a progress line every `progress_every` steps.

    Per-step sync (the default): each step's end is read after `sync()`; the next step starts
    there. Window sync (a runner whose `step_events()` gives device events, e.g. CUDA events):
    the device is drained only at the window's ends and each step's time is read from the
    events, so the host keeps the device's queue full (docs/gpu.md). `meter` (dlbench.launch.energy)
    is read at the measured window's ends, after their sync and outside any step's time.
    """
    total = warmup_steps + measured_steps
    events = runner.step_events(total)
    loop = _per_step_sync if events is None else _window_sync
    t_start, t_end, data_wait, losses = loop(runner, warmup_steps, total, progress_every * (rank == 0), meter, events)
    spec = runner.spec
    # A step trains grad_accum micro-batches: every one's samples count.
    micro_batches = spec.batch * spec.coords.grad_accum * spec.local_devices
    samples = micro_batches * samples_per_example(spec.coords.model, spec.seq_len)
    details = runner.step_details() or [{}] * total
    return [
        {
            "i": i,
            "phase": "warmup" if i < warmup_steps else "measure",
            "t_start": t_start[i],
            "t_end": t_end[i],
            "samples": samples,
            "data_wait": data_wait[i],
            "loss": _finite_or_none(runner.loss_value(losses[i])),
            **details[i],
        }
        for i in range(total)
    ]


def _progress(i: int, total: int, warmup_steps: int, seconds: float) -> None:
    phase = "warm-up" if i < warmup_steps else "measure"
    print(f"[dlbench] step {i + 1}/{total} ({phase}) {seconds:.3f} s/step", file=sys.stderr, flush=True)


def _per_step_sync(runner, warmup_steps, total, progress_every, meter, events):
    times = [0.0] * (total + 1)
    data_ready = [0.0] * total
    losses = [None] * total
    next_batch, step, sync = runner.next_batch, runner.step, runner.sync
    sync()
    if meter is not None and warmup_steps == 0:
        meter.start()
    times[0] = clock()
    for i in range(total):
        batch = next_batch()
        data_ready[i] = clock()
        losses[i] = step(batch)
        sync()
        if meter is not None and i + 1 == warmup_steps:
            meter.start()  # before the clock: the read ends the last warm-up step, not the first measured
        times[i + 1] = clock()
        if progress_every and (i + 1) % progress_every == 0:
            _progress(i, total, warmup_steps, times[i + 1] - times[i])
    if meter is not None:
        meter.stop()
    return times[:-1], times[1:], [data_ready[i] - times[i] for i in range(total)], losses


def _window_sync(runner, warmup_steps, total, progress_every, meter, events):
    """Marks: one before step 0, one after each step, and one more after the sync at the end
    of the warm-up (the measured steps are timed from it, so the sync and the energy read at
    the window's start belong to no step). Host clock: the anchors after each sync."""
    enqueued = [0.0] * (total + 1)
    data_ready = [0.0] * total
    losses = [None] * total
    next_batch, step, sync, mark = runner.next_batch, runner.step, runner.sync, events.mark
    sync()
    if meter is not None and warmup_steps == 0:
        meter.start()
    anchors = [clock()]
    enqueued[0] = anchors[0]
    mark()
    for i in range(total):
        batch = next_batch()
        data_ready[i] = clock()
        losses[i] = step(batch)
        mark()
        if i + 1 == warmup_steps and warmup_steps < total:
            sync()
            if meter is not None:
                meter.start()
            anchors.append(clock())
            mark()
        enqueued[i + 1] = clock()
        if progress_every and (i + 1) % progress_every == 0:
            _progress(i, total, warmup_steps, enqueued[i + 1] - enqueued[i])
    sync()
    if meter is not None:
        meter.stop()
    seconds = events.seconds()  # between consecutive marks, after the sync
    if len(anchors) > 1:
        del seconds[warmup_steps]  # the warm-up's sync and the energy read: no step's time
    t_start, t_end, now = [], [], anchors[0]
    for i in range(total):
        if i == warmup_steps and len(anchors) > 1:
            now = anchors[1]
        t_start.append(now)
        now += seconds[i]
        t_end.append(now)
    return t_start, t_end, [data_ready[i] - enqueued[i] for i in range(total)], losses


def _finite_or_none(x: float):
    x = float(x)
    return x if x == x and abs(x) != float("inf") else None


def _mapped_bytes() -> int:
    return (host_memory.status_kb("VmSize") or 0) * 1024


def apply_memory_cap(cap_mb: int) -> None:
    """Give the run `cap_mb` of address space beyond what the imported framework maps, so
    that running out of memory is a testable, classified failure on a CPU (the stand-in
    for a GPU's fixed memory). Libraries map far more than they use, hence the offset."""
    if cap_mb:
        limit = _mapped_bytes() + cap_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def check_model_kind(spec: RunSpec) -> None:
    """A strategy for some model kinds only (Strategy.model_kinds) refuses the others: planning
    makes such a cell N/A, and a launch by hand fails with the same reason in its log."""
    strategy = capabilities(spec.coords.framework).strategy(spec.coords.strategy)
    wrong_kind = strategy and strategy.model_unavailable(spec.coords.model)
    if wrong_kind:
        raise ValueError(f"{spec.coords.framework}: {wrong_kind}")


def run_rank(
    spec: RunSpec,
    protocol: RunProtocol,
    log_path: str,
    progress_every: int = 10,
    time_limit_s: int = 0,
    provenance: dict | None = None,
    memory_cap_mb: int = 0,
    allocator: str = "system",
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
    meter = host_memory.WindowPeak(energy.NotMeasured("the run ended before its measured window"))
    profiled = profiling.is_profiled(spec.coords)
    protocol = profiling.profiled_protocol(protocol) if profiled else protocol
    status, error = "ok", None
    start_time = _utc_now()
    try:
        check_model_kind(spec)
        allocators.check(allocator)
        runner = module.Runner(spec)
        marks = [clock()]
        runner.import_framework()
        apply_memory_cap(memory_cap_mb)
        marks.append(clock())
        runner.build()
        marks.append(clock())
        # Where the time before the first step goes (outside every step's time).
        setup = {"import_framework": round(marks[1] - marks[0], 3), "build": round(marks[2] - marks[1], 3)}
        writer = StepLogWriter(log_path, _header(spec, protocol, runner, start_time, provenance, setup))
        meter = _window_meter(spec, runner, log_path, profiled)
        warmup, measured = protocol.warmup_steps, protocol.measured_steps
        steps = time_steps(runner, warmup, measured, progress_every, spec.dist.rank, meter)
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
            writer.close(status, error, **_footer(steps, meter, runner, protocol, memory_cap_mb))
        except StepLogWriteError as exc:
            # What was written stays (no footer: never read as valid); the rank exits non-zero.
            print(f"[dlbench] rank {spec.dist.rank}: {exc}", file=sys.stderr, flush=True)
            status = LOG_NOT_WRITTEN
        if runner is not None:
            # Teardown of a broken process group must not hide the status.
            with contextlib.suppress(Exception):
                runner.close()
    return status


def _window_meter(spec: RunSpec, runner, log_path: str, profiled: bool):
    """What the measured window's ends read: energy and the host's peak, and a profiled run's profiler."""
    meter = host_memory.WindowPeak(energy.open_meter(spec.device, _local_device_indices(spec)))
    return profiling.ProfiledWindow(meter, runner, log_path, spec.dist.rank) if profiled else meter


def _footer(steps: list[dict], meter, runner, protocol: RunProtocol, memory_cap_mb: int) -> dict:
    """The footer's fields beside its status and error."""
    return dict(
        end_time=_utc_now(),
        steps_completed=len(steps),
        max_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        window_rss_mb=meter.window_rss_mb(),
        memory_cap_mb=memory_cap_mb or None,
        energy=meter.record(),
        **_device_memory(runner),
        **_profile_record(meter, protocol),
    )


def _profile_record(meter, protocol: RunProtocol) -> dict:
    """A profiled run's footer `profile` (dlbench.launch.profiling); nothing for any other run."""
    return {"profile": meter.footer(protocol.measured_steps)} if isinstance(meter, profiling.ProfiledWindow) else {}


def _device_memory(runner) -> dict:
    """The footer's device_memory where the runner reads one; a failure to read is no failure of the run."""
    try:
        memory = runner.device_memory() if runner is not None else None
    except Exception as exc:
        print(f"[dlbench] device memory not read: {exc}", file=sys.stderr, flush=True)
        memory = None
    return {"device_memory": memory} if memory else {}


def _local_device_indices(spec: RunSpec) -> list[int]:
    """The devices this rank drives: its local rank's, or all of its node's (one process per node)."""
    return list(range(spec.local_devices)) if spec.local_devices > 1 else [spec.dist.local_rank]


def _header(
    spec: RunSpec, protocol: RunProtocol, runner, start_time: str, provenance: dict | None, setup: dict | None = None
) -> Header:
    try:
        # The runner's facts, its training hyperparameters (framework.optimizer) among them,
        # read back from the framework's objects: a failed build may have none to read.
        described = runner.describe() if runner is not None else {}
    except Exception as exc:
        described = {"describe_error": str(exc)}
    return Header(
        run=spec.coords.as_dict(),
        protocol=protocol.as_dict(),
        batch=spec.batch,
        image_size=spec.image_size,
        seq_len=spec.seq_len,
        threads=spec.threads,
        device=spec.device,
        local_devices=spec.local_devices,
        compile=spec.compile,
        allocator=allocators.mapped(),
        rank=spec.dist.rank,
        world_size=spec.dist.world_size,
        local_rank=spec.dist.local_rank,
        node=spec.dist.node,
        host=socket.gethostname(),
        pid=os.getpid(),
        start_time=start_time,
        **(runner.timing() if runner is not None else {"clock": "time.perf_counter", "sync": "step"}),
        python=platform.python_version(),
        dlbench_version=__version__,
        framework={
            "name": spec.coords.framework,
            "options": spec.options,
            **described,
            **({"setup_seconds": setup} if setup else {}),
        },
        provenance=provenance or {},
    )
