"""Activation checkpointing and gradient accumulation in the PyTorch and JAX Llama runners
(docs/frameworks/llm.md, "Activation checkpointing and gradient accumulation"): what a
workload declares, and equivalence. llama_small at 16 tokens, 3 steps, fp32, the runners
driven in-process so that the whole training state (parameters and both AdamW moments) can be
compared: Adam's update is about lr × sign(g), so a gradient summed over micro-batches instead
of averaged leaves the parameters nearly unchanged, and only the moments show it."""

import json
import socket
import subprocess

import pytest

from dlbench import llm
from dlbench.coords import RunCoords
from dlbench.runners import training_option_unavailable
from tests.conftest import REPO, SHARED_CORES_ENV, framework_python
from tests.frameworks import equivalence

# The states' largest difference, per tensor relative to its largest magnitude: float32
# rounding orders of summation apart, measured at most 1.1e-5 (JAX, two devices); a gradient
# not divided by the micro-batches doubles the first moment (a difference of 1).
STATE_REL = 3e-5
LOSS_REL = 1e-6
# amp under FSDP2's policy against the single device's autocast: bfloat16 parameters and
# residual stream against autocast's float32 ones, bfloat16's rounding (2^-8 = 3.9e-3) apart
# at most. Measured (3 steps, llama_small, 16 tokens): losses 6e-5 (fsdp) and 1.6e-4 (fsdp_tp)
# apart, states 1.7e-2 (moments of small gradients); a half-size first update moves the second
# loss 2.4e-3.
AMP_LOSS_REL, AMP_STATE_REL = 5e-4, 5e-2

needs_torch = pytest.mark.skipif(not framework_python("pytorch").exists(), reason="no pytorch environment")
needs_jax = pytest.mark.skipif(not framework_python("jax").exists(), reason="no jax environment")


def assert_trains_as(run: dict, reference: dict, header: list) -> None:
    """The same losses and training state as `reference`, and the header saying what ran."""
    assert run["losses"] == pytest.approx(reference["losses"], rel=LOSS_REL), header
    assert run["state"] <= STATE_REL, header
    assert run["header"] == header


def test_a_workload_without_the_option_gives_the_reason_and_the_llms_offer_them():
    assert training_option_unavailable("mxnet", "resnet50", "full", 1) == (
        "mxnet's resnet50 workload has no activation checkpointing (it offers: none)"
    )
    assert training_option_unavailable("pytorch", "bert_base", "none", 2) == (
        "pytorch's bert_base workload has no gradient accumulation (grad_accum 2: it takes one batch a step)"
    )
    # The values themselves are refused once, where coordinates are made.
    for bad, said in (({"activation_checkpointing": "fast"}, "'fast' is not one of"), ({"grad_accum": 0}, "=0 is")):
        with pytest.raises(ValueError, match=f"run coordinate .*{said}"):
            RunCoords("jax", "llama_small", "fp32", "synthetic", "4", "1x1", "single", 1, **bad)
    for framework in ("pytorch", "jax"):
        for mode in ("none", "selective", "full"):
            assert training_option_unavailable(framework, "llama_small", mode, 4) is None
        assert training_option_unavailable(framework, "resnet50", "none", 1) is None


# ------------------------------------------------------------------ PyTorch
TORCH_COMMON = """
import collections, json, sys, torch
from torch.utils._python_dispatch import TorchDispatchMode
from dlbench.coords import RunCoords
from dlbench.runners.base import Distributed, RunSpec
from dlbench.runners.pytorch import Runner
SEQ_LEN, STEPS = 16, 3

def train(batch, checkpointing="none", grad_accum=1, strategy="single", dist=Distributed(), precision="fp32"):
    scale = f"1x{dist.world_size}"
    coords = RunCoords("pytorch", "llama_small", precision, "synthetic", str(batch), scale, strategy,
                       activation_checkpointing=checkpointing, grad_accum=grad_accum, repeat=1)
    runner = Runner(RunSpec(coords, batch, 0, SEQ_LEN, 1, "cpu", dist=dist))
    runner.import_framework(); runner.build()
    return runner, [runner.step() for _ in range(STEPS)]

def state(runner):
    tensors = []
    for p in runner.model.parameters():
        moments = runner.optimizer.state[p]
        tensors += [p.detach(), moments["exp_avg"], moments["exp_avg_sq"]]
    return tensors

def difference(a, b):
    return max(((x - y).abs().max() / y.abs().max().clamp(min=1e-30)).item() for x, y in zip(state(a), state(b)))

def losses(handles):
    return [float(h) for h in handles]
"""

TORCH_SINGLE = (
    TORCH_COMMON
    + """
class OpCounts(TorchDispatchMode):
    def __init__(self):
        super().__init__(); self.counts = collections.Counter()
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

out = {}
reference, handles = train(4)
for name, batch, checkpointing, grad_accum in [("none", 4, "none", 1), ("full", 4, "full", 1),
                                               ("selective", 4, "selective", 1), ("accumulated", 2, "none", 2)]:
    runner, handles = (reference, handles) if name == "none" else train(batch, checkpointing, grad_accum)
    with OpCounts() as ops:  # one more forward and backward pass: what runs in it
        runner._loss().backward()
    info = runner.describe()
    out[name] = {"losses": losses(handles), "state": difference(runner, reference),
                 "ops": {op: ops.counts[op] for op in ("mm", "silu", "_scaled_dot_product_flash_attention_for_cpu")},
                 "header": [info["activation_checkpointing"].split(":")[0], info["grad_accum"]]}
coords = RunCoords("pytorch", "bert_base", "fp32", "synthetic", "2", "1x1", "single", grad_accum=2, repeat=1)
try:
    Runner(RunSpec(coords, 2, 0, 16, 1, "cpu")).build()
except ValueError as error:
    out["refused"] = str(error)
print("RESULT", json.dumps(out))
"""
)

TORCH_DDP_RANK = (
    TORCH_COMMON
    + """
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
rank, port = int(sys.argv[1]), int(sys.argv[2])
dist = Distributed(rank=rank, world_size=2, local_rank=rank, local_world_size=2, master_port=port)
coords = RunCoords("pytorch", "llama_small", "fp32", "synthetic", "1", "1x2", "ddp", grad_accum=2, repeat=1)
runner = Runner(RunSpec(coords, 1, 0, SEQ_LEN, 1, "cpu", dist=dist))
runner.import_framework(); runner.build()
synced, step = [], [0]  # (step, bucket) of every gradient all-reduce

def count(state, bucket):
    synced.append((step[0], bucket.index()))
    return default_hooks.allreduce_hook(None, bucket)

runner.model.register_comm_hook(None, count)
handles = []
for step[0] in range(STEPS):
    handles.append(runner.step())
mean = torch.stack(handles); torch.distributed.all_reduce(mean); mean /= 2  # the global batch's
runner.close()
if rank == 0:
    single, single_handles = train(4)
    out = {"losses": losses(mean), "single": losses(single_handles), "state": difference(runner, single),
           "synced": synced}
    print("RESULT", json.dumps(out))
"""
)


@pytest.fixture(scope="module")
def torch_single():
    return json.loads(equivalence.run_script(framework_python("pytorch"), TORCH_SINGLE))


@needs_torch
def test_pytorch_checkpointing_trains_as_without_and_recomputes_what_its_mode_says(torch_single):
    """Full and selective checkpointing: the very losses and state of the run without. In one
    more forward and backward pass, `full` runs each block's SiLU, attention and matmuls
    twice (6 of its 7: the recomputation stops early, before `down`, whose output the backward
    pass does not need; 4 blocks, 24), `selective` its SiLU only (kept: matmuls, attention)."""
    for mode in ("full", "selective"):
        assert_trains_as(torch_single[mode], torch_single["none"], [mode, 1])
    ops = {mode: torch_single[mode]["ops"] for mode in ("none", "full", "selective")}
    attention = "_scaled_dot_product_flash_attention_for_cpu"
    assert ops["full"] == {"mm": ops["none"]["mm"] + 24, "silu": 8, attention: 8}, ops
    assert ops["selective"] == {"mm": ops["none"]["mm"], "silu": 8, attention: 4}, ops
    assert ops["none"]["silu"] == 4 and ops["none"][attention] == 4


@needs_torch
def test_pytorch_two_micro_batches_of_two_train_as_one_batch_of_four(torch_single):
    assert_trains_as(torch_single["accumulated"], torch_single["none"], ["none", 2])


@needs_torch
def test_pytorch_refuses_accumulation_for_a_workload_without_it(torch_single):
    assert torch_single["refused"] == training_option_unavailable("pytorch", "bert_base", "none", 2)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_ranks(code: str, *args: str) -> dict:
    """`code` on two gloo ranks (argv: rank, port, `args`); what rank 0 printed after RESULT."""
    port = str(_free_port())
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", **SHARED_CORES_ENV, "HOME": "/tmp"}
    python = str(framework_python("pytorch"))
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    ranks = [
        subprocess.Popen([python, "-c", code, str(rank), port, *args], cwd=REPO, env=env, **pipes) for rank in (0, 1)
    ]
    outputs = [rank.communicate(timeout=600) for rank in ranks]
    for rank, (_, stderr) in zip(ranks, outputs, strict=True):
        assert rank.returncode == 0, stderr[-4000:]
    return json.loads(next(x for x in outputs[0][0].splitlines() if x.startswith("RESULT "))[len("RESULT ") :])


@needs_torch
def test_pytorch_ddp_accumulates_locally_and_all_reduces_once_a_step():
    """DDP on two gloo ranks, batch 1 × 2 micro-batches each: the single device's run of the
    global batch of 4 (losses, parameters, moments), every gradient bucket all-reduced once a
    step (no_sync on the first micro-batch: without it, twice)."""
    result = _two_ranks(TORCH_DDP_RANK)
    assert result["losses"] == pytest.approx(result["single"], rel=LOSS_REL)
    assert result["state"] <= STATE_REL
    synced = [tuple(entry) for entry in result["synced"]]
    assert synced and len(set(synced)) == len(synced), synced  # no bucket twice in a step
    assert {step for step, _ in synced} == {0, 1, 2}


TORCH_FSDP_AMP_RANK = (
    TORCH_COMMON
    + """
from dlbench.runners.pytorch import collectives
rank, port, strategy = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dist = Distributed(rank=rank, world_size=2, local_rank=rank, local_world_size=2, master_port=port)
with collectives.counted(torch.distributed) as moved:  # fsdp_tp: both ranks read the node's 4
    runner, handles = train(2, strategy=strategy, dist=dist, precision="amp")
mean = torch.stack(handles); torch.distributed.all_reduce(mean); mean /= 2
sharded = state(runner)
whole = [t.full_tensor() for t in sharded]
info = runner.describe()
runner.close()
if rank == 0:
    single, single_handles = train(4, precision="amp")
    def apart(tensors, reference):
        return max(((x - y).abs().max() / y.abs().max()).item() for x, y in zip(tensors, state(reference)))
    out = {"losses": losses(mean), "single": losses(single_handles), "state": apart(whole, single),
           "dtypes": sorted({str(t.dtype) for t in sharded}), "moved": {k: v // STEPS for k, v in moved.items()},
           "precision": info["mixed_precision"], "compute_dtype": info["compute_dtype"],
           "single_precision": single.describe()["mixed_precision"]}
    print("RESULT", json.dumps(out))
"""
)


@needs_torch
@pytest.mark.parametrize("strategy", ["fsdp", "fsdp_tp"])
def test_pytorch_fsdp_amp_computes_in_the_sharding_as_torchtitan_does(strategy):
    """amp under FSDP2: MixedPrecisionPolicy(bfloat16 parameters, float32 reduction), no
    autocast. It all-gathers bfloat16 (2 bytes a parameter: forward every unit, backward the
    blocks again, the root stays gathered), reduce-scatters float32 gradients (4 bytes), keeps
    float32 shards and moments, and trains as the single device's autocast step of the same
    global batch within bfloat16's rounding (AMP_LOSS_REL, AMP_STATE_REL)."""
    result = _two_ranks(TORCH_FSDP_AMP_RANK, strategy)
    assert result["precision"] == {
        "name": "fsdp MixedPrecisionPolicy", "param_dtype": "bfloat16", "reduce_dtype": "float32",
        "output_dtype": None, "cast_forward_inputs": True, "sharded_param_dtype": "float32",
    }  # fmt: skip
    assert result["compute_dtype"] == "bfloat16" and result["dtypes"] == ["torch.float32"]
    assert result["single_precision"] == {"name": "torch.autocast", "dtype": "bfloat16"}
    if strategy == "fsdp":  # fsdp_tp at 1x2 shards over a data axis of one rank
        parameters, blocks = llm.parameter_count("llama_small"), 4 * llm.block_parameters(llm.shape("llama_small"))
        assert result["moved"] == {"all_gather": 2 * (parameters + blocks), "reduce_scatter": 4 * parameters}
    assert result["losses"] == pytest.approx(result["single"], rel=AMP_LOSS_REL)
    assert result["state"] <= AMP_STATE_REL
    assert result["losses"] != result["single"]  # bfloat16 rounds differently from autocast's float32 residual


# ---------------------------------------------------------------------- JAX
JAX_RUNS = """
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import json, jax, numpy as np
from dlbench.coords import RunCoords
from dlbench.runners.base import RunSpec
from dlbench.runners.jax import Runner

def train(batch, checkpointing="none", grad_accum=1, strategy="single", devices=1):
    coords = RunCoords("jax", "llama_small", "fp32", "synthetic", str(batch), f"1x{devices}", strategy,
                       activation_checkpointing=checkpointing, grad_accum=grad_accum, repeat=1)
    runner = Runner(RunSpec(coords, batch, 0, 16, 2, "cpu", local_devices=devices))
    runner.import_framework(); runner.build()
    losses = [runner.step() for _ in range(3)]
    cost = runner.step_fn.cost_analysis()
    info = runner.describe()
    return {"losses": [float(x) for x in losses], "state": jax.device_get(runner.state),
            "flops": (cost[0] if isinstance(cost, list) else cost)["flops"],
            "header": [info["activation_checkpointing"].split(":")[0], info["grad_accum"]]}

def difference(a, b):
    pairs = zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True)
    return max(float(np.abs(x - y).max() / max(np.abs(y).max(), 1e-30)) for x, y in pairs)

runs = {"none": train(4), "full": train(4, "full"), "selective": train(4, "selective"),
        "accumulated": train(2, grad_accum=2), "sharded": train(1, grad_accum=2, strategy="sharded", devices=2)}
reference = runs["none"]["state"]
for run in runs.values():
    run["state"] = difference(run["state"], reference)
print("RESULT", json.dumps(runs))
"""


@pytest.fixture(scope="module")
def jax_runs():
    return json.loads(equivalence.run_script(framework_python("jax"), JAX_RUNS))


@needs_jax
def test_jax_checkpointing_trains_as_without_and_recomputes_in_the_backward_pass(jax_runs):
    """nn.remat of each block: the losses and state of the run without; the compiled step's
    FLOPs grow by the blocks' forward pass under `full` (about 10 % here) and by the attention
    scores only under `selective` (under 1 %: projections and attention output kept)."""
    plain = jax_runs["none"]
    for mode in ("full", "selective"):
        assert_trains_as(jax_runs[mode], plain, [mode, 1])
    assert jax_runs["full"]["flops"] > 1.05 * plain["flops"]
    assert plain["flops"] < jax_runs["selective"]["flops"] < 1.01 * plain["flops"]


@needs_jax
@pytest.mark.parametrize("run", ["accumulated", "sharded"])
def test_jax_micro_batches_train_as_one_batch(jax_runs, run):
    """Two micro-batches of 2 on one device, or of 1 on each of two devices (`sharded`): the
    single device's batch of 4, within float32 rounding."""
    assert_trains_as(jax_runs[run], jax_runs["none"], ["none", 2])
