"""The fp8 precision (docs/frameworks/llm.md, "fp8") outside the framework: planning's N/A
reason where the device lacks float8 matmuls, the one message for a bad combination, the
fp8 peak behind MFU, and the emulated cells' mark in cells.md. Analysis environment, no torch:
tests/frameworks/test_llm_fp8.py trains it."""

from __future__ import annotations

import copy

import pandas as pd
import pytest

from dlbench import devices, labels
from dlbench.analysis import tables
from dlbench.coords import PRECISIONS, CellKey
from dlbench.planning import grid
from dlbench.runners import capabilities, precision_problem
from dlbench.runners.plugin import Capabilities, Option
from dlbench.schemas import load_schema

BASE = {
    "grid": {
        "frameworks": ["pytorch"],
        "models": ["llama_small"],
        "batch_per_device": [2],
        "data": ["synthetic"],
        "precision": ["amp", "fp8"],
        "scales": ["1x1"],
    },
    "protocol": {"preset": "caict2020", "repeats": 1},
}
FP8 = CellKey("pytorch", "llama_small", "fp8", "synthetic", "2", "1x1", "single")
PROTOCOL = {"preset": "p", "warmup_steps": 1, "measured_steps": 2, "repeats": 1, "statistic": "mean"}


def config(run=None, options=None, **grid_changes) -> dict:
    c = copy.deepcopy(BASE)
    c["grid"].update(grid_changes)
    c["run"] = run or {}
    if options is not None:
        c["framework_options"] = {"pytorch": options}
    return c


def test_the_config_schema_offers_the_coordinates_precisions():
    assert load_schema("config")["$defs"]["precision"]["enum"] == list(PRECISIONS)


def test_on_a_cpu_fp8_cells_are_na_naming_the_missing_float8_matmuls():
    planned = grid.expand(config())
    assert {r.precision for r in planned.runs} == {"amp"}
    reason = planned.unavailable[FP8]
    assert reason.startswith("fp8 needs float8 matmuls (CUDA compute capability 8.9 or later")
    assert "the CPU has none" in reason and "fp8_emulation: true" in reason
    # A named GPU without them (an A100 is 8.0) is N/A at planning; an H100 or an unnamed GPU
    # plans the cell (the runner checks the device it finds before it builds anything).
    a100 = grid.expand(config(run={"device": "cuda", "gpu_type": "a100"})).unavailable[FP8]
    assert "run.gpu_type a100 has compute capability 8.0" in a100
    for gpu_type in ("h100", "l4", ""):
        assert FP8 not in grid.expand(config(run={"device": "cuda", "gpu_type": gpu_type})).unavailable
    # Emulation asked for: the cells run, on the CPU too.
    emulated = grid.expand(config(options={"fp8_emulation": True}))
    assert not emulated.unavailable and {r.precision for r in emulated.runs} == {"amp", "fp8"}


def test_the_runner_gives_the_device_reason_in_the_same_words():
    assert devices.capability_lacking("fp8", "NVIDIA A100-SXM4-80GB", (8, 0)) == (
        "fp8 needs float8 matmuls (CUDA compute capability 8.9 or later: Ada, Hopper, Blackwell): "
        "NVIDIA A100-SXM4-80GB has compute capability 8.0"
    )
    assert devices.capability_lacking("fp8", "NVIDIA H100 80GB HBM3", (9, 0)) is None
    assert devices.capability_lacking("amp", "Tesla V100", (7, 0)) is None


@pytest.mark.parametrize(
    "changes,named",
    [
        ({"frameworks": ["pytorch", "tensorflow"]}, "tensorflow does not offer precision 'fp8'"),
        ({"models": ["llama_small", "resnet50"]}, "fp8 with resnet50 (image model): float8 training converts"),
        ({"models": ["bert_base"]}, "pytorch's bert_base workload does not train in fp8 (it offers: fp32, amp)"),
    ],
)
def test_a_bad_combination_is_one_message_naming_it_and_its_exclude_rule(changes, named):
    with pytest.raises(grid.ConfigError) as error:
        grid.expand(config(**changes))
    message = str(error.value)
    assert message.startswith("grid.precision: ") and named in message and "\n" not in message
    # The rule it names leaves the combination out, and the grid plans.
    rule = message.split("grid.exclude: [")[1].rstrip("]")
    excluded = dict(item.split(": ") for item in rule.strip("{}").split(", "))
    planned = grid.expand(config(**changes, exclude=[excluded]))
    assert not any(all(str(getattr(r, k)) == v for k, v in excluded.items()) for r in planned.runs)


def test_precision_problem_reads_the_kind_and_the_workload_not_a_name():
    assert precision_problem("pytorch", "llama3_1b", "fp8") is None
    assert precision_problem("pytorch", "llama_small", "amp") is None
    assert "an image model computes in convolutions" in precision_problem("pytorch", "vgg16", "fp8")
    assert precision_problem("jax", "llama_small", "fp8").startswith("jax does not offer precision 'fp8'")


def test_an_emulated_precision_names_a_declared_boolean_option():
    base = {"label": "x", "colour": "#000000", "models": (), "precisions": ("fp32", "fp8")}
    flag = Option("emulate", False, "emulates fp8")
    assert Capabilities(**base, options=(flag,), emulated_precisions={"fp8": "emulate"}).emulates("fp8", {}) is False
    for wrong in ({"fp8": "missing"}, {"amp": "emulate"}):
        with pytest.raises(ValueError, match="emulated_precisions"):
            Capabilities(**base, options=(flag,), emulated_precisions=wrong)
    with pytest.raises(ValueError, match="precisions"):
        Capabilities(**{**base, "precisions": ("fp64",)})
    pytorch = capabilities("pytorch")
    assert pytorch.emulates("fp8", {"fp8_emulation": True}) and not pytorch.emulates("fp8", None)
    assert not pytorch.emulates("amp", {"fp8_emulation": True})


@pytest.mark.parametrize(
    "name,expected",
    [
        ("NVIDIA H100 80GB HBM3", 1979.0),
        ("NVIDIA H100 PCIe", 1513.0),
        ("NVIDIA H200", 1979.0),
        ("NVIDIA L4", 242.5),  # the datasheet's 485 is with sparsity
    ],
)
def test_fp8_cells_hold_their_mfu_to_the_fp8_dense_peak(name, expected):
    value, basis = devices.peak(name, "fp8")
    assert value == expected and basis.startswith(f"{name} fp8 dense {expected:g} TFLOP/s")
    cells = pd.DataFrame(
        {"model": ["llama3_1b"] * 2, "precision": ["fp8", "amp"], "throughput": [1e4, 1e4], "devices": [1, 1],
         "device_name": [name] * 2, "status": ["ok"] * 2}
    )  # fmt: skip
    out = tables.add_flops(cells, {"llama3_1b": 1e10}, peak_tflops=0.0)
    assert out["mfu"][0] == pytest.approx(100.0 / expected)
    assert "fp8 dense" in out["peak_basis"][0] and "fp16 dense" in out["peak_basis"][1]


def test_a_device_without_float8_has_no_fp8_peak_and_keeps_its_others():
    assert devices.peak("NVIDIA A100-SXM4-80GB", "fp8") is None
    assert devices.peak("NVIDIA A100-SXM4-80GB", "amp")[0] == 312.0
    assert devices.peak("NVIDIA L40S", "fp8") is None  # not taken for an L4 by its name


def test_cells_md_marks_the_emulated_cells_and_says_what_they_are():
    rows = [
        {**CellKey("pytorch", "llama_small", p, "synthetic", "2", "1x1", "single").as_dict(), "status": "ok",
         "throughput": value, "std": float("nan"), "n": 1}
        for p, value in (("amp", 100.0), ("fp8", 40.0))
    ]  # fmt: skip
    cells = pd.DataFrame(rows)
    pairs = tables.emulated(cells, config(options={"fp8_emulation": True}))
    assert pairs == {("pytorch", "fp8")} and tables.emulated(cells, config()) == frozenset()
    text = tables.markdown(cells, PROTOCOL, pairs)
    assert f"40.0 {labels.EMULATED_MARK}" in text and f"100.0 {labels.EMULATED_MARK}" not in text
    assert f"{labels.EMULATED_MARK} = PyTorch fp8 {labels.EMULATED_TEXT}" in text
    assert "framework_options.pytorch.fp8_emulation" in text
    assert labels.EMULATED_MARK not in tables.markdown(cells, PROTOCOL)


def test_the_runner_finds_a_cuda_device_without_float8_before_it_builds_anything():
    """A GPU planning could not name (run.gpu_type unset): the runner asks the device it finds
    (float8.device_problem, called with torch by the runner; faked here, no GPU)."""
    from types import SimpleNamespace

    from dlbench.runners.pytorch import float8

    def fake_torch(name, capability):
        cuda = SimpleNamespace(get_device_name=lambda device: name, get_device_capability=lambda device: capability)
        return SimpleNamespace(cuda=cuda)

    gpu = SimpleNamespace(type="cuda")
    assert float8.device_problem(fake_torch("NVIDIA A100-SXM4-80GB", (8, 0)), gpu, emulate=False).endswith(
        "NVIDIA A100-SXM4-80GB has compute capability 8.0"
    )
    assert float8.device_problem(fake_torch("NVIDIA H200", (9, 0)), gpu, emulate=False) is None
    assert float8.device_problem(fake_torch("NVIDIA A100-SXM4-80GB", (8, 0)), gpu, emulate=True) is None
    assert float8.device_problem(None, SimpleNamespace(type="cpu"), emulate=False).endswith("the CPU has none")


def test_the_reports_tables_and_method_say_which_cells_were_emulated():
    from dlbench.report.cells import throughput_tables
    from dlbench.report.sections import _precisions

    rows = [
        {**CellKey("pytorch", "llama_small", p, "synthetic", "2", "1x1", "single").as_dict(), "status": "ok",
         "throughput": 50.0, "std": float("nan"), "n": 1, "repeats": 1, "devices": 1}
        for p in ("amp", "fp8")
    ]  # fmt: skip
    cells = pd.DataFrame(rows)
    asked = config(options={"fp8_emulation": True})
    texts = {
        t["key"][2]: t["rows"][0]["entries"][0]["text"] for t in throughput_tables(cells, tables.emulated(cells, asked))
    }
    assert texts == {"amp": "50.0", "fp8": f"50.0 {labels.EMULATED_MARK}"}
    assert _precisions(cells, asked)[1].endswith(f"PyTorch {labels.EMULATED_TEXT}")
    assert labels.EMULATED_TEXT not in " ".join(_precisions(cells, config()))
