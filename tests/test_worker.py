"""The single timing loop and error classification, driven by a stand-in framework module."""

import types

import pytest

from dlbench.launch import worker
from dlbench.protocol import RunProtocol
from dlbench.runners.base import Runner, RunSpec
from dlbench.schemas import load_schema
from dlbench.steplog import read_steplog
from tests.conftest import make_coords


class CountingRunner(Runner):
    """Counts calls so the test can check the loop's order of operations."""

    calls: list = []
    fail_at = None
    error = RuntimeError

    def build(self):
        self.n = 0

    def step(self, batch=None):
        self.n += 1
        if self.n == self.fail_at:
            raise self.error("CUDA out of memory. Tried to allocate 2.00 GiB")
        CountingRunner.calls.append("step")
        return float(self.n)

    def sync(self):
        CountingRunner.calls.append("sync")

    def is_oom(self, exc):
        return "out of memory" in str(exc)

    def describe(self):
        return {"version": "0.0-test", "optimizer": {"name": "sgd", "learning_rate": 0.5}}


@pytest.fixture
def fake_framework(monkeypatch):
    module = types.SimpleNamespace(Runner=CountingRunner)
    monkeypatch.setattr(worker, "framework_module", lambda name: module)
    CountingRunner.calls = []
    CountingRunner.fail_at = None
    return CountingRunner


def _spec():
    return RunSpec(coords=make_coords(), batch=4, image_size=32, seq_len=0, threads=1, device="cpu")


PROTOCOL = RunProtocol("caict2020", warmup_steps=2, measured_steps=3, statistic="mean")


def test_loop_syncs_after_every_step_and_writes_phases(fake_framework, tmp_path):
    status = worker.run_rank(_spec(), PROTOCOL, str(tmp_path / "rank0.steps.jsonl"), progress_every=0)
    assert status == "ok"
    assert fake_framework.calls == ["sync"] + ["step", "sync"] * 5
    log = read_steplog(tmp_path / "rank0.steps.jsonl")
    assert log.valid, log.problems
    assert [s["phase"] for s in log.steps] == ["warmup", "warmup", "measure", "measure", "measure"]
    assert [s["loss"] for s in log.steps] == [1.0, 2.0, 3.0, 4.0, 5.0]
    # each step starts where the previous one ended: no unmeasured gaps
    assert all(a["t_end"] == b["t_start"] for a, b in zip(log.steps, log.steps[1:], strict=False))
    assert log.header["framework"]["version"] == "0.0-test"


def test_oom_is_classified_and_logged(fake_framework, tmp_path):
    fake_framework.fail_at = 3
    status = worker.run_rank(_spec(), PROTOCOL, str(tmp_path / "rank0.steps.jsonl"))
    log = read_steplog(tmp_path / "rank0.steps.jsonl")
    assert status == "oom" and log.status == "oom"
    assert "out of memory" in log.footer["error"]
    assert log.valid  # a failed run is a well-formed log, excluded by its status


def test_other_errors_are_failed(fake_framework, tmp_path):
    fake_framework.fail_at = 1
    fake_framework.error = ValueError
    fake_framework.is_oom = lambda self, exc: False
    status = worker.run_rank(_spec(), PROTOCOL, str(tmp_path / "rank0.steps.jsonl"))
    assert status == "failed"
    fake_framework.is_oom = CountingRunner.is_oom


def test_time_limit_becomes_timeout(fake_framework, tmp_path, monkeypatch):
    def slow_step(self, batch=None):
        import time

        time.sleep(5)

    monkeypatch.setattr(CountingRunner, "step", slow_step)
    status = worker.run_rank(_spec(), PROTOCOL, str(tmp_path / "rank0.steps.jsonl"), time_limit_s=1)
    assert status == "timeout"


def test_batch_search_doubles_then_bisects():
    from dlbench.planning.batch_search import SearchError, search

    calls = []

    def probe(batch):
        calls.append(batch)
        return "ok" if batch <= 37 else "oom"

    best, history = search(probe, limit=4096)
    assert best == 37
    assert calls[:7] == [1, 2, 4, 8, 16, 32, 64]
    assert {h["batch"]: h["status"] for h in history}[38] == "oom"
    assert search(lambda b: "ok", limit=100)[0] == 100
    with pytest.raises(SearchError, match="status 'failed'"):
        search(lambda b: "failed")


def test_data_wait_is_timed_apart_from_the_step(fake_framework, tmp_path, monkeypatch):
    """A runner whose input pipeline stalls: the stall shows as data_wait, inside the step time."""
    import time

    def starved_batch(self):
        CountingRunner.calls.append("batch")
        time.sleep(0.05)
        return "batch"

    monkeypatch.setattr(CountingRunner, "next_batch", starved_batch, raising=False)
    spec = RunSpec(coords=make_coords(), batch=4, image_size=32, seq_len=0, threads=1, device="cpu", local_devices=3)
    assert worker.run_rank(spec, PROTOCOL, str(tmp_path / "rank0.steps.jsonl"), progress_every=0) == "ok"
    assert fake_framework.calls == ["sync"] + ["batch", "step", "sync"] * 5
    steps = read_steplog(tmp_path / "rank0.steps.jsonl").steps
    for s in steps:
        assert 0.05 <= s["data_wait"] <= s["t_end"] - s["t_start"]
        # One process driving 3 devices processes 3 per-device batches a step.
        assert s["samples"] == 12


def test_header_is_filled_from_the_run_spec(fake_framework, tmp_path):
    import dataclasses

    import jsonschema

    from dlbench.steplog import Header

    worker.run_rank(_spec(), PROTOCOL, str(tmp_path / "rank0.steps.jsonl"), progress_every=0)
    header = read_steplog(tmp_path / "rank0.steps.jsonl").header
    assert list(header)[2:] == [f.name for f in dataclasses.fields(Header)]
    assert header["run"] == make_coords().as_dict() and header["batch"] == 4 and header["image_size"] == 32
    # The optimizer's record is the runner's (read back from its framework's objects), never a table's.
    optimizer = {"name": "sgd", "learning_rate": 0.5}
    options = {"dali": True, "fp8_emulation": False}  # PyTorch's declared options, at their defaults
    # Where the time before the first step went: the framework's import and the build, timed.
    setup = header["framework"].pop("setup_seconds")
    assert set(setup) == {"import_framework", "build"} and min(setup.values()) >= 0
    assert header["framework"] == {"name": "pytorch", "options": options, "optimizer": optimizer, "version": "0.0-test"}
    assert header["protocol"] == {"preset": "caict2020", "warmup_steps": 2, "measured_steps": 3, "statistic": "mean"}
    jsonschema.validate(header, load_schema("steplog"))


def test_a_strategy_for_some_model_kinds_refuses_the_others_before_any_build():
    """The shared check every framework's launch passes (planning makes such a cell N/A)."""
    cnn = types.SimpleNamespace(coords=make_coords(framework="jax", model="resnet50", strategy="mesh_fsdp"))
    with pytest.raises(ValueError, match=r"^jax: mesh_fsdp trains llm models only \(.*\): resnet50 is image$"):
        worker.check_model_kind(cnn)
    for model, strategy in (("llama_small", "mesh_fsdp"), ("resnet50", "sharded"), ("resnet50", "single")):
        worker.check_model_kind(
            types.SimpleNamespace(coords=make_coords(framework="jax", model=model, strategy=strategy))
        )
