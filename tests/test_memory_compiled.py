"""The compilers' memory estimates at planning (dlbench.planning.compiled): the shape each is
made for, the on-disk cache that a second plan reads without spawning, the fall-back to the
formula when an estimator fails, and which estimate the fit check and the tables use. The
estimators themselves run in tests/frameworks/test_llm.py."""

import copy
import json
import math
import stat
import sys
from types import SimpleNamespace

import pytest

from dlbench.analysis import memory
from dlbench.coords import CellKey, RunCoords
from dlbench.planning import compiled, fit, grid
from dlbench.planning import config as dlbench_config

GIB = 2**30


def cell(
    framework="pytorch", strategy="fsdp", model="llama_small", batch="2", scale="1x2", data="synthetic", **training
):
    return CellKey(framework, model, "fp32", data, batch, scale, strategy, **training)


def fake_estimator(tmp_path, results, name="python"):
    """An executable standing in for a framework's python: it records each call's requests in
    calls.jsonl and answers `results` for every request (a dict) or exits 1 (None)."""
    script = tmp_path / name
    calls = tmp_path / "calls.jsonl"
    answer = "sys.exit(1)" if results is None else f"json.dump([{results!r}] * len(requests), sys.stdout)"
    code = (
        "import json, sys\n"
        "requests = json.load(sys.stdin)\n"
        f"open({str(calls)!r}, 'a').write(json.dumps(requests) + '\\n')\n"
        "print('estimator failed on purpose', file=sys.stderr)\n"
        f"{answer}\n"
    )
    (tmp_path / "estimator.py").write_text(code)
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {tmp_path / 'estimator.py'}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script), calls


def test_the_shape_leaves_out_the_data_and_names_what_changes_the_estimate():
    shape = compiled.request(cell(data="real"), 256, "cpu")
    assert shape == compiled.request(cell(), 256, "cpu")
    assert shape["coords"]["data"] == "synthetic" and shape["seq_len"] == 256
    keys = {
        compiled.key(compiled.request(c, s, d))
        for c, s, d in [
            (cell(), 256, "cpu"),
            (cell(), 512, "cpu"),
            (cell(), 256, "cuda"),
            (cell(strategy="ddp"), 256, "cpu"),
            (cell(strategy="pp", pp_schedule="1f1b", pp_microbatches=4), 256, "cpu"),
            (cell(strategy="pp", pp_schedule="1f1b", pp_microbatches=2), 256, "cpu"),
        ]
    }
    assert len(keys) == 6
    # no estimator: another framework, Horovod's hooked optimizer, a searched batch
    assert compiled.request(cell(framework="tensorflow", strategy="multiworker"), 256, "cpu") is None
    assert compiled.request(cell(strategy="horovod"), 256, "cpu") is None
    assert compiled.request(cell(batch="max"), 256, "cpu") is None


def test_an_estimate_is_made_once_per_shape_and_read_from_the_cache(tmp_path):
    python, calls = fake_estimator(tmp_path, {"tensors": 3 * GIB, "runtime": GIB // 2})
    run, cache = {"python": {"pytorch": python}}, tmp_path / "cache"
    shapes = [compiled.request(cell(), 256, "cpu"), compiled.request(cell(strategy="ddp"), 256, "cpu")]
    first = compiled.prepare(shapes, run, cache)
    assert "2 shape(s), 0 cached, 2 made now" in first[0] and first[0].endswith("0 failed")
    # torch's shapes split between planning's two workers: one request each
    assert [len(json.loads(line)) for line in calls.read_text().splitlines()] == [1, 1]
    second = compiled.prepare(shapes, run, cache)
    assert "2 cached, 0 made now" in second[0] and len(calls.read_text().splitlines()) == 2
    made = compiled.lookup(cell(data="real"), 256, "cpu", cache)
    assert made.gib == pytest.approx(3.5) and made.basis.startswith(compiled.BASIS["pytorch"])
    assert "0.50 GiB process runtime" in made.basis
    # on a GPU the measured peak is the allocator's: no host runtime is added
    record = json.loads(compiled.cache_path(shapes[0], cache).read_text())
    assert compiled.of_record(record, "cuda").gib == pytest.approx(3.0)


def test_a_failed_estimate_leaves_the_formula_and_says_so(tmp_path):
    python, _ = fake_estimator(tmp_path, None)
    shape = compiled.request(cell(), 256, "cpu")
    lines = compiled.prepare([shape], {"python": {"pytorch": python}}, tmp_path / "cache")
    assert lines[0].endswith("1 failed")
    assert "estimator failed on purpose" in lines[1] and "the formula's estimate is used" in lines[1]
    assert compiled.lookup(cell(), 256, "cpu", tmp_path / "cache") is None
    missing = compiled.prepare([shape], {"python": {"pytorch": str(tmp_path / "nowhere")}}, tmp_path / "cache")
    assert "no pytorch environment at" in missing[1]


def test_a_shape_the_estimator_cannot_do_is_not_asked_again(tmp_path):
    python, calls = fake_estimator(tmp_path, {"error": "DynamicOutputShapeException: aten.nonzero.default"})
    shape, run = compiled.request(cell(), 256, "cpu"), {"python": {"pytorch": python}}
    for _ in range(2):
        lines = compiled.prepare([shape], run, tmp_path / "cache")
        assert lines[0].endswith("1 failed") and "aten.nonzero" in lines[1]
    assert len(calls.read_text().splitlines()) == 1
    assert compiled.lookup(cell(), 256, "cpu", tmp_path / "cache") is None


def test_the_fit_check_uses_the_compilers_estimate_and_names_it(tmp_path, monkeypatch):
    monkeypatch.setattr(compiled, "CACHE_DIR", tmp_path / "cache")  # empty: no estimate made yet
    config = {"run": {"device": "cpu", "device_memory_gib": 0.05, "seq_len": 256}}
    formula = grid._unfit(config, cell())
    assert formula and fit.FORMULA in formula
    python, _ = fake_estimator(tmp_path, {"tensors": 10 * GIB, "runtime": 0})
    compiled.prepare([compiled.request(cell(), 256, "cpu")], {"python": {"pytorch": python}})
    reason = grid._unfit(config, cell())
    assert "needs ≈ 10.0 GiB" in reason and compiled.BASIS["pytorch"] in reason
    config["run"]["device_memory_gib"] = 20.0
    assert grid._unfit(config, cell()) is None
    # run.memory_estimate: formula asks for the formula alone
    config["run"].update(device_memory_gib=0.05, memory_estimate="formula")
    assert fit.FORMULA in grid._unfit(config, cell())


def test_a_grid_without_an_llm_lists_no_shape_and_walks_no_cell(monkeypatch):
    def walked(_grid):
        raise AssertionError("planned_cells walked for a grid without an LLM")

    monkeypatch.setattr(grid, "planned_cells", walked)
    config = {"grid": {"models": ["resnet50", "vgg16"]}, "run": {}}
    assert grid.estimated_shapes(config) == []
    llm = {"grid": {"models": ["llama_small"]}, "run": {"memory_estimate": "formula"}}
    assert grid.estimated_shapes(llm) == []
    assert compiled.prepare([], {}) == []


def test_runs_csv_shows_the_working_directorys_copy_beside_the_formula(tmp_path, monkeypatch):
    python, _ = fake_estimator(tmp_path, {"tensors": GIB, "runtime": GIB // 4})
    monkeypatch.setattr(compiled, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.chdir(tmp_path)
    coords = RunCoords(**cell().as_dict(), repeat=1)
    log = SimpleNamespace(header={"seq_len": 256, "device": "cpu"}, footer={"window_rss_mb": 1300.0})
    shape = compiled.request(coords.cell, 256, "cpu")
    compiled.prepare([shape], {"python": {"pytorch": python}})
    # in the checkout's cache only: a campaign regenerated elsewhere shows none
    assert math.isnan(memory.run_memory([log], coords)["compiled_estimate_gib"])
    compiled.copy_to_workdir([shape], compiled.WORKDIR_DIR)
    row = memory.run_memory([log], coords)
    assert row["compiled_estimate_gib"] == pytest.approx(1.25) and row["memory_estimate_gib"] > 0
    assert row["compiled_estimate_basis"].startswith(compiled.BASIS["pytorch"])
    other = memory.run_memory([log], coords.with_(batch="4"))  # a shape not estimated
    assert math.isnan(other["compiled_estimate_gib"]) and other["compiled_estimate_basis"] == ""
    # the runner's code changes after planning: the checkout's cache no longer names the record,
    # the working directory's copy (what this grid's planning used) still does
    monkeypatch.setattr(compiled, "code_digest", lambda framework, device: "edited")
    assert compiled.lookup(coords.cell, 256, "cpu") is None
    assert memory.run_memory([log], coords)["compiled_estimate_gib"] == pytest.approx(1.25)


def test_a_bad_grid_is_refused_before_any_estimator_runs(tmp_path, monkeypatch):
    """A cross-reference the schema cannot check (an exclude rule naming an unknown model) is
    refused before planning spawns an estimator for the grid's LLM cells; fixed, it spawns."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(compiled, "CACHE_DIR", tmp_path / "cache")
    python, calls = fake_estimator(tmp_path, {"tensors": GIB, "runtime": 0})
    config = {
        "grid": {
            "frameworks": ["pytorch"],
            "models": ["llama_small"],
            "batch_per_device": [2],
            "scales": ["1x2"],
            "strategies": {"pytorch": ["fsdp"]},
            "exclude": [{"model": "resnet5O"}],
        },
        "protocol": {"preset": "caict2020"},
        "run": {"python": {"pytorch": python}},
    }
    with pytest.raises(grid.ConfigError, match="resnet5O"):
        dlbench_config.checked_grid(copy.deepcopy(config), estimate_memory=True)
    assert not calls.exists()
    config["grid"]["exclude"] = []
    assert dlbench_config.checked_grid(config, estimate_memory=True).runs
    assert calls.exists()


def test_a_cuda_grid_with_a_gpu_target_compiles_for_it_with_no_gpu_attached(tmp_path, monkeypatch):
    """run.gpu_target_config: the JAX estimator of a CUDA shape is asked to compile for that
    device (its request names the spec); the estimate is cached under that spec's text, so
    another device's spec makes it anew; the fit check finds it; no file is one message."""
    monkeypatch.chdir(tmp_path)
    python, calls = fake_estimator(tmp_path, {"tensors": 31 * GIB, "runtime": GIB})
    spec = tmp_path / "h200.txtpb"
    spec.write_text('gpu_device_info { core_count: 132 }\nplatform_name: "CUDA"\n')
    run = {"device": "cuda", "python": {"jax": python}, "gpu_target_config": "h200.txtpb", "seq_len": 256}
    jax_cell = cell(framework="jax", strategy="single", scale="1x1")
    shape, cache = compiled.request(jax_cell, 256, "cuda"), tmp_path / "cache"
    assert compiled.prepare([shape], run, cache)[0].endswith(f"1 made now ({cache}), 0 failed")
    (request,) = json.loads(calls.read_text())
    assert request["target_config"] == str(spec) and request["device"] == "cuda"
    made = compiled.lookup(jax_cell, 256, "cuda", cache, target=compiled.target_digest(run))
    assert made.gib == pytest.approx(31.0)  # a GPU's peak is the allocator's: no runtime added
    assert compiled.lookup(jax_cell, 256, "cuda", cache) is None  # not the estimate of an attached GPU
    spec.write_text('gpu_device_info { core_count: 114 }\nplatform_name: "CUDA"\n')
    assert "0 cached, 1 made now" in compiled.prepare([shape], run, cache)[0]
    monkeypatch.setattr(compiled, "CACHE_DIR", cache)
    fits = {"run": {**run, "device_memory_gib": 30.0}}
    assert "needs ≈ 31.0 GiB" in grid._unfit(fits, jax_cell)
    # PyTorch's estimate needs no device: the spec is not in its key; a CPU grid ignores it;
    # a missing file is refused, naming the key
    torch_shape = compiled.request(cell(scale="1x1", strategy="single"), 256, "cuda")
    assert compiled.key(torch_shape, target="abc") == compiled.key(torch_shape)
    assert compiled.target_config({**run, "device": "cpu"}) == ""
    problem = dlbench_config.gpu_target_problem({**run, "gpu_target_config": "h100.txtpb"})
    assert problem.startswith("run.gpu_target_config: no file at 'h100.txtpb'")
