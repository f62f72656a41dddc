"""A framework in one file (tests/plugins/toy.py), found through DLBENCH_FRAMEWORK_PATH, runs
through the whole pipeline: plan → train → aggregate → report. Nothing outside its file
names it; its capabilities are the only thing the pipeline reads."""

import dataclasses
import os
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from dlbench.runners import Capabilities, Strategy
from tests.conftest import REPO, framework_python
from tests.tiny_pipeline import snakemake

PLUGINS = REPO / "tests" / "plugins"
TOY = {
    "grid": {
        "frameworks": ["toy"],
        "models": ["resnet50"],
        "precision": ["fp32"],
        "data": ["synthetic"],
        "batch_per_device": [4],
        "scales": ["1x1", "1x2"],
        "strategies": {"toy": ["replicas"]},
        "exclude": [],
        "only": [],
    },
    "protocol": {"preset": "mlperf", "warmup_steps": 1, "measured_steps": 3, "repeats": 1},
    "run": {"image_size": 32, "threads": 1, "progress_every": 1},
}


def test_capabilities_refuse_an_unknown_field_and_a_bad_value():
    with pytest.raises(TypeError, match="modles"):
        Capabilities(label="x", colour="#000000", models=(), modles=("vgg16",), precisions=("fp32",))
    with pytest.raises(ValueError, match="Capabilities.models: unknown model 'vgg61'"):
        Capabilities(label="x", colour="#000000", models=("vgg61",), precisions=("fp32",))
    with pytest.raises(TypeError, match="layuot"):
        Strategy("ring", "a ring", layuot="per_node")
    with pytest.raises(ValueError, match="Strategy\\('ring'\\).layout"):
        Strategy("ring", "a ring", layout="per_node")
    caps = Capabilities(label="x", colour="#000000", models=("vgg16",), precisions=("fp32",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        caps.models = ()


def test_a_path_plugin_is_registered_without_importing_numpy():
    code = (
        "import sys; from dlbench.runners import capabilities, framework_names, layout\n"
        "assert 'toy' in framework_names(); c = capabilities('toy')\n"
        "assert c.label == 'Toy (numpy)' and layout('toy', 'replicas', '1x2').step_logs == 2\n"
        "assert 'numpy' not in sys.modules"
    )
    env = {**os.environ, "DLBENCH_FRAMEWORK_PATH": str(PLUGINS)}
    subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, check=True)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    if not framework_python("pytorch").exists():
        pytest.skip("the pytorch environment (the toy's numpy) is not built")
    workdir = tmp_path_factory.mktemp("toy")
    (workdir / "config").mkdir()
    (workdir / "config/config.yaml").write_text((REPO / "config/config.yaml").read_text())
    (workdir / "tiny.yaml").write_text(yaml.safe_dump(TOY))
    old = os.environ.get("DLBENCH_FRAMEWORK_PATH")
    os.environ["DLBENCH_FRAMEWORK_PATH"] = str(PLUGINS)
    try:
        result = snakemake(workdir)
    finally:
        if old is None:
            del os.environ["DLBENCH_FRAMEWORK_PATH"]
        else:
            os.environ["DLBENCH_FRAMEWORK_PATH"] = old
    assert result.returncode == 0, result.stderr[-4000:]
    return workdir


@pytest.mark.slow
def test_the_toy_framework_runs_through_the_pipeline(finished):
    cells = pd.read_csv(finished / "results/tables/cells.csv", dtype={"batch": str})
    assert set(cells["framework"]) == {"toy"} and (cells["status"] == "ok").all(), cells["reason"]
    assert sorted(cells["strategy"]) == ["replicas", "single"] and (cells["throughput"] > 0).all()
    two = next((finished / "results/runs/toy/resnet50/fp32/synthetic/bs4/1x2/replicas").rglob("launch.json"))
    assert (two.parent / "rank1.steps.jsonl").exists()  # the plug-in's layout: a process per device
    html = (finished / "results/report/index.html").read_text()
    assert "independent numpy replicas, no communication" in html  # the strategy's description
    assert (finished / "results/figures/throughput.png").stat().st_size > 0
