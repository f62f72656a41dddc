"""fp8 in PyTorch's Llama on the CPU (docs/frameworks/llm.md, "fp8"): torchao's float8
training in its emulation (framework_options.pytorch.fp8_emulation), through the launcher and
the worker as the pipeline runs it, beside the same run in amp (bf16 autocast); and the runner's
refusals, made before it builds anything."""

from __future__ import annotations

import json

import pytest

from dlbench.steplog import read_steplog
from tests.conftest import SHARED_CORES_ENV, framework_python
from tests.frameworks import equivalence

SEQ = ("--seq-len", "16")
CASE = {"model": "llama_small", "batch": 4, "steps": (0, 6), "threads": 2}
FP8 = ("--precision", "fp8", "--options", "fp8_emulation=true")  # after launch's --precision fp32
AMP = ("--precision", "amp")
# fp8 against amp, step by step. The emulation rounds each projection's input and weight to
# float8 e4m3 (3 mantissa bits: up to 2^-4 relative per element) and its output gradient to
# e5m2, each under a dynamic tensorwise scale; a 512- or 1536-term dot product averages much of
# that away, and at random init the loss is ln(32000) = 10.4 whatever the near-zero logits, so
# the two curves part slowly. Measured on the 2-core EPYC (torch 2.14.1, torchao 0.18.0): at
# most 5.3e-4 relative over these 6 steps (6.8e-4 in-process with other tokens; amp against
# fp32 1.1e-4); longer, at 64 tokens, 1.2e-3 by step 10 and 9.1e-3 by step 20 (fp8 learns a
# little slower). Planted: the forward casts in e5m2 instead (2 mantissa bits) give 2.2e-3
# over 6 steps, which FP8_LOSS_REL refuses; float8 lost (the layers in bf16 again) gives amp's
# losses, which the test refuses too. A converted head moves the losses no more than the
# noise (7.3e-4): the header's kept_high_precision says whether it was.
FP8_LOSS_REL = 1.5e-3
needs_torch = pytest.mark.skipif(not framework_python("pytorch").exists(), reason="no pytorch environment")


def _torchao_version() -> str:
    for line in (equivalence.REPO / "envs" / "pytorch.txt").read_text().splitlines():
        if line.startswith("torchao=="):
            return line.split("==")[1].split()[0]
    raise AssertionError("envs/pytorch.txt pins no torchao")


@needs_torch
def test_emulated_fp8_trains_the_llama_near_bf16_and_the_header_records_the_recipe(tmp_path):
    runs = {}
    for name, precision in (("amp", AMP), ("fp8", FP8)):
        equivalence.launch("pytorch", tmp_path / name, *SEQ, *precision, **CASE)
        runs[name] = tmp_path / name / "rank0.steps.jsonl"
    amp, fp8 = (equivalence.losses(runs[name]) for name in ("amp", "fp8"))
    assert fp8 == pytest.approx(amp, rel=FP8_LOSS_REL), (fp8, amp)
    assert fp8[-1] < fp8[0] - 0.5  # it trains
    assert max(abs(f - a) / a for f, a in zip(fp8, amp, strict=True)) > 1e-6  # float8, not bf16 again
    header = read_steplog(runs["fp8"]).header["framework"]
    assert header["options"]["fp8_emulation"] is True
    assert header["mixed_precision"] == {"name": "torch.autocast", "dtype": "bfloat16"}
    recipe = header["float8"]
    assert recipe["name"] == "torchao.float8.convert_to_float8_training"
    assert recipe["torchao"] == _torchao_version() and recipe["emulate"] is True
    casts = recipe["recipe"]["casts"]
    assert casts["input"] == casts["weight"] == "dynamic tensorwise float8_e4m3fn"
    assert casts["grad_output"] == "dynamic tensorwise float8_e5m2"
    projections = ["attention.k", "attention.o", "attention.q", "attention.v", "ffn.down", "ffn.gate", "ffn.up"]
    assert recipe["converted_modules"] == [f"blocks.*.{p}" for p in projections]
    assert recipe["converted"] == 4 * 7 and recipe["kept_high_precision"] == ["head"]  # llama_small: 4 blocks
    assert "float8" not in read_steplog(runs["amp"]).header["framework"]


REFUSALS = """
import json
from dlbench.coords import RunCoords
from dlbench.runners.base import RunSpec
from dlbench.runners.pytorch import Runner
out = {}
for name, model in [("cpu", "llama_small"), ("cnn", "resnet50")]:
    coords = RunCoords("pytorch", model, "fp8", "synthetic", "2", "1x1", "single", 1)
    runner = Runner(RunSpec(coords, 2, 32, 16, 1, "cpu"))
    try:
        runner.build()
    except ValueError as error:
        out[name] = [str(error), hasattr(runner, "model")]
print("RESULT", json.dumps(out))
"""


@needs_torch
def test_the_runner_refuses_fp8_where_it_cannot_train_it_before_building_the_model():
    out = json.loads(equivalence.run_script(framework_python("pytorch"), REFUSALS))
    assert out["cpu"][0].startswith("fp8 needs float8 matmuls (CUDA compute capability 8.9 or later")
    assert out["cpu"][0].endswith("the CPU has none")
    assert "fp8 with resnet50 (image model)" in out["cnn"][0]
    assert not any(built for _, built in out.values())  # refused before the model was built


@needs_torch
def test_the_gpu_checks_fp8_stage_runs_its_cpu_path(tmp_path):
    """benchmarks/llm_gpu_check.py as device_run.sh's fp8 stage runs it, on its CPU path
    (emulated): the fp8 runner beside the amp runner, both loss curves step for step, the
    recipe; on a GPU the same script holds MFU to the card's fp8 peak (tests/test_fp8.py)."""
    import subprocess

    command = [str(framework_python("pytorch")), "benchmarks/llm_gpu_check.py", "--precision", "fp8"]
    command += ["--arms", "window", "amp", "--fp8-emulation", "--device", "cpu", "--model", "llama_small"]
    command += ["--batch", "2", "--seq-len", "16", "--warmup", "1", "--steps", "2", "--rounds", "1"]
    command += ["--threads", "2", "--json", str(tmp_path / "check.json")]
    env = {"PYTHONPATH": str(equivalence.REPO), "PATH": "/usr/bin:/bin", **SHARED_CORES_ENV, "HOME": "/tmp"}
    run = subprocess.run(command, cwd=equivalence.REPO, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((tmp_path / "check.json").read_text())
    assert set(result["median_tokens_per_s"]) == {"window", "amp"} and "window_over_amp" in result
    assert len(result["losses"]["window"]) == len(result["losses"]["amp"]) == 3
    assert 0 < result["loss_max_relative_difference_vs_amp"] < FP8_LOSS_REL
    assert result["float8"]["emulate"] is True and result["float8"]["converted"] == 28
    assert "mfu" not in result  # a CPU has no fp8 peak
    assert "float8: torchao" in run.stdout
