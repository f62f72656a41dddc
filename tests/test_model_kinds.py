"""A model kind is one descriptor (dlbench.model_kinds): a new kind, declared with its model and
one workload in a plug-in alone (docs/plugins.md, "Adding a model kind"), goes through planning,
the FLOPs count, the report's words and the architecture scan, and gets an MFU without PyTorch."""

import json
import os
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from dlbench import labels
from dlbench.analysis import derive, tables
from dlbench.analysis.columns import col
from dlbench.model_kinds import KINDS, ModelKind
from dlbench.models import CATALOGUE, kind_of, register_model
from dlbench.planning import cost, grid
from dlbench.report import sections
from tests.conftest import REPO
from tests.test_architecture import kind_branches, runner_internals

PLUGIN = '''
"""A toy kind: a two-layer MLP over vectors, its model and its one workload."""

from dlbench.model_kinds import ModelKind, register_kind
from dlbench.models import register_model
from dlbench.runners.base import Runner as BaseRunner
from dlbench.runners.base import Workload, Workloads
from dlbench.runners.plugin import Capabilities


def mlp_flops(model, entry, width):
    """Per vector: 6 x the multiply-adds of `layers` width x width matmuls."""
    return 6.0 * entry["layers"] * width * width


register_kind(
    ModelKind("mlp", "vectors", "seq_len", mlp_flops, "6 x layers x width^2", assumed_mfu=0.5,
              size_text="vectors of {size} features")
)
register_model("mlp_small", {"kind": "mlp", "default_seq_len": 64, "layers": 2, "title": "MLP small"})
WORKLOADS = Workloads("toykind")


@WORKLOADS.registers
class Mlp(Workload):
    kind = "mlp"
    models = ("mlp_small",)


CAPABILITIES = Capabilities(label="Toy kind", colour="#17becf", models=WORKLOADS.models, precisions=("fp32",))


class Runner(BaseRunner):
    def build(self):
        self.workload = WORKLOADS(self.spec.coords.model)()

    def step(self, batch=None):
        return 0.0
'''
CONFIG = {
    "grid": {
        "frameworks": ["toykind"],
        "models": ["mlp_small"],
        "precision": ["fp32"],
        "data": ["synthetic"],
        "batch_per_device": [8],
        "scales": ["1x1"],
        "strategies": {},
    },
    "protocol": {"preset": "mlperf", "warmup_steps": 1, "measured_steps": 3, "repeats": 2},
    "run": {"device": "cpu", "threads": 2, "peak_tflops": 10.0},
}
FLOPS = 6.0 * 2 * 64 * 64  # per vector at the default width


@pytest.fixture
def toy_kind(tmp_path, monkeypatch):
    (tmp_path / "toykind.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.setenv("DLBENCH_FRAMEWORK_PATH", str(tmp_path))
    yield tmp_path
    KINDS.pop("mlp", None)
    CATALOGUE.pop("mlp_small", None)
    sys.modules.pop("dlbench_plugins.toykind", None)


def test_the_catalogue_kinds_are_descriptors():
    assert {entry["kind"] for entry in CATALOGUE.values()} == set(KINDS)
    assert [kind_of(m).sample_unit for m in ("resnet50", "bert_base", "llama3_1b")] == ["images", "sequences", "tokens"]
    assert grid.planned_sizes({}, "inception_v3") == (299, 0) and grid.planned_sizes({}, "bert_base") == (0, 128)
    assert grid.planned_sizes({"seq_len": 512}, "llama3_1b") == (0, 512)
    with pytest.raises(ValueError, match="size_field"):
        ModelKind("bad", "things", "width", lambda m, e, s: 1.0, "", assumed_mfu=0.1)
    with pytest.raises(ValueError, match="not a registered kind"):
        register_model("mixtral_small", {"kind": "moe", "default_seq_len": 2048})


def test_a_new_kind_goes_through_planning_flops_report_and_the_architecture_scan(toy_kind):
    experiment = grid.expand(CONFIG)  # planning loads the plug-in, which brings its kind and model
    assert [r.model for r in experiment.runs] == ["mlp_small", "mlp_small"] and not experiment.unavailable
    assert grid.planned_sizes(CONFIG["run"], "mlp_small") == (0, 64)
    assert cost.train_flops_per_sample("mlp_small", 0, 64) == FLOPS
    cell = experiment.runs[0]
    step_s, how = cost.flops_step(cell, (0, 64), cost.Device.of(CONFIG["run"]))
    assert step_s == pytest.approx(FLOPS * 8 / (10e12 * 0.5)) and "50% assumed MFU" in how
    assert labels.unit("mlp_small") == "vectors/s"
    assert sections._input_sizes({"mlp_small": (0, 64)}) == ["MLP small: vectors of 64 features"]
    plugin = toy_kind / "toykind.py"
    assert kind_branches([plugin]) == [] and runner_internals([plugin]) == []


def test_a_new_kinds_flops_and_mfu_need_no_framework(toy_kind):
    out = toy_kind / "flops" / "mlp_small.json"
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['flops', '--model', 'mlp_small', '--seq-len', '64', '--out', {str(out)!r}]\n"
        "runpy.run_module('dlbench.analysis.flops', run_name='__main__')\n"
        "assert not {'torch', 'jax', 'tensorflow'} & set(sys.modules), 'a framework was imported'\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, check=True)
    counted = json.loads(out.read_text())
    assert counted == {
        "model": "mlp_small",
        "image_size": None,
        "seq_len": 64,
        "train_flops_per_sample": FLOPS,
        "counted_with": "6 x layers x width^2",
    }
    cells = pd.DataFrame({col.model: ["mlp_small"], col.throughput: [1e9], col.precision: ["fp32"], col.devices: [1]})
    cells = tables.add_flops(cells, derive.flops_counts([out]), peak_tflops=10.0)
    assert cells[col.mfu].iloc[0] == pytest.approx(1e9 * FLOPS / 1e12 / 10.0)
