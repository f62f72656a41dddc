"""`batch: max` end to end (issue 16): the batch search runs as its own job, with the
resources of a 1-device run, and the cell's run trains at the batch it found."""

import json

import pytest
import yaml

from dlbench.steplog import read_steplog
from tests.conftest import REPO, framework_python
from tests.tiny_pipeline import snakemake

PLUGINS = REPO / "tests" / "plugins"
GRID = {
    "grid": {
        "frameworks": ["toy"],
        "models": ["resnet50"],
        "precision": ["fp32"],
        "data": ["synthetic"],
        "batch_per_device": ["max"],
        "scales": ["1x1"],
        "strategies": {"toy": ["replicas"]},
        "exclude": [],
        "only": [],
    },
    "protocol": {"preset": "mlperf", "warmup_steps": 1, "measured_steps": 2, "repeats": 1},
    "run": {"image_size": 8, "threads": 1},
    "batch_max": {"limit": 4},
}
RUN = "results/runs/toy/resnet50/fp32/synthetic/bsmax/1x1/single/rep1"


def test_a_max_cell_searches_then_trains_at_the_batch_found(tmp_path, monkeypatch):
    if not framework_python("pytorch").exists():
        pytest.skip("the pytorch environment (the toy's numpy) is not built")
    (tmp_path / "config").mkdir()
    (tmp_path / "config/config.yaml").write_text((REPO / "config/config.yaml").read_text())
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(GRID))
    monkeypatch.setenv("DLBENCH_FRAMEWORK_PATH", str(PLUGINS))
    result = snakemake(tmp_path, "--cores", "2", f"{RUN}/launch.json")  # an option ends --configfile
    assert result.returncode == 0, result.stderr[-4000:]
    found = json.loads((tmp_path / "results/batch_max/cpu/toy/resnet50/fp32.json").read_text())
    assert found["batch"] == 4 and [p["batch"] for p in found["probes"]] == [1, 2, 4]
    log = read_steplog(tmp_path / RUN / "rank0.steps.jsonl")
    assert log.valid and log.status == "ok" and log.header["batch"] == 4
    assert {s["samples"] for s in log.steps} == {4}
