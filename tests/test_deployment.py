"""A training job's software by deployment method (dlbench/deployment.py)."""

import os
from types import SimpleNamespace

import pytest
from snakemake.settings.types import DeploymentMethod, RerunTrigger

from dlbench.deployment import Deployment, DeploymentError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = {"run": {"launcher": "local", "data_workers": 0, "threads": 4}, "grid": {}}
PYTORCH = SimpleNamespace(framework="pytorch", model="resnet50", scale="1x2", strategy="ddp")


def deployment(tmp_path, methods=(), triggers=(RerunTrigger.MTIME,)):
    return Deployment(CONFIG, REPO, set(methods), lambda: set(triggers), environ={"DLBENCH_VENVS": str(tmp_path)})


def test_a_built_venv_is_no_input_when_only_mtime_triggers_a_rebuild(tmp_path):
    assert [str(f) for f in deployment(tmp_path).software_inputs(PYTORCH)] == [
        str(tmp_path / "pytorch" / ".dlbench-env")
    ]  # not built yet
    (tmp_path / "pytorch").mkdir()
    (tmp_path / "pytorch" / ".dlbench-env").touch()
    assert deployment(tmp_path).software_inputs(PYTORCH) == []
    # other triggers (code, params) could rebuild it: Snakemake must see the edge
    everything = deployment(tmp_path, triggers=RerunTrigger.all())
    assert len(everything.software_inputs(PYTORCH)) == 1
    # a lock newer than the stamp rebuilds it
    lock = os.path.join(REPO, "envs", "pytorch.txt")
    os.utime(tmp_path / "pytorch" / ".dlbench-env", (0, os.path.getmtime(lock) - 10))
    assert len(deployment(tmp_path).software_inputs(PYTORCH)) == 1


def test_command_parts_by_deployment(tmp_path):
    venv = deployment(tmp_path)
    assert venv.python(PYTORCH) == str(tmp_path / "pytorch" / "bin" / "python")
    assert venv.env_lock(PYTORCH) == os.path.join(REPO, "envs", "pytorch.txt")
    assert venv.command(PYTORCH, "--x 1").endswith(f"PYTHONPATH={REPO} {venv.python(PYTORCH)} -m dlbench.launch --x 1")
    assert venv.container(PYTORCH) is None
    assert deployment(tmp_path, [DeploymentMethod.CONDA]).python(PYTORCH) == "python"
    assert venv.data_workers(PYTORCH) == 2  # 4 threads over the node's 2 DDP processes


def test_srun_inside_an_image_is_refused(tmp_path):
    config = {**CONFIG, "run": {**CONFIG["run"], "launcher": "srun"}}
    with pytest.raises(DeploymentError, match="srun does not work inside an Apptainer image"):
        Deployment(config, REPO, {DeploymentMethod.APPTAINER}, environ={})
