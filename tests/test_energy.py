"""Energy (dlbench.launch.energy) and the window-sync timing loop (dlbench.launch.worker) on this GPU-less
machine: NVML is tried for real and its absence is the recorded reason; the arithmetic is
checked on counter values; the window loop is driven by host-clock marks standing in for
CUDA events (which need a GPU), with the same marks-and-anchors bookkeeping."""

import time
import types

import pytest

from dlbench.launch import energy, worker
from dlbench.protocol import RunProtocol
from dlbench.runners.base import Runner, RunSpec
from dlbench.steplog import read_steplog
from tests.conftest import make_coords

PROTOCOL = RunProtocol("caict2020", warmup_steps=2, measured_steps=4, statistic="mean")
STEP_S = 0.004


def test_nvml_absent_here_is_the_reason_recorded():
    with pytest.raises(energy.NvmlUnavailable, match="NVML library not found .*libnvidia-ml.so.1"):
        energy.load_nvml()
    meter = energy.open_meter("cuda", [0])
    assert meter.record()["measured"] is False
    assert meter.record()["reason"].startswith("NVML library not found")
    on_cpu = energy.open_meter("cpu", [0]).record()["reason"]
    assert on_cpu.startswith("the run is on the CPU; NVML: NVML library not found")


def test_window_energy_sums_devices_and_flags_a_short_window():
    readings = [(10.0, [1_000_000, 5_000]), (12.5, [1_250_000, 255_000])]  # mJ
    record = energy.window_energy(readings, ["H100", "H100"], refresh_s=0.2)
    assert record["joules"] == pytest.approx(500.0) and record["window_s"] == pytest.approx(2.5)
    assert [d["joules"] for d in record["devices"]] == pytest.approx([250.0, 250.0])
    assert record["too_short"]  # 2.5 s < 20 refreshes of 0.2 s
    assert not energy.window_energy([(0.0, [0]), (2.0, [1])], ["A100"], refresh_s=0.05)["too_short"]
    assert energy.window_energy([(0.0, [0]), (9.0, [1])], ["A100"], refresh_s=None)["too_short"]


def test_cuda_visible_devices_are_mapped_to_nvml_names():
    environ = {"CUDA_VISIBLE_DEVICES": "3,GPU-8f1e"}
    assert energy.visible_devices([0, 1], environ) == ["3", "GPU-8f1e"]
    assert energy.visible_devices([1], {}) == ["1"]


class HostMarks:
    """Stands in for CUDA events: a mark is the host clock when the step was enqueued, which
    with synchronous CPU steps is when the device finished it."""

    def __init__(self):
        self.times = []

    def mark(self):
        self.times.append(time.perf_counter())

    def seconds(self):
        return [b - a for a, b in zip(self.times, self.times[1:], strict=False)]


class SleepingRunner(Runner):
    window = True
    syncs = 0

    def build(self):
        self.marks = HostMarks()

    def step(self, batch=None):
        time.sleep(STEP_S)
        return 1.0

    def sync(self):
        SleepingRunner.syncs += 1

    def step_events(self, steps):
        return self.marks if self.window else None

    def timing(self):
        return {"clock": "host marks", "sync": "window"} if self.window else super().timing()


class RecordingMeter:
    def __init__(self):
        self.calls = []

    def start(self):
        self.calls.append(("start", SleepingRunner.syncs))

    def stop(self):
        self.calls.append(("stop", SleepingRunner.syncs))

    def record(self):
        return {"measured": False, "reason": "test"}


@pytest.mark.parametrize("window", [True, False])
def test_window_sync_drains_only_at_the_window_ends_and_times_every_step(window):
    SleepingRunner.window, SleepingRunner.syncs = window, 0
    spec = RunSpec(coords=make_coords(), batch=4, image_size=32, seq_len=0, threads=1, device="cpu")
    runner = SleepingRunner(spec)
    runner.build()
    meter = RecordingMeter()
    steps = worker.time_steps(runner, 2, 4, 0, 0, meter)
    assert SleepingRunner.syncs == (3 if window else 7)
    # The meter reads right after the warm-up's sync and after the final sync.
    assert meter.calls == ([("start", 2), ("stop", 3)] if window else [("start", 3), ("stop", 7)])
    assert [s["phase"] for s in steps] == ["warmup"] * 2 + ["measure"] * 4
    for s in steps:
        assert STEP_S * 0.9 <= s["t_end"] - s["t_start"] < STEP_S * 20
    for a, b in zip(steps, steps[1:], strict=False):
        if b["phase"] == a["phase"]:
            assert b["t_start"] == pytest.approx(a["t_end"])
    # The measured window starts after the warm-up's sync and energy read, not before.
    assert steps[2]["t_start"] >= steps[1]["t_end"]


def test_a_rank_log_records_the_clock_and_why_energy_was_not_measured(monkeypatch, tmp_path):
    SleepingRunner.window = True
    monkeypatch.setattr(worker, "framework_module", lambda name: types.SimpleNamespace(Runner=SleepingRunner))
    spec = RunSpec(coords=make_coords(), batch=4, image_size=32, seq_len=0, threads=1, device="cpu")
    assert worker.run_rank(spec, PROTOCOL, str(tmp_path / "rank0.steps.jsonl"), progress_every=0) == "ok"
    log = read_steplog(tmp_path / "rank0.steps.jsonl")
    assert log.valid and log.header["schema"] == "dlbench.steplog/2"
    assert (log.header["clock"], log.header["sync"]) == ("host marks", "window")
    assert log.footer["energy"]["measured"] is False
    assert "NVML library not found" in log.footer["energy"]["reason"]


def test_window_sync_without_warmup_times_from_the_first_sync():
    SleepingRunner.window, SleepingRunner.syncs = True, 0
    spec = RunSpec(coords=make_coords(), batch=4, image_size=32, seq_len=0, threads=1, device="cpu")
    runner = SleepingRunner(spec)
    runner.build()
    meter = RecordingMeter()
    steps = worker.time_steps(runner, 0, 3, 0, 0, meter)
    assert SleepingRunner.syncs == 2 and meter.calls == [("start", 1), ("stop", 2)]
    assert [s["phase"] for s in steps] == ["measure"] * 3
    assert all(b["t_start"] == a["t_end"] for a, b in zip(steps, steps[1:], strict=False))
    assert sum(s["t_end"] - s["t_start"] for s in steps) >= 3 * STEP_S * 0.9


class QueuedOutput:
    """A step's output on an asynchronous device: ready at `done`, as JAX's arrays are."""

    def __init__(self, done: float):
        self.done = done

    def block_until_ready(self):
        time.sleep(max(0.0, self.done - time.perf_counter()))
        return self


class QueuedRunner(Runner):
    """JAX's dispatch, modelled: step() costs the host DISPATCH_S, then queues DEVICE_S of
    work behind what is queued; its output is ready when that work ends. The JAX runner's
    window clock (runners/jax/clock.py) over it."""

    DISPATCH_S, DEVICE_S = 0.005, 0.05

    def build(self):
        self._last, self.queued, self.window = None, [], True
        self.device_free = time.perf_counter()

    def step(self, batch=None):
        time.sleep(self.DISPATCH_S)
        begins = max(time.perf_counter(), self.device_free)
        self.device_free = begins + self.DEVICE_S
        self.queued.append((begins, self.device_free))
        self._last = QueuedOutput(self.device_free)
        return 1.0

    def sync(self):
        if self._last is not None:
            self._last.block_until_ready()
        if getattr(self, "clock", None) is not None:
            self.clock.resolve()

    def step_events(self, steps):
        from dlbench.runners.jax.clock import ReadyClock

        self.clock = ReadyClock(lambda: self._last) if self.window else None
        return self.clock


@pytest.mark.parametrize("window", [True, False])
def test_jax_window_clock_keeps_the_queue_full_and_times_each_step_on_the_device(window):
    spec = RunSpec(coords=make_coords(), batch=4, image_size=32, seq_len=0, threads=1, device="cpu")
    runner = QueuedRunner(spec)
    runner.build()
    runner.window = window
    steps = worker.time_steps(runner, 2, 5, 0, 0, None)
    measured_queue = runner.queued[2:]
    # Idle device time between measured steps: none with the window clock (the next step is
    # queued while one runs), the host's dispatch after every step with per-step sync.
    idle = [b[0] - a[1] for a, b in zip(measured_queue, measured_queue[1:], strict=False)]
    if window:
        assert max(idle) < 1e-3, idle
    else:
        assert min(idle) >= QueuedRunner.DISPATCH_S * 0.9, idle
    for s, (_begins, ends) in zip(steps[2:], measured_queue, strict=True):
        # A step's end is read when its output is ready, never before.
        assert s["t_end"] >= ends - 1e-6
    # On the device's time, not the host's dispatch: one late read on a loaded host shortens the
    # next step by as much, so the median is checked, not each step.
    seconds = sorted(s["t_end"] - s["t_start"] for s in steps[2:])
    assert QueuedRunner.DEVICE_S * 0.9 <= seconds[len(seconds) // 2] < QueuedRunner.DEVICE_S * 2, seconds
    window_s = steps[-1]["t_end"] - steps[2]["t_start"]
    assert window_s == pytest.approx(measured_queue[-1][1] - steps[2]["t_start"], abs=0.02)
