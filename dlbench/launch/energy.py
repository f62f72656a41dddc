"""Energy of the measured window: NVML's cumulative energy counter of every GPU a rank drives,
read at the window's ends (docs/gpu.md). Stdlib only; nvidia-ml-py (`pynvml`, in the CUDA
locks) is imported lazily, and where it is absent the same NVML calls go through ctypes, so a
bare GPU machine measures too. Anywhere NVML cannot be read the step log says why.

The counter (nvmlDeviceGetTotalEnergyConsumption, millijoules since the driver loaded; Volta
and later) is refreshed by the driver every few tens of milliseconds: a window shorter than
MIN_REFRESHES refresh periods is flagged `too_short`, its joules are kept but not trusted.
"""

from __future__ import annotations

import ctypes
import os
import time

METHOD = "nvmlDeviceGetTotalEnergyConsumption"
# A window must span this many counter refreshes: the reads at its ends are each up to one
# refresh stale, so the error is at most 2 / MIN_REFRESHES of the window's energy (10 %).
MIN_REFRESHES = 20
# How long to watch the counter for its refresh period (outside the timed loop).
REFRESH_PROBE_S = 1.0


class NvmlUnavailable(RuntimeError):
    """NVML cannot be read here; the message is the reason the step log records."""


class _CtypesNvml:
    """The few NVML calls the meter makes, through ctypes (no pynvml installed)."""

    def __init__(self):
        try:
            self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError as exc:
            raise NvmlUnavailable(f"NVML library not found ({exc})") from None

    def _call(self, name: str, *args) -> None:
        code = getattr(self.lib, name)(*args)
        if code != 0:
            self.lib.nvmlErrorString.restype = ctypes.c_char_p
            raise NvmlUnavailable(f"{name}: {self.lib.nvmlErrorString(code).decode()}")

    def nvmlInit(self) -> None:
        self._call("nvmlInit_v2")

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")

    def handle(self, device: str):
        handle = ctypes.c_void_p()
        if device.isdigit():
            self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(int(device)), ctypes.byref(handle))
        else:
            self._call("nvmlDeviceGetHandleByUUID", device.encode(), ctypes.byref(handle))
        return handle

    def nvmlDeviceGetName(self, handle) -> str:
        name = ctypes.create_string_buffer(96)
        self._call("nvmlDeviceGetName", handle, name, ctypes.c_uint(96))
        return name.value.decode()

    def nvmlDeviceGetTotalEnergyConsumption(self, handle) -> int:
        millijoules = ctypes.c_ulonglong()
        self._call("nvmlDeviceGetTotalEnergyConsumption", handle, ctypes.byref(millijoules))
        return millijoules.value


class _PynvmlNvml:
    """nvidia-ml-py, with its errors turned into NvmlUnavailable."""

    def __init__(self, pynvml):
        self.pynvml = pynvml

    def __getattr__(self, name):
        function = getattr(self.pynvml, name)

        def call(*args):
            try:
                return function(*args)
            except self.pynvml.NVMLError as exc:
                raise NvmlUnavailable(f"{name}: {exc}") from None

        return call

    def handle(self, device: str):
        if device.isdigit():
            return self.nvmlDeviceGetHandleByIndex(int(device))
        return self.nvmlDeviceGetHandleByUUID(device)


def load_nvml():
    """NVML, initialised: nvidia-ml-py where installed, else ctypes. NvmlUnavailable says why not."""
    try:
        import pynvml
    except ImportError:
        nvml = _CtypesNvml()
    else:
        nvml = _PynvmlNvml(pynvml)
    nvml.nvmlInit()
    return nvml


def visible_devices(local_indices: list[int], environ=os.environ) -> list[str]:
    """NVML's names for the rank's CUDA devices: CUDA_VISIBLE_DEVICES renumbers them for the
    framework, NVML does not (an index or a GPU-UUID, as NVML's handle lookup takes)."""
    visible = [d.strip() for d in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return [visible[i] if i < len(visible) else str(i) for i in local_indices]


class NotMeasured:
    """The meter where NVML cannot be read: the step log says why."""

    def __init__(self, reason: str):
        self.reason = reason

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def record(self) -> dict:
        return {"measured": False, "reason": self.reason}


class EnergyMeter:
    """The rank's GPUs' counters, read by start() and stop() at the measured window's ends."""

    def __init__(self, nvml, devices: list[str], clock=time.perf_counter):
        self.nvml, self.devices, self.clock = nvml, devices, clock
        self.handles = [nvml.handle(d) for d in devices]
        self.names = [nvml.nvmlDeviceGetName(h) for h in self.handles]
        self.refresh_s = self.refresh_period()
        self.readings: list[tuple[float, list[int]]] = []

    def read(self) -> tuple[float, list[int]]:
        return self.clock(), [self.nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in self.handles]

    def refresh_period(self) -> float | None:
        """Seconds between two changes of the first device's counter (None: no change seen)."""
        handle, changes = self.handles[0], []
        last, deadline = self.nvml.nvmlDeviceGetTotalEnergyConsumption(handle), self.clock() + REFRESH_PROBE_S
        while len(changes) < 3 and self.clock() < deadline:
            value = self.nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            if value != last:
                changes.append(self.clock())
                last = value
            time.sleep(0.0005)
        return (changes[-1] - changes[0]) / (len(changes) - 1) if len(changes) > 1 else None

    def start(self) -> None:
        self.readings = [self.read()]

    def stop(self) -> None:
        self.readings.append(self.read())

    def record(self) -> dict:
        if len(self.readings) != 2:
            return {"measured": False, "reason": "the measured window did not complete"}
        return window_energy(self.readings, self.names, self.refresh_s)


def window_energy(readings, names: list[str], refresh_s: float | None) -> dict:
    """The step log's energy record from the counters (mJ) at the window's two ends."""
    (t0, start), (t1, end) = readings
    joules = [(b - a) / 1000 for a, b in zip(start, end, strict=True)]
    window = t1 - t0
    return {
        "measured": True,
        "method": METHOD,
        "refresh_s": refresh_s,
        "window_s": window,
        "joules": sum(joules),
        "devices": [{"name": n, "joules": j} for n, j in zip(names, joules, strict=True)],
        "too_short": refresh_s is None or window < MIN_REFRESHES * refresh_s,
    }


def open_meter(device: str, local_indices: list[int]) -> EnergyMeter | NotMeasured:
    """The meter of a rank that drives CUDA devices `local_indices`; NotMeasured elsewhere."""
    try:
        nvml = load_nvml()
    except NvmlUnavailable as exc:
        reason = str(exc)
        return NotMeasured(reason if device == "cuda" else f"the run is on the CPU; NVML: {reason}")
    if device != "cuda":
        return NotMeasured("the run is on the CPU: NVML measures NVIDIA GPUs only")
    try:
        return EnergyMeter(nvml, visible_devices(local_indices))
    except NvmlUnavailable as exc:
        return NotMeasured(str(exc))
