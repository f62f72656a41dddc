"""Per-step times on a CUDA device without draining its queue every step: one CUDA event
recorded on the current stream after each step (the timed loop's `mark()`, dlbench.launch.worker),
read once the window's end has been synchronised. docs/gpu.md says why and what it costs."""

from __future__ import annotations

import itertools

CLOCK = "torch.cuda.Event (per step), time.perf_counter (after each sync)"


class CudaStepEvents:
    def __init__(self, torch, steps: int):
        # Made before the loop: one before the first step, one after each, one after the
        # warm-up's sync (dlbench.launch.worker._window_sync).
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 2)]
        self.count = 0

    def mark(self) -> None:
        self.events[self.count].record()
        self.count += 1

    def seconds(self) -> list[float]:
        """Seconds between consecutive marks (their events have completed: after a sync)."""
        used = self.events[: self.count]
        return [start.elapsed_time(end) / 1000 for start, end in itertools.pairwise(used)]
