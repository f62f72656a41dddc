"""A rank's peak resident memory over the measured window, the CPU counterpart of a GPU
allocator's peak: Linux keeps the process's high-water mark (VmHWM in /proc/self/status), and
writing 5 to /proc/self/clear_refs resets it to the current resident size. Reset when the
window starts and read when it ends, it leaves out start-up (imports, a model built whole
before FSDP shards it). Stdlib only (every framework environment)."""

from __future__ import annotations

from dlbench.runners.base import status_kb

CLEAR_REFS = "/proc/self/clear_refs"


class WindowPeak:
    """The energy meter (dlbench.launch.energy) with the window's memory peak read at the same
    two moments: after the warm-up's sync and after the final one."""

    def __init__(self, meter):
        self.meter, self.reset, self.peak_kb = meter, False, None

    def start(self) -> None:
        self.meter.start()
        try:
            with open(CLEAR_REFS, "w") as refs:
                refs.write("5")
            self.reset = True
        except OSError:  # not Linux, or not allowed: no window peak, the footer's max_rss_mb stays
            self.reset = False

    def stop(self) -> None:
        self.peak_kb = status_kb("VmHWM") if self.reset else None
        self.meter.stop()

    def record(self) -> dict:
        return self.meter.record()

    def window_rss_mb(self) -> float | None:
        return None if self.peak_kb is None else round(self.peak_kb / 1024, 1)
