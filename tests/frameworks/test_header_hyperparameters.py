"""The step-log header's framework.optimizer is read back from each framework's live objects
(dlbench.runners._hyperparameters): for every framework, the record of a default build equals
what its optimizer holds, and a setting changed where the workload builds the optimizer shows
in the record. Each framework's runner, in its own environment, at tiny sizes (a tiny BERT,
AlexNet at 32-64 px, a one-block Llama): a few seconds a framework."""

import json
import textwrap

import pytest

from dlbench import llm, recipe
from tests.conftest import framework_python
from tests.frameworks.bert_tiny import TINY_BERT
from tests.frameworks.equivalence import run_script

# What every script starts with: tiny sizes before any runner module reads them, and `record`,
# which builds a runner and returns it with its header's framework.optimizer (worker._header).
PRELUDE = """
import json, sys
from dlbench import llm, recipe
recipe.BERT_BASE.update(json.loads(sys.argv[1]))
llm.SHAPES["llama_small"] = llm.LlamaShape(1, 64, 2, 1, 128, 256, False, 64)
import importlib
from dlbench.coords import RunCoords
from dlbench.launch import worker
from dlbench.protocol import RunProtocol
from dlbench.runners.base import RunSpec

def record(framework, model, size=0, seq_len=0):
    coords = RunCoords(framework, model, "fp32", "synthetic", "2", "1x1", "single", 1)
    spec = RunSpec(coords, 2, size, seq_len, 1, "cpu", seed=7)
    runner = importlib.import_module(f"dlbench.runners.{framework}").Runner(spec)
    runner.import_framework()
    runner.build()
    header = worker._header(spec, RunProtocol("caict2020", 1, 1, "mean"), runner, "now", None)
    return runner, header.framework

out = {}
"""

# Per framework: `out` gets the default build's record and what its optimizer holds, named as
# the record names it ("live"), the record of a build with one setting changed where the
# workload reads it ("changed"), and where a CPU can build it, the record of the loss scaler
# that float16 runs on a GPU get ("scaling") beside what that scaler holds.
SCRIPTS = {
    "pytorch": """
        runner, framework = record("pytorch", "bert_base", seq_len=16)
        group = runner.optimizer.param_groups[0]
        out["default"], out["seed"] = framework["optimizer"], framework["seed"]
        out["live"] = {"name": type(runner.optimizer).__name__.lower(), "learning_rate": group["lr"],
                       "betas": list(group["betas"]), "epsilon": group["eps"], "weight_decay": group["weight_decay"]}
        from dlbench.runners.pytorch import workloads
        workloads.ADAM_EPSILON = 3e-7
        out["changed"] = record("pytorch", "bert_base", seq_len=16)[1]["optimizer"]
        llm.WARMUP_STEPS = 10
        runner, framework = record("pytorch", "llama_small", seq_len=8)
        out["llm"], out["llm_first_rate"] = framework["optimizer"], runner.optimizer.param_groups[0]["lr"]
        import torch
        from dlbench.runners.pytorch import training_record
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=7)  # CUDA fp16's, on the CPU
        out["scaling"] = training_record(runner.optimizer, None, scaler)["loss_scaling"]
        out["scaling_live"] = {"scale": scaler.get_scale(), "growth_interval": scaler.get_growth_interval()}
    """,
    "tensorflow": """
        runner, framework = record("tensorflow", "alexnet", size=32)
        out["default"], out["seed"] = framework["optimizer"], framework["seed"]
        sgd = runner.optimizer
        out["live"] = {"name": "sgd", "learning_rate": sgd.learning_rate, "momentum": sgd.momentum}
        from dlbench.runners.tensorflow import models
        models.ADAM_EPSILON = 3e-7
        runner, framework = record("tensorflow", "bert_base", seq_len=16)
        out["changed"] = framework["optimizer"]
        out["changed_live"] = runner.optimizer.get_config()["epsilon"]
        import keras, tensorflow as tf
        from dlbench.runners.tensorflow import optim
        scaled = keras.mixed_precision.LossScaleOptimizer(runner.optimizer, dynamic_growth_steps=7)
        scaled.build([tf.Variable(tf.zeros(2))])  # what BERT's float16 training builds on a GPU
        out["scaling"] = optim.training_record(scaled)["loss_scaling"]
        out["scaling_live"] = {"scale": float(scaled.dynamic_scale.numpy()), "growth_interval": 7}
    """,
    "mxnet": """
        runner, framework = record("mxnet", "alexnet", size=64)
        out["default"], out["seed"] = framework["optimizer"], framework["seed"]
        sgd = runner.trainer._optimizer
        out["live"] = {"name": type(sgd).__name__.lower(), "learning_rate": sgd.learning_rate,
                       "momentum": sgd.momentum, "weight_decay": sgd.wd}
        from dlbench.runners.mxnet import workloads
        workloads.ADAM_EPSILON = 3e-7
        runner, framework = record("mxnet", "bert_base", seq_len=16)
        out["changed"], out["changed_live"] = framework["optimizer"], runner.trainer._optimizer.epsilon
        from mxnet.contrib.amp.loss_scaler import LossScaler
        from dlbench.runners.mxnet import training_record
        runner.trainer._amp_loss_scaler = scaler = LossScaler()  # what amp.init_trainer gives float16 runs
        out["scaling"] = training_record(runner.trainer)["loss_scaling"]
        out["scaling_live"] = {"scale": scaler.loss_scale, "growth_interval": scaler._scale_seq_len}
    """,
    "paddle": """
        runner, framework = record("paddle", "bert_base", seq_len=16)
        out["default"], out["seed"] = framework["optimizer"], framework["seed"]
        adam = runner.trainer.optimizer
        out["live"] = {"name": type(adam).__name__.lower(), "learning_rate": adam.get_lr(),
                       "betas": [adam._beta1, adam._beta2], "epsilon": adam._epsilon}
        from dlbench.runners.paddle import train
        train.ADAM_EPSILON = 3e-7
        out["changed"] = record("paddle", "bert_base", seq_len=16)[1]["optimizer"]
    """,
    "jax": """
        import flax.linen as nn, numpy as np, optax
        from dlbench.runners.jax import models
        class Pooled(nn.Module):  # a stand-in CNN: its optimizer is the point, not its model
            @nn.compact
            def __call__(self, x, train=False):
                return nn.Dense(models.CLASSES)(x.mean(axis=(1, 2)))
        models.build = lambda name, dtype: Pooled()
        runner, framework = record("jax", "alexnet", size=8)
        out["default"], out["seed"] = framework["optimizer"], framework["seed"]
        held = optax.tree_utils.tree_get(runner.state, "hyperparams")
        out["live"] = {"name": "sgd", **{k: float(str(np.asarray(v))) for k, v in held.items()}}
        llm.WARMUP_STEPS, llm.ADAMW_EPSILON = 10, 3e-7
        runner, framework = record("jax", "llama_small", seq_len=8)
        out["changed"] = out["llm"] = framework["optimizer"]
        out["llm_first_rate"] = float(optax.tree_utils.tree_get(runner.state, "hyperparams")["learning_rate"])
    """,
}


def header_records(framework: str) -> dict:
    code = PRELUDE + textwrap.dedent(SCRIPTS[framework]) + "print('RESULT', json.dumps(out))\n"
    return json.loads(
        run_script(framework_python(framework), code, json.dumps(TINY_BERT), env={"JAX_PLATFORMS": "cpu"})
    )


@pytest.mark.parametrize("framework", sorted(SCRIPTS))
def test_the_header_records_what_the_live_optimizer_holds(framework):
    if not framework_python(framework).exists():
        pytest.skip(f"the {framework} environment is not built")
    out = header_records(framework)
    default, changed = out["default"], out["changed"]
    # the default build: the record is what the optimizer holds, at the settings it is built with
    for key, held in out["live"].items():
        assert default[key] == (pytest.approx(held, rel=1e-6) if isinstance(held, float) else held), key
    assert default["schedule"] == "constant" and default["loss_scaling"] is None and out["seed"] == 7
    if default["name"] in ("sgd", "momentum"):
        assert default["momentum"] == recipe.SGD_MOMENTUM
        assert default["learning_rate"] == pytest.approx(recipe.SGD_LR_PER_256 * 2 / 256)
    else:  # BERT's Adam: Google's epsilon in every framework
        assert default["epsilon"] == recipe.ADAM_EPSILON and default["learning_rate"] == recipe.ADAM_LR
    # a changed setting: the record follows it (and equals what the optimizer then holds)
    if framework == "jax":
        assert changed["epsilon"] == 3e-7 and changed["betas"] == list(llm.ADAMW_BETAS)
    else:
        assert changed["epsilon"] == 3e-7 and out.get("changed_live", 3e-7) == pytest.approx(3e-7)
    if "llm" in out:
        # the warm-up as the live schedule holds it: 10 steps from peak / 10 to the peak
        assert out["llm"]["schedule"] == {
            "name": "linear",
            "start_learning_rate": pytest.approx(llm.ADAMW_LR / 10),
            "end_learning_rate": pytest.approx(llm.ADAMW_LR),
            "steps": 9,
        }
        assert out["llm"]["learning_rate"] == pytest.approx(llm.ADAMW_LR)
        assert out["llm_first_rate"] == pytest.approx(llm.ADAMW_LR / 10)
        assert out["llm"]["name"] == "adamw" and out["llm"]["weight_decay"] == pytest.approx(llm.ADAMW_WEIGHT_DECAY)
    if "scaling" in out:  # the float16 runs' dynamic loss scaling, as its scaler holds it
        assert out["scaling"]["dynamic"] is True
        assert {key: out["scaling"][key] for key in out["scaling_live"]} == out["scaling_live"]
