"""Adaptive repeats: a noisy cell gets more repeats than a quiet one, each stops for a stated
reason; the decision rule itself on planted repeat throughputs."""

import os

import pandas as pd
import pytest
import yaml

from dlbench import protocol
from dlbench.analysis import adaptive
from dlbench.planning import grid
from tests.conftest import REPO, framework_python
from tests.test_plugin_toy import TOY
from tests.tiny_pipeline import snakemake

AUTO = {"preset": "mlperf", "repeats": "auto", "statistic": "mean"}
SETTINGS = {"target": 0.1, "min_repeats": 3, "max_repeats": 5}


def decide(throughputs, statuses=None) -> dict:
    proto = protocol.resolve({**AUTO, "adaptive": SETTINGS})
    statuses = statuses or ["ok"] * len(throughputs)
    return adaptive.decide(pd.DataFrame({"status": statuses, "throughput": throughputs}), proto)


def test_the_decision_rule():
    assert decide([100, 100.5]) | {"reason": ""} == {
        "repeats": 2,
        "more": True,
        "half_width": pytest.approx(0.0025, rel=0.01),
        "reason": "",
    }
    quiet = decide([100, 101, 99])
    assert not quiet["more"] and quiet["reason"].startswith("target met after 3 repeats")
    noisy = decide([100, 150, 60])
    assert noisy["more"] and noisy["reason"].startswith("3 repeats: 95% CI half-width")
    capped = decide([100, 150, 60, 120, 70])
    assert not capped["more"] and capped["reason"].startswith("maximum of 5 repeats reached")
    failed = decide([100, float("nan"), 60], ["ok", "oom", "ok"])
    assert not failed["more"] and failed["reason"] == "stopped after 3 repeats: a repeat ended oom"


def test_auto_plans_the_minimum_and_fixed_repeats_are_unchanged():
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    config["grid"] |= {"frameworks": ["pytorch"], "models": ["resnet50"], "scales": ["1x1"], "data": ["synthetic"]}
    config["grid"]["batch_per_device"] = [8]
    config["protocol"] = {**AUTO, "adaptive": SETTINGS}
    assert [r.repeat for r in grid.expand(config).runs] == [1, 2, 3]
    config["protocol"] = {"preset": "mlperf", "repeats": 2}
    assert [r.repeat for r in grid.expand(config).runs] == [1, 2]
    with pytest.raises(ValueError, match="protocol.adaptive: min_repeats 6 > max_repeats 5"):
        protocol.resolve({**AUTO, "adaptive": {**SETTINGS, "min_repeats": 6}})


# The toy plug-in's grid (1x1 and 1x2), repeats: auto.
TOY_AUTO = {**TOY, "protocol": {**AUTO, "warmup_steps": 1, "measured_steps": 3, "adaptive": SETTINGS}}


@pytest.mark.slow
def test_a_noisy_cell_gets_more_repeats_than_a_quiet_one(tmp_path, monkeypatch):
    """The toy plug-in, its 1x2 steps made to jitter per run (DLBENCH_TOY_SLEEP), through the
    pipeline with repeats: auto (~30 s)."""
    if not framework_python("pytorch").exists():
        pytest.skip("the pytorch environment (the toy's numpy) is not built")
    (tmp_path / "config").mkdir()
    (tmp_path / "config/config.yaml").write_text((REPO / "config/config.yaml").read_text())
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(TOY_AUTO))
    monkeypatch.setenv("DLBENCH_FRAMEWORK_PATH", str(REPO / "tests/plugins"))
    monkeypatch.setenv("DLBENCH_TOY_SLEEP", "1x1=0.05:0,1x2=0.01:0.3")
    result = snakemake(tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    cells = pd.read_csv(tmp_path / "results/tables/cells.csv").set_index("scale")
    quiet, noisy = cells.loc["1x1"], cells.loc["1x2"]
    assert quiet["repeats"] == 3 and quiet["repeats_stop"].startswith("target met after 3 repeats")
    assert noisy["repeats"] == 5 and noisy["repeats_stop"].startswith("maximum of 5 repeats reached")
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv")
    assert (runs["scale"] == "1x2").sum() == 5 and (runs["status"] == "ok").all()
    assert os.path.exists(tmp_path / "results/repeats/toy/resnet50/fp32/synthetic/bs4/1x2/replicas/after5.json")
    # Everything decided: the same command again has nothing to do.
    again = snakemake(tmp_path, "-n")
    assert "Nothing to be done" in again.stdout + again.stderr
