"""LLM pretraining (issue #27): the Llama shapes and their counts, throughput in tokens, the
planning-time checks, and both runners' Llama (llama_small at 64 tokens: seconds a run) with
their strategies against the single-device step of the same global batch
(tests/frameworks/equivalence.py; docs/frameworks/llm.md)."""

import json
import re

import pytest

from dlbench import labels, llm
from dlbench.analysis import memory
from dlbench.analysis.flops import count
from dlbench.coords import CellKey, RunCoords
from dlbench.models import CATALOGUE, sample_unit
from dlbench.planning.grid import ConfigError, expand
from dlbench.steplog import read_steplog
from tests.conftest import SHARED_CORES_ENV, framework_python
from tests.frameworks import equivalence, estimates

SEQ_LEN = 64
CASE = {"model": "llama_small", "batch": 4}  # the global batch: 2 devices × 2
SEQ = ("--seq-len", str(SEQ_LEN))
# The compilers' estimates against the measured peaks of these short runs (docs/memory.md
# gives the grid's errors; the CPU peak is a process's resident set, allocator slack included).
COMPILED_TOLERANCE = 0.15
# The 1x2 runs' allocator: glibc's heap keeps what FSDP2 frees between blocks, resident but no
# tensor (docs/memory.md); tools/test.sh installs jemalloc.
ALLOCATOR = ("--allocator", "jemalloc")
# Meta's published totals (Llama 3.1 8B, Llama 3.2 1B with tied embeddings).
PARAMETERS = {"llama3_8b": 8_030_261_248, "llama3_1b": 1_235_814_400, "llama_small": 45_355_520}

needs_torch = pytest.mark.skipif(
    not framework_python("pytorch").exists(), reason="the pytorch environment is not built"
)
needs_jax = pytest.mark.skipif(not framework_python("jax").exists(), reason="the jax environment is not built")


def test_catalogue_has_the_llama_shapes_and_their_parameters():
    assert {m for m, meta in CATALOGUE.items() if meta["kind"] == "llm"} == set(llm.SHAPES)
    assert {m: llm.parameter_count(m) for m in llm.SHAPES} == PARAMETERS
    big = llm.SHAPES["llama3_8b"]
    assert (big.layers, big.hidden, big.heads, big.kv_heads, big.ffn, big.vocab) == (32, 4096, 32, 8, 14336, 128256)
    assert big.rope_theta == 500_000 and not big.tied_embeddings and llm.SHAPES["llama3_1b"].tied_embeddings
    assert all(CATALOGUE[m]["default_seq_len"] == 2048 for m in llm.SHAPES)


def test_rope_frequencies_follow_llama_3_1_scaling():
    """High frequencies kept, low ones divided by the factor (8), the band between smoothed."""
    plain = [1 / 500_000 ** (2 * i / 128) for i in range(64)]
    scaled = llm.rope_inv_freq("llama3_8b")
    assert scaled[0] == plain[0] and scaled[-1] == pytest.approx(plain[-1] / 8)
    assert all(p / 8 <= s <= p for s, p in zip(scaled, plain, strict=True))
    assert llm.rope_inv_freq("llama_small") == [1 / 500_000 ** (2 * i / 64) for i in range(32)]


def test_flops_per_token_are_palms_6n_plus_attention():
    s = llm.SHAPES["llama3_8b"]
    matmul = PARAMETERS["llama3_8b"] - s.vocab * s.hidden  # the input embedding is a lookup
    counted = count("llama3_8b", 0, 8192)
    assert counted["train_flops_per_sample"] == 6 * matmul + 12 * 32 * 4096 * 8192
    assert counted["train_flops_per_sample"] == pytest.approx(57.914e9, rel=1e-4)
    # Tied: the head's matmul still costs its vocab × hidden.
    assert llm.matmul_parameters("llama3_1b") == PARAMETERS["llama3_1b"]
    assert llm.train_flops_per_token("llama3_1b", 0) == 6 * PARAMETERS["llama3_1b"]


def test_throughput_is_in_tokens():
    assert sample_unit("llama3_8b") == "tokens" and labels.unit("llama_small") == "tokens/s"
    assert labels.model_title("llama3_8b") == "Llama 3.1 8B"


def _config(models, seq_len=0, data=("synthetic",), scales=("1x1",), pytorch=("fsdp",)):
    return {
        "grid": {
            "frameworks": ["pytorch", "jax"],
            "models": list(models),
            "precision": ["fp32"],
            "data": list(data),
            "batch_per_device": [2],
            "scales": list(scales),
            "strategies": {"pytorch": list(pytorch), "jax": ["sharded"]},
        },
        "protocol": {"preset": "caict2020"},
        "run": {"seq_len": seq_len},
    }


def test_sequence_longer_than_the_models_positions_is_a_planning_error():
    with pytest.raises(ConfigError, match=r"run.seq_len: 16384 exceeds llama_small's 8192 positions"):
        expand(_config(["llama_small"], seq_len=16384))
    with pytest.raises(ConfigError, match=r"run.seq_len: 1 is too short"):
        expand(_config(["llama_small"], seq_len=1))
    assert expand(_config(["llama3_8b", "resnet50"], seq_len=131072)).runs


@pytest.mark.parametrize(
    "model,scale,expected",
    [
        (
            "llama_small",
            "1x3",
            "grid.scales: '1x3' with pytorch's fsdp_tp: a tensor-parallel size of 3 does not divide",
        ),
        ("llama3_8b", "1x16", "a tensor-parallel size of 16 does not divide llama3_8b's 8 KV heads"),
        ("llama_small", "2x1", "'2x1' with pytorch's fsdp_tp: a tensor-parallel size of 1: tensor parallelism needs"),
    ],
)
def test_tensor_parallel_size_that_cannot_split_the_heads_is_a_planning_error(model, scale, expected):
    with pytest.raises(ConfigError, match=re.escape(expected)):
        expand(_config([model], scales=(scale,), pytorch=("fsdp_tp",)))


def test_tensor_parallel_plans_llms_on_a_node_and_says_why_not_for_a_cnn():
    grid = expand(_config(["llama3_8b", "resnet50"], scales=("1x8", "2x8"), pytorch=("fsdp", "fsdp_tp")))
    tp = {(r.model, r.scale) for r in grid.runs if r.strategy == "fsdp_tp"}
    assert tp == {("llama3_8b", "1x8"), ("llama3_8b", "2x8")}
    cnn = {c.scale: why for c, why in grid.unavailable.items() if c.strategy == "fsdp_tp"}
    assert set(cnn) == {"1x8", "2x8"} and all("resnet50 is no LLM" in why for why in cnn.values())


def test_jax_mesh_strategies_plan_llms_and_say_why_not_for_a_cnn():
    config = _config(["llama3_8b", "resnet50"], scales=("1x8", "2x8"))
    config["grid"]["strategies"]["jax"] = ["mesh_fsdp", "mesh_fsdp_tp"]
    grid = expand(config)
    jax_runs = {(r.model, r.scale, r.strategy) for r in grid.runs if r.framework == "jax"}
    assert jax_runs == {("llama3_8b", s, st) for s in ("1x8", "2x8") for st in ("mesh_fsdp", "mesh_fsdp_tp")}
    cnn = {(c.scale, c.strategy): why for c, why in grid.unavailable.items() if c.framework == "jax"}
    assert set(cnn) == {(s, st) for s in ("1x8", "2x8") for st in ("mesh_fsdp", "mesh_fsdp_tp")}
    assert all("trains llm models only" in why and "resnet50 is image" in why for why in cnn.values())
    config["grid"]["scales"] = ["1x3"]
    with pytest.raises(ConfigError, match=re.escape("'1x3' with jax's mesh_fsdp_tp: a tensor-parallel size of 3")):
        expand(config)


def test_real_text_cells_plan_for_both_runners_and_jax_images_say_why():
    grid = expand(_config(["llama_small", "alexnet"], data=("synthetic", "real"), scales=("1x1", "1x2")))
    llm_runs = {(r.framework, r.data, r.strategy) for r in grid.runs if r.model == "llama_small"}
    assert llm_runs == {(fw, data, strategy) for fw, strategy in (("pytorch", "fsdp"), ("jax", "sharded"))
                        for data in ("synthetic", "real")} | {(fw, data, "single") for fw in ("pytorch", "jax")
                                                               for data in ("synthetic", "real")}  # fmt: skip
    jax_images = {cell: why for cell, why in grid.unavailable.items() if cell.framework == "jax"}
    assert {(c.model, c.data) for c in jax_images} == {("alexnet", "real")}
    assert all("no real-data input pipeline for images" in why for why in jax_images.values())


@pytest.mark.parametrize("framework", ["pytorch", "jax"])
def test_llama_trains_on_real_text_through_its_loader(tmp_path, framework):
    """The packed bytes of pydoc_data through each framework's loader: data_wait timed, the
    dataset in the header, the loss falling from ln(32000) as the model learns 257 ids."""
    if not framework_python(framework).exists():
        pytest.skip(f"the {framework} environment is not built")
    from dlbench.data import tokens

    manifest = tokens.build(tmp_path / "tokens", None, SEQ_LEN)
    equivalence.launch(framework, tmp_path / "run", *SEQ, "--data-dir", str(tmp_path / "tokens"), model="llama_small",
                       batch=2, data="real", steps=(0, 8), threads=2)  # fmt: skip
    log = read_steplog(tmp_path / "run" / "rank0.steps.jsonl")
    assert log.valid and log.status == "ok", (log.problems, log.footer)
    dataset = log.header["framework"]["dataset"]
    assert dataset["corpus_sha256"] == manifest["corpus_sha256"] and dataset["vocab_size"] == tokens.VOCAB_SIZE
    assert all(s["data_wait"] >= 0 for s in log.steps) and {s["samples"] for s in log.steps} == {2 * SEQ_LEN}
    losses = [s["loss"] for s in log.steps]
    assert sum(losses[-2:]) / 2 < sum(losses[:2]) / 2 - 0.2


# ------------------------------------------------------------------ PyTorch
@pytest.fixture(scope="module")
def torch_single(tmp_path_factory):
    """llama_small, the global batch of 4 on one device at one thread (the threads of each
    rank below), 6 steps."""
    run_dir = tmp_path_factory.mktemp("llm") / "single"
    equivalence.launch("pytorch", run_dir, *SEQ, steps=equivalence.STEPS, threads=1, **CASE)
    return run_dir


def _global_losses(framework, run_dir, strategy, *extra):
    """The losses of the whole global batch: the ranks' mean (each logs its own shard's)."""
    equivalence.launch(framework, run_dir, *SEQ, *extra, scale="1x2", strategy=strategy, steps=equivalence.STEPS,
                       threads=2, model=CASE["model"], batch=CASE["batch"] // 2)  # fmt: skip
    logs = sorted(run_dir.glob("rank*.steps.jsonl"))
    assert len(logs) == (2 if framework == "pytorch" else 1), logs
    losses = [equivalence.losses(path) for path in logs]
    return [sum(step) / len(step) for step in zip(*losses, strict=True)]


@needs_torch
def test_pytorch_llama_trains_and_counts_tokens(torch_single):
    log = read_steplog(torch_single / "rank0.steps.jsonl")
    assert log.valid and log.status == "ok", (log.problems, log.footer)
    framework = log.header["framework"]
    assert framework["trainable_params"] == PARAMETERS["llama_small"]
    assert framework["optimizer"]["name"] == "adamw" and framework["optimizer"]["betas"] == [0.9, 0.95]
    assert framework["compute_dtype"] == "float32" and log.header["seq_len"] == SEQ_LEN
    assert {s["samples"] for s in log.steps} == {CASE["batch"] * SEQ_LEN}  # tokens
    losses = [s["loss"] for s in log.steps]
    assert losses[0] == pytest.approx(10.37, abs=0.3)  # ln(32000): random init
    assert losses[-1] < losses[0] - 0.1


@pytest.fixture(scope="module")
def strategy_run(tmp_path_factory):
    """strategy → (run directory, the global losses) of its 1x2 PyTorch run, launched once."""
    root, done = tmp_path_factory.mktemp("strategies"), {}

    def run(strategy: str):
        if strategy not in done:
            done[strategy] = (root / strategy, _global_losses("pytorch", root / strategy, strategy, *ALLOCATOR))
        return done[strategy]

    return run


@needs_torch
@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "fsdp_tp"])
def test_pytorch_strategy_reproduces_the_single_device_losses(torch_single, strategy_run, strategy):
    """Two 1-thread ranks, each its half of the global batch (DDP: gradients all-reduced;
    FSDP2: each block sharded, gradients reduce-scattered), or (fsdp_tp on one node) both
    reading the whole global batch, each block's heads and FFN split over the two: the mean
    of the ranks' losses is the single run's, step after step."""
    single = equivalence.losses(torch_single / "rank0.steps.jsonl")
    run_dir, losses = strategy_run(strategy)
    equivalence.assert_equivalent(losses, single)
    layout = read_steplog(run_dir / "rank0.steps.jsonl").header["framework"].get("parallel_layout")
    expected = {"ddp": None, "fsdp": {"data": 2}, "fsdp_tp": {"data": 1, "tensor": 2}}[strategy]
    assert (layout and layout["mesh"]) == expected


def _compiler_estimates(tmp_path, framework, strategies, scale, batch):
    """strategy → the compilers' estimate of the llama_small cell these tests run at SEQ_LEN."""
    cells = {s: CellKey(framework, "llama_small", "fp32", "synthetic", str(batch), scale, s) for s in strategies}
    return estimates.compiler_estimates(tmp_path, cells, SEQ_LEN)


@pytest.fixture(scope="module")
def torch_estimates(tmp_path_factory):
    strategies = ("ddp", "fsdp", "fsdp_tp")
    return _compiler_estimates(tmp_path_factory.mktemp("estimates"), "pytorch", strategies, "1x2", 2)


@needs_torch
def test_fsdp_holds_less_memory_per_rank_than_ddp(strategy_run, torch_estimates):
    """The same two 1x2 cells: FSDP2 keeps half of the parameters, gradients and AdamW moments per
    rank, so its tensors' peak per rank is lower: PyTorch's memory tracker over each runner's
    step on fake tensors, exact where a resident set moves with the allocator's timing (a
    whole-process comparison once came out 6 MB the wrong way on a loaded host)."""
    # (one estimating process: the same runtime in both) at least a quarter of the fp32 state
    # (16 bytes a parameter) less, of the half FSDP2 does not hold
    less = (torch_estimates["ddp"].gib - torch_estimates["fsdp"].gib) * 2**30
    assert less > 4 * PARAMETERS["llama_small"], torch_estimates
    # planning's formula says so too, from the runs' own coordinates
    peaks = {}
    for strategy in ("ddp", "fsdp"):
        logs = [read_steplog(p) for p in sorted(strategy_run(strategy)[0].glob("rank*.steps.jsonl"))]
        peaks[strategy] = memory.run_memory(logs, RunCoords.from_dict(logs[0].header["run"]))
    assert {p["memory_basis"] for p in peaks.values()} == {memory.HOST}
    assert peaks["fsdp"]["memory_estimate_gib"] < peaks["ddp"]["memory_estimate_gib"], peaks


@needs_torch
def test_pytorch_compiler_estimate_is_near_the_measured_peak(strategy_run, torch_estimates):
    """The tracker's tensor peak (with gloo's workspaces for FSDP2's collectives) plus torch's
    resident runtime against each 1x2 run's largest rank's peak over the measured window
    (tables' peak_memory_gib), every strategy within COMPILED_TOLERANCE."""
    measured = {}
    for strategy in torch_estimates:
        logs = [read_steplog(p) for p in sorted(strategy_run(strategy)[0].glob("rank*.steps.jsonl"))]
        measured[strategy] = estimates.measured_peak_gib(logs)
    said = (torch_estimates, measured)
    for strategy in ("ddp", "fsdp", "fsdp_tp"):
        assert torch_estimates[strategy].gib == pytest.approx(measured[strategy], rel=COMPILED_TOLERANCE), said


@needs_torch
def test_pytorch_builds_every_llama_with_its_parameters_and_names_bf16():
    code = (
        "import json, torch; from dlbench.runners.pytorch import llm; from dlbench.coords import RunCoords\n"
        "from dlbench.runners.base import RunSpec; from dlbench.runners.pytorch import Runner\n"
        "out = {}\n"
        "for name in ('llama3_8b', 'llama3_1b', 'llama_small'):\n"
        "    with torch.device('meta'): m = llm.Llama(name)\n"
        "    out[name] = sum(p.numel() for p in m.parameters())\n"
        # One block compiles what four do, in 41 s instead of 61 here (C++ kernels per block).
        "import dataclasses, dlbench.llm as shapes\n"
        "shapes.SHAPES['llama_small'] = dataclasses.replace(shapes.SHAPES['llama_small'], layers=1)\n"
        "coords = RunCoords('pytorch', 'llama_small', 'amp', 'synthetic', '2', '1x1', 'single', 1)\n"
        "runner = Runner(RunSpec(coords, 2, 0, 16, 1, 'cpu', compile=True))\n"
        "runner.import_framework(); import sys; out['torchvision'] = 'torchvision' in sys.modules; runner.build()\n"
        "runner.step(); runner.step(); info = runner.describe()\n"
        "out['amp'] = [info['compute_dtype'], info['torch_compile'], runner.optimizer.param_groups[0]['lr'].item()]\n"
        "print('RESULT', json.dumps(out))"
    )
    out = json.loads(equivalence.run_script(framework_python("pytorch"), code))
    assert {m: out[m] for m in PARAMETERS} == PARAMETERS
    assert out["amp"][:2] == ["bfloat16", "model and optimizer step"]
    assert out["torchvision"] is False  # the CNNs' import (with torch._dynamo's), not an LLM's
    assert out["amp"][2] == pytest.approx(llm.lr_at(2))  # the warm-up, through a compiled step


# ---------------------------------------------------------------------- JAX
@pytest.fixture(scope="module")
def jax_single(tmp_path_factory):
    """llama_small, the global batch of 4 on one CPU device, 6 steps."""
    run_dir = tmp_path_factory.mktemp("llm") / "jax_single"
    equivalence.launch("jax", run_dir, *SEQ, steps=equivalence.STEPS, threads=2, **CASE)
    return run_dir


@needs_jax
def test_jax_llama_trains_and_counts_tokens(jax_single):
    single = equivalence.losses(jax_single / "rank0.steps.jsonl")
    log = read_steplog(jax_single / "rank0.steps.jsonl")
    assert log.header["framework"]["trainable_params"] == PARAMETERS["llama_small"]
    assert "parallel_layout" not in log.header["framework"]
    assert {s["samples"] for s in log.steps} == {CASE["batch"] * SEQ_LEN}
    assert single[-1] < single[0] - 0.1


@needs_jax
def test_jax_compiler_estimate_is_near_the_measured_peak(tmp_path, jax_single):
    """XLA's memory analysis of the step compiled for abstract arguments, plus the resident
    runtime of the compiling process, against the run's peak over its measured window."""
    (estimate,) = _compiler_estimates(tmp_path, "jax", ("single",), "1x1", CASE["batch"]).values()
    logs = [read_steplog(jax_single / "rank0.steps.jsonl")]
    measured = memory.run_memory(logs, RunCoords.from_dict(logs[0].header["run"]))["peak_memory_gib"]
    assert estimate.gib == pytest.approx(measured, rel=COMPILED_TOLERANCE), (estimate, measured)
    assert "XLA" in estimate.basis


@needs_jax
# sharded, the global batch split with the state replicated: test_llm_training_options.py (two
# micro-batches on each device) and test_jax.py (through the launcher, AlexNet).
@pytest.mark.parametrize("strategy", ["mesh_fsdp", "mesh_fsdp_tp"])
def test_jax_strategy_reproduces_the_single_device_losses(tmp_path, jax_single, strategy):
    """One process, two CPU devices: the global batch split (mesh_fsdp: every parameter and
    AdamW moment halved on a mesh axis `fsdp`) or (mesh_fsdp_tp, a 1 x 2 mesh) both devices on
    the whole batch, each block's heads and FFN split on `tensor`: the same losses as one
    device with the global batch."""
    single = equivalence.losses(jax_single / "rank0.steps.jsonl")
    equivalence.assert_equivalent(_global_losses("jax", tmp_path / strategy, strategy), single)
    framework = read_steplog(tmp_path / strategy / "rank0.steps.jsonl").header["framework"]
    layout = framework.get("parallel_layout")
    expected = {"mesh_fsdp": {"fsdp": 2}, "mesh_fsdp_tp": {"fsdp": 1, "tensor": 2}}[strategy]
    assert (layout and layout["mesh"]) == expected
    assert framework["trainable_params"] == PARAMETERS["llama_small"]  # the global count, not a shard's


@needs_jax
def test_jax_mesh_strategies_shard_each_parameter_by_its_role():
    """The state as each strategy places it on four XLA CPU devices (2 x 2 for mesh_fsdp_tp, a node
    of two twice): the PartitionSpec of a column-, a row-split kernel, the embedding, a norm,
    an AdamW moment and the step count, and the shape of one device's shard of q."""
    code = (
        "import os; os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=4'\n"
        "import json, jax; from types import SimpleNamespace; from dlbench.runners.jax import llm, strategies\n"
        "out = {}\n"
        "for name, local in (('mesh_fsdp', 4), ('mesh_fsdp_tp', 2)):\n"
        "    st = strategies.STRATEGIES(name)(SimpleNamespace(local_devices=local), jax.devices())\n"
        "    (p, opt), _ = llm.initial_state(llm.Llama('llama_small'), 8, 0, st, llm.optimizer())\n"
        "    b = p['block0']; adam = opt.inner_state[0]\n"
        "    leaves = (b['q']['kernel'], b['down']['kernel'], p['embed']['embedding'], b['ffn_norm']['weight'],\n"
        "              adam.mu['block0']['down']['kernel'], adam.count)\n"
        "    out[name] = [[str(a) for a in x.sharding.spec] for x in leaves]\n"
        "    out[name].append(list(b['q']['kernel'].addressable_shards[0].data.shape))\n"
        "print('RESULT', json.dumps(out))"
    )
    out = json.loads(equivalence.run_script(framework_python("jax"), code, env={"JAX_PLATFORMS": "cpu"}))
    # fsdp: the largest dimension (down: its 1536 FFN rows; the embedding: its vocabulary)
    fsdp, tp = ["fsdp", "None"], ["tensor", "fsdp"]
    assert out["mesh_fsdp"] == [fsdp, fsdp, fsdp, ["fsdp"], fsdp, [], [128, 512]]
    # q by columns, down by rows, the embedding by vocabulary on `tensor`; fsdp on the other dimension
    assert out["mesh_fsdp_tp"] == [["fsdp", "tensor"], tp, tp, ["fsdp"], tp, [], [256, 256]]


@needs_jax
def test_jax_builds_every_llama_with_its_parameters():
    code = (
        "import json, jax, jax.numpy as jnp; from dlbench.runners.jax import llm\n"
        "out = {}\n"
        "for name in ('llama3_8b', 'llama3_1b', 'llama_small'):\n"
        "    shapes = jax.eval_shape(lambda: llm.Llama(name).init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32)))\n"
        "    out[name] = sum(x.size for x in jax.tree_util.tree_leaves(shapes['params']))\n"
        "print('RESULT', json.dumps(out))"
    )
    out = json.loads(equivalence.run_script(framework_python("jax"), code, env={"JAX_PLATFORMS": "cpu"}))
    assert out == PARAMETERS


@pytest.mark.parametrize("framework", ["pytorch", "jax"])
def test_the_gpu_check_trains_the_independent_llama_beside_the_runner(framework, tmp_path):
    """benchmarks/llm_gpu_check.py on its CPU path: transformers' (Flax)LlamaForCausalLM built
    from llama_small's shape (it exits naming the count when the parameters differ; JAX:
    transformers 4.57 in the JAX lock, the last with Flax classes, must still run on its JAX)
    trains beside the runner, whose window arm uses JAX's window clock on real XLA."""
    import subprocess

    if not framework_python(framework).exists():
        pytest.skip(f"the {framework} environment is not built")
    command = [str(framework_python(framework)), "benchmarks/llm_gpu_check.py", "--framework", framework]
    command += ["--device", "cpu", "--model", "llama_small", "--batch", "2", "--seq-len", "32", "--steps", "2"]
    command += ["--warmup", "1", "--rounds", "1", "--threads", "1", "--json", str(tmp_path / "check.json")]
    command += ["--layers", "1"]  # the script's paths on one block: each compile a quarter of four's
    env = {
        "PYTHONPATH": str(equivalence.REPO),
        "PATH": "/usr/bin:/bin",
        **SHARED_CORES_ENV,
        "HOME": "/tmp",
        "JAX_PLATFORMS": "cpu",
    }
    run = subprocess.run(command, cwd=equivalence.REPO, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((tmp_path / "check.json").read_text())
    assert all(v > 0 for v in result["median_tokens_per_s"].values())
    assert 9.0 < result["reference_loss"] < 11.5  # about ln(32000) = 10.4 after three steps from random init
    # PyTorch's window clock is CUDA events: on a CPU both of its arms sync per step.
    assert result["timing"]["window"]["sync"] == ("window" if framework == "jax" else "step")
    assert result["timing"]["per-step"]["sync"] == "step"
    assert "runner over reference" in run.stdout
