"""A profiled run (repeat PROFILE_REPEAT, config `profile`): its measured window, cut to
PROFILE_STEPS steps, runs under the framework's own profiler, started and stopped with the
window's meters, its trace written below the run's `profile/` directory. The footer's
`profile` says which profiler traced it, or why none did. Stdlib only."""

from __future__ import annotations

import dataclasses
import os

from dlbench.coords import PROFILE_REPEAT
from dlbench.protocol import RunProtocol

PROFILE_STEPS = 5
PROFILE_DIR = "profile"


def is_profiled(coords) -> bool:
    return coords.repeat == PROFILE_REPEAT


def profiled_protocol(protocol: RunProtocol) -> RunProtocol:
    """A profiled run's protocol: its warm-up as planned, then at most PROFILE_STEPS steps."""
    return dataclasses.replace(protocol, measured_steps=min(protocol.measured_steps, PROFILE_STEPS))


class ProfiledWindow:
    """The window's meter (host_memory.WindowPeak) with the profiler inside it: started after
    the meter starts, stopped (and its trace written) before the meter stops."""

    def __init__(self, meter, runner, log_path: str, rank: int):
        self.meter = meter
        self.directory = f"{PROFILE_DIR}/rank{rank}"
        self.out_dir = os.path.join(os.path.dirname(log_path), self.directory)
        self.profiler = runner.profiler(self.out_dir)
        self.traced = False

    def start(self) -> None:
        self.meter.start()
        if self.profiler is not None:
            self.profiler.start()

    def stop(self) -> None:
        if self.profiler is not None:
            self.profiler.stop()
            self.traced = True
        self.meter.stop()

    def record(self) -> dict:
        return self.meter.record()

    def window_rss_mb(self) -> float | None:
        return self.meter.window_rss_mb()

    def footer(self, steps: int) -> dict:
        if self.profiler is None:
            return {"profiler": None, "reason": "its framework declares no profiler (Capabilities.profiler)"}
        return {"profiler": self.profiler.name, "steps": steps, "directory": self.directory, "traced": self.traced}
