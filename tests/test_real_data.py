"""Real data end to end: the generated ImageNet-layout dataset converted to TFRecord and
RecordIO by the pipeline's own rules, read by TensorFlow's and MXNet's native input pipelines,
compared with synthetic data in the tables and the report. PyTorch's ImageFolder is the tiny
pipeline's (tests/test_end_to_end.py), which trains on it at one and two devices."""

import json
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from dlbench import labels
from dlbench.runners import capabilities
from tests.conftest import REPO, framework_python

FRAMEWORKS = ["tensorflow", "mxnet"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not all(framework_python(fw).exists() for fw in FRAMEWORKS), reason="the framework environments are not built"
    ),
    pytest.mark.skipif(
        not all("real" in capabilities(fw).data for fw in FRAMEWORKS), reason="a runner has no real-data pipeline"
    ),
]

GRID = {
    "grid": {
        "frameworks": FRAMEWORKS,
        "models": ["alexnet"],
        "data": ["synthetic", "real"],
        "batch_per_device": [4],
        "scales": ["1x1"],
    },
    "protocol": {"preset": "mlperf", "warmup_steps": 1, "measured_steps": 3, "repeats": 1},
    "run": {"image_size": 64, "threads": 2, "progress_every": 0},
    "data": {"images": {"count": 48, "classes": 4, "image_size": 40, "shards": 2}},
}


def snakemake(workdir, *args, timeout=1200):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir)]
    cmd += [*args, "--profile", str(REPO / "profiles/local"), "--configfile", str(workdir / "grid.yaml")]
    return subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("real")
    (workdir / "config").mkdir()
    (workdir / "config/config.yaml").write_text((REPO / "config/config.yaml").read_text())
    (workdir / "grid.yaml").write_text(yaml.safe_dump(GRID))
    result = snakemake(workdir)
    assert result.returncode == 0, result.stderr[-4000:]
    return workdir


def test_every_framework_trained_on_its_own_format(finished):
    cells = pd.read_csv(finished / "results/tables/cells.csv", dtype={"batch": str})
    real = cells[cells["data"] == "real"].set_index("framework")
    assert (real["status"] == "ok").all(), real["reason"].to_dict()
    assert (real["real_vs_synthetic"] > 0).all()
    assert ((real["data_wait_fraction"] >= 0) & (real["data_wait_fraction"] < 1)).all()
    formats = {"tensorflow": "tfrecord", "mxnet": "recordio"}
    for fw in FRAMEWORKS:
        log = next((finished / f"results/runs/{fw}/alexnet/fp32/real").rglob("rank0.steps.jsonl"))
        lines = [json.loads(line) for line in log.read_text().splitlines()]
        header, steps = lines[0], [x for x in lines if x["type"] == "step"]
        assert header["framework"]["input_pipeline"], fw
        assert all("data_wait" in s and s["data_wait"] >= 0 for s in steps), fw
        manifest = json.loads(next((finished / f"results/data/{formats[fw]}").rglob("manifest.json")).read_text())
        assert formats[fw] in json.dumps(manifest).lower(), fw


def test_report_compares_synthetic_and_real_per_framework(finished):
    html = (finished / "results/report/index.html").read_text()
    section = html[html.index("Synthetic vs real data") :]
    for fw in FRAMEWORKS:
        assert labels.framework_label(fw) in section  # the framework's name for people
    assert (finished / "results/figures/real_vs_synthetic.png").stat().st_size > 5000
