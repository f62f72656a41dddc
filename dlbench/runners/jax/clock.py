"""Per-step times on a JAX device without draining its queue every step. JAX exposes no
device events, so a step's end is the moment its loss is ready, read on the host one step
late: after step i is enqueued, the timed loop's `mark()` waits for step i-1's loss, while
step i keeps the device busy. The device is drained only at the window's ends, where the
runner's `sync()` resolves the last step (dlbench.launch.worker._window_sync; docs/gpu.md).
Stdlib only: the handles are whatever the runner's step returned."""

from __future__ import annotations

import itertools
import time

CLOCK = "time.perf_counter when each step's loss is ready, read while the next step is queued"


class ReadyClock:
    """The worker's step-events contract (mark, seconds) over JAX's asynchronous dispatch.

    Each mark stands for "all work enqueued so far is done". A mark right after a sync is
    timed at once; a mark after a step is timed when that step's output is ready: at the
    next mark (one step later) or at the runner's next sync, whichever comes first."""

    def __init__(self, latest_output, clock=time.perf_counter):
        self.latest_output = latest_output  # () -> the newest step's output handle, or None
        self.clock = clock
        self.times: list[float] = []
        self.pending = None  # a marked step's output whose readiness is not read yet
        # The newest output already accounted for: one from before this window is not a step of it.
        self.marked = latest_output()

    def mark(self) -> None:
        self.resolve()
        handle = self.latest_output()
        if handle is None or handle is self.marked:  # after a sync: nothing is queued
            self.times.append(self.clock())
        else:
            self.pending = self.marked = handle

    def resolve(self) -> None:
        """Wait for the pending mark's output and time the mark (the runner's sync calls it)."""
        if self.pending is not None:
            self.pending.block_until_ready()
            self.times.append(self.clock())
            self.pending = None

    def seconds(self) -> list[float]:
        """Seconds between consecutive marks (after the window's final sync)."""
        self.resolve()
        return [end - start for start, end in itertools.pairwise(self.times)]
