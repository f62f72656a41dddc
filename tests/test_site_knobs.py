"""Site knobs (run.gpu_request, gpu_type, exclusive, cpu_bind, distribution; docs/slurm.md):
the sbatch line the Slurm executor plugin writes from a training rule's resources, the srun
line the launcher runs, the schema's messages, and what the header and environment table say."""

from __future__ import annotations

import re

import pytest

from dlbench.analysis import environment
from dlbench.launch import slurm
from dlbench.planning.config import checked_grid
from dlbench.planning.jobs import JobShape, submit_environment
from dlbench.planning.schema import schema_defaults
from dlbench.protocol import RunProtocol
from tests.conftest import make_coords

plugin = pytest.importorskip("snakemake_executor_plugin_slurm.submit_string")
gres = pytest.importorskip("snakemake_executor_plugin_slurm.utils")


class Resources(dict):
    __getattr__ = dict.get


class Job:
    """What the plugin reads of a Snakemake job: its resources and threads."""

    def __init__(self, resources: dict):
        self.resources, self.threads = Resources(resources), 1


def sbatch(scale: str, per_node: int, **run) -> str:
    """The plugin's sbatch line for a training rule of this shape under `run`."""
    job = Job(JobShape(scale, per_node).resources({**schema_defaults("run"), **run}))
    params = {"run_uuid": "u", "slurm_logfile": "l", "comment_str": "c", "account": "", "partition": "", "workdir": ""}
    return plugin.get_submit_command(job, params) + gres.set_gres_string(job)


def srun(scale: str, per_node: int, device: str = "cuda", **knobs) -> str:
    nodes = int(scale.split("x")[0])
    knobs = {**{k: schema_defaults("run")[k] for k in ("gpu_request", "gpu_type", "cpu_bind", "distribution")}, **knobs}
    return " ".join(slurm.srun_command(nodes, per_node, 1, device, ["python"], False, knobs=knobs))


@pytest.mark.parametrize(
    "request_, gpu_type, sbatch_flags, srun_flag",
    [
        ("gpus-per-node", "", ["--gpus-per-node=4"], "--gpus-per-node=4"),
        ("gpus-per-node", "h100", ["--gpus-per-node=h100:4"], "--gpus-per-node=h100:4"),
        ("gres", "", ["--gres=gpu:4"], "--gres=gpu:4"),
        ("gres", "h100", ["--gres=gpu:h100:4"], "--gres=gpu:h100:4"),
        ("gpus", "", ["--gpus=8"], "--gpus=8"),
        ("gpus", "h100", ["--gpus=h100:8"], "--gpus=h100:8"),
    ],
)
def test_each_gpu_request_reaches_sbatch_and_srun(request_, gpu_type, sbatch_flags, srun_flag):
    line = sbatch("2x4", 4, device="cuda", gpu_request=request_, gpu_type=gpu_type)
    for flag in sbatch_flags:
        assert flag in line.split(), line
    # Slurm refuses --ntasks-per-gpu beside --ntasks-per-node: the plugin must not add it.
    assert "--ntasks-per-gpu" not in line and "--ntasks-per-node=4" in line and "--nodes=2" in line
    assert srun_flag in srun("2x4", 4, gpu_request=request_, gpu_type=gpu_type).split()
    # one request only, on both sides
    assert sum(f.startswith(("--gpus", "--gres")) for f in line.split()) == 1
    assert srun("2x4", 4, device="cpu", gpu_request=request_, gpu_type=gpu_type).count("gpu") == 0


def test_one_device_asks_one_gpu_of_the_type():
    assert "--gpus=h100:1" in sbatch("1x1", 1, device="cuda", gpu_type="h100").split()
    assert "--gres=gpu:1" in sbatch("1x1", 1, device="cuda", gpu_request="gres").split()


def test_exclusive_asks_whole_nodes_and_their_memory():
    shared, whole = sbatch("2x2", 2), sbatch("2x2", 2, exclusive=True)
    assert "--mem 4000" in shared and "--exclusive" not in shared
    assert "--exclusive" in whole.split() and "--mem" not in whole.split()
    # --mem=0 (the node's memory) through sbatch's own variable: the plugin refuses it in slurm_extra
    assert submit_environment({"exclusive": True}) == {"SBATCH_MEM_PER_NODE": "0"}
    assert submit_environment({"exclusive": False}) == {}


def test_cpu_bind_and_distribution_reach_srun():
    line = srun("2x2", 2, cpu_bind="cores", distribution="block:cyclic").split()
    assert "--cpu-bind=cores" in line and "--distribution=block:cyclic" in line
    default = srun("2x2", 2).split()
    assert "--distribution=block" in default and not any(f.startswith("--cpu-bind") for f in default)


GRID = {
    "grid": {"frameworks": ["pytorch"], "models": ["resnet50"], "batch_per_device": [1], "scales": ["1x1"]},
    "protocol": {"preset": "mlperf"},
}


@pytest.mark.parametrize(
    "run, message",
    [
        ({"gpu_request": "gpu"}, "run.gpu_request: 'gpu' is not one of"),
        ({"gpu_type": "h100 pcie"}, "run.gpu_type: 'h100 pcie' is not allowed"),
        # 'yes' would be read as YAML reads it (true), as --config's strings are: a word that is no boolean
        ({"exclusive": "sometimes"}, "run.exclusive: 'sometimes' is not of type 'boolean'"),
        ({"cpu_bind": "core"}, "run.cpu_bind: 'core' is not one of"),
        ({"distribution": "blocks"}, "run.distribution: 'blocks' is not allowed"),
    ],
)
def test_bad_knobs_are_one_message_naming_the_key(run, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(")):
        checked_grid({**GRID, "run": run})


def test_the_header_and_the_environment_table_say_what_was_asked(monkeypatch):
    from dlbench import provenance
    from dlbench.launch.request import LaunchRequest

    request = LaunchRequest(
        make_coords(scale="2x2", strategy="ddp"), RunProtocol("mlperf", 1, 1, "mean"), "r", launcher="srun",
        exclusive=True,
        cpu_bind="cores", gpu_request="gres", gpu_type="h100",
    )  # fmt: skip
    monkeypatch.setenv("SLURM_CPU_BIND", "quiet,cores")
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    collected = provenance.collect(slurm_request=request.slurm_request())
    assert collected["slurm_request"] == {
        "gpu_request": "gres", "gpu_type": "h100", "exclusive": True, "cpu_bind": "cores", "distribution": "block",
    }  # fmt: skip
    assert collected["slurm"]["slurm_cpu_bind"] == "quiet,cores"
    header = {"run": make_coords().as_dict(), "node": "n1", "provenance": collected}
    facts = dict(environment.summarize(None, [header])["facts"])
    asked = facts["Slurm request (site knobs)"]
    assert "GPUs by gres (type h100)" in asked and "--exclusive, --mem=0" in asked and "--cpu-bind=cores" in asked
    assert "srun applied: cpu_bind quiet,cores" in asked
    local = LaunchRequest(make_coords(), RunProtocol("mlperf", 1, 1, "mean"), "r")
    assert local.slurm_request() is None


def test_a_dry_run_shows_the_knobs_and_the_prescreen(tmp_path):
    """`snakemake -n -p`: each job's resources (what sbatch gets) and the launcher's command
    line (what srun gets), the prescreen's jobs before the grid's."""
    import subprocess
    import sys

    import yaml

    from tests.conftest import REPO

    (tmp_path / "config").mkdir()
    run = {"launcher": "srun", "device": "cuda", "gpu_request": "gres", "gpu_type": "h100", "exclusive": True}
    config = {**GRID, "grid": {**GRID["grid"], "scales": ["1x1", "2x2"], "strategies": {"pytorch": ["ddp"]}}}
    (tmp_path / "config/config.yaml").write_text(yaml.safe_dump({**config, "run": {**run, "cpu_bind": "cores"}}))
    cmd = [sys.executable, "-m", "snakemake", "-n", "-p", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path)]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    # Every training job waits for the prescreen through one file that names each shape's record.
    assert "rule prescreen_2x2:" in out and "/.dlbench-env, results/prescreen/measured.json" in out
    assert re.search(r"rule prescreened:\n\s+input: results/prescreen/2x2/launch.json\n", out)
    assert "gres=gpu:h100:2" in out and "gres=gpu:h100:1" in out and "tasks_per_gpu=0" in out
    assert "slurm_extra=--ntasks-per-node=2 --exclusive" in out and "mem_mb=0" in out
    assert "--task prescreen --sizes 65536,1048576,8388608" in out
    assert "--gpu-request gres --gpu-type h100 --exclusive --cpu-bind cores" in out
