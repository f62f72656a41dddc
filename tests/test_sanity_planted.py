"""A planted diverging run (#21): PyTorch trains ResNet-50 with its learning rate scaled by
DLBENCH_LR_SCALE=1e6 (the step-log header records the rate); its loss overflows, the run keeps
its throughput, and its cell is marked SUSPECT with the reason in the tables and the report."""

import json
import os
import subprocess

import pytest

from dlbench.analysis import tables
from dlbench.analysis.aggregate import cells_table, runs_table
from dlbench.coords import RunCoords
from dlbench.launch.request import LaunchRequest
from dlbench.protocol import RunProtocol
from dlbench.recipe import LR_SCALE_ENV, SGD_LR_PER_256
from dlbench.report import render
from tests.conftest import REPO, framework_python

pytestmark = [
    pytest.mark.slow,  # ~30 s on a quiet machine: one real training run
    pytest.mark.skipif(not framework_python("pytorch").exists(), reason="the PyTorch environment is not built"),
]

PROTOCOL = {"preset": "mlperf", "warmup_steps": 1, "measured_steps": 5, "repeats": 1, "statistic": "mean"}


def test_a_planted_diverging_run_is_marked_with_its_reason(tmp_path):
    coords = RunCoords.from_dict(
        {"framework": "pytorch", "model": "resnet50", "precision": "fp32", "data": "synthetic", "batch": "4"}
        | {"scale": "1x1", "strategy": "single", "repeat": 1}
    )
    request = LaunchRequest(
        coords=coords,
        protocol=RunProtocol.of(PROTOCOL),
        run_dir=str(tmp_path / coords.run_dir),
        image_size=32,
        progress_every=0,
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), LR_SCALE_ENV: "1e6"}
    command = [str(framework_python("pytorch")), "-m", "dlbench.launch", *request.to_argv()]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]

    header = json.loads((tmp_path / coords.run_dir / "rank0.steps.jsonl").read_text().splitlines()[0])
    assert header["framework"]["optimizer"]["learning_rate"] == pytest.approx(SGD_LR_PER_256 * 4 / 256 * 1e6)
    runs = runs_table([coords], tmp_path)
    assert runs.loc[0, "status"] == "ok" and runs.loc[0, "throughput"] > 0  # the number stays
    cells = cells_table(runs, "mean")
    cell = cells.iloc[0]
    assert cell["sanity"] == "suspect"
    assert cell["sanity_reason"].startswith("loss not finite from step ")
    assert tables.cell_text(cell).endswith(" SUSPECT")
    html = render(cells, runs, PROTOCOL, {})
    assert f"SUSPECT: {cell['sanity_reason']}" in html
