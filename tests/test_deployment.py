"""A training job's software by deployment method (dlbench/planning/deployment.py)."""

import os
from types import SimpleNamespace

import pytest
from snakemake.settings.types import DeploymentMethod, RerunTrigger

from dlbench.planning.deployment import Deployment, DeploymentError, conda_file
from dlbench.protocol import RunProtocol
from dlbench.runners import env_name

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


RUN_SETTINGS = {
    "launcher": "local", "data_workers": 0, "threads": 4, "image_size": 64, "seq_len": 0, "device": "cpu",
    "compile": False, "time_limit_s": 900, "progress_every": 5, "memory_cap_mb": 0,
    "allocator": "tcmalloc",
}  # fmt: skip
PROTOCOL = RunProtocol("caict2020", warmup_steps=5, measured_steps=20, statistic="mean")


@pytest.mark.parametrize("repo", [REPO, "/tmp/a repo's copy"])
def test_a_command_template_fills_in_to_each_runs_command(tmp_path, repo):
    """train.smk's params.command template (Snakemake fills in the wildcards) is the command
    the function builds, quoting included (a repository path with a space and a quote)."""
    from snakemake.io import apply_wildcards

    from dlbench.planning.snakemake_api import Placeholders, RunWildcards

    config = {"run": RUN_SETTINGS, "grid": {}}
    lock = os.path.join(REPO, "containers", "images.lock")
    environ = {"DLBENCH_VENVS": str(tmp_path / "venvs"), "DLBENCH_IMAGES_LOCK": lock}
    deploy = Deployment(config, repo, set(), environ=environ)
    # a template for the models that share resnet50's planned sizes (run.image_size, else 224)
    placeholders = Placeholders(sizes_of="resnet50")
    template = deploy.command(placeholders, deploy.launch_arguments(placeholders, PROTOCOL, None))
    assert "{framework}" in template and "{repeat}" in template and "{model}" in template
    for framework, strategy in (("pytorch", "ddp"), ("mxnet", "dist_sync")):
        values = dict(framework=framework, model="resnet50", precision="fp32", data="synthetic", batch="8")
        run = RunWildcards(values, scale="1x2", strategy=strategy, repeat="3")
        command = deploy.command(run, deploy.launch_arguments(run, PROTOCOL, None))
        assert apply_wildcards(template, run) == command
        assert f"--run-dir results/runs/{framework}/resnet50/fp32/synthetic/bs8/1x2/{strategy}/rep3" in command
    assert ("'/tmp/a repo'\"'\"'s copy/envs/mxnet.txt'" in command) == (repo != REPO)


def test_a_command_class_template_fills_in_to_real_data_and_batch_search_commands(tmp_path):
    """snakemake_api.CommandClasses: with the class's coordinates fixed (framework, model,
    data, strategy, scale, and batch when it is searched), the template filled in is the
    command of every run of the class: dataset, input workers and batch-search file included."""
    from snakemake.io import apply_wildcards

    from dlbench.planning.snakemake_api import Placeholders, RunWildcards

    config = {"run": RUN_SETTINGS, "grid": {}, "data": {"images": {"source": "generated"}}}
    deploy = Deployment(config, REPO, set(), environ={"DLBENCH_VENVS": str(tmp_path / "venvs")})
    deploy.data_dir = lambda wildcards: f"results/data/{wildcards.framework}-{wildcards.model}"
    fixed = dict(framework="pytorch", model="resnet50", data="real", strategy="ddp", scale="1x2")
    for batch, search in (("8", None), ("max", "results/batch_max/cpu/pytorch/resnet50/{precision}.json")):
        cls = Placeholders(**fixed, **({"batch": "max"} if search else {}))
        template = deploy.command(cls, deploy.launch_arguments(cls, PROTOCOL, search))
        assert "{repeat}" in template and "{framework}" not in template
        for precision, repeat in (("fp32", "1"), ("amp", "2")):
            run = RunWildcards(fixed, precision=precision, batch=batch, repeat=repeat)
            searched = search.format(precision=precision) if search else None
            command = deploy.command(run, deploy.launch_arguments(run, PROTOCOL, searched))
            assert apply_wildcards(template, run) == command
            assert "--data-dir results/data/pytorch-resnet50 --data-workers 2" in command
            searched_flag = f"--max-batch-file results/batch_max/cpu/pytorch/resnet50/{precision}.json"
            assert (searched_flag in command) == bool(search)


def test_stale_environments_are_rebuilt_and_every_job_still_planned(tmp_path):
    """Environments older than their locks: the dry run plans their rebuild and every job after
    it. (An ancient() input that is being rebuilt made Snakemake leave out every job after it.)"""
    import subprocess
    import sys

    import yaml

    default = yaml.safe_load(open(os.path.join(REPO, "config/config.yaml")))["grid"]
    venvs = tmp_path / "venvs"
    for name in default["frameworks"]:
        (venvs / name).mkdir(parents=True)
        (venvs / name / ".dlbench-env").touch()
        os.utime(venvs / name / ".dlbench-env", (946684800, 946684800))  # 2000: older than any lock
    work = tmp_path / "work"
    (work / "config").mkdir(parents=True)
    (work / "config/config.yaml").write_text(open(os.path.join(REPO, "config/config.yaml")).read())
    command = [sys.executable, "-m", "snakemake", "-n", "-q", "rules", "-s", os.path.join(REPO, "Snakefile")]
    result = subprocess.run(
        [*command, "-d", str(work), "--rerun-triggers", "mtime"],
        env={**os.environ, "DLBENCH_VENVS": str(venvs)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    counts = dict(line.split() for line in output.splitlines() if len(line.split()) == 2)
    assert counts["framework_env"] == str(len(default["frameworks"])) and counts["report_document"] == "1", output
    assert int(counts["train_1x1"]) > 0 and counts["model_flops"] == str(len(default["models"]))


def test_command_classes_build_one_template_per_class_and_fall_back_on_a_mismatch():
    from types import SimpleNamespace as Wildcards

    from dlbench.planning.snakemake_api import CommandClasses

    calls = []

    def command(w):  # a template-able command, counting its calls
        calls.append(dict(w))
        run = f"{w['framework']}/{w['precision']}/bs{w['batch']}/rep{w['repeat']}"
        return f"train --data-dir /data/{w['model']} --run {run}"

    runs = [
        Wildcards(framework="mxnet", model=m, precision="fp32", data="real", batch=b, scale="1x1", strategy="single",
                  training="", repeat=r)
        for m in ("resnet50", "vgg16") for b in ("1", "64") for r in ("1", "2", "3")
    ]  # fmt: skip
    classes = CommandClasses(command)
    assert [classes(run) for run in runs] == [command(vars(run)) for run in runs]
    assert len(classes.templates) == 2 and all(classes.templates.values())  # one per model
    assert len(calls) == 2 * 2 + len(runs)  # per class: its template and the check; then the direct calls
    # a command that does not follow its wildcards (a value read elsewhere) keeps the function
    other = CommandClasses(lambda w: f"train --seed {len(str(w['repeat']))}")
    assert other(runs[0]) == "train --seed 1" and list(other.templates.values()) == [None]


@pytest.mark.parametrize(
    "frameworks, device, pattern",
    [
        (["pytorch", "mxnet"], "cpu", "{framework}.yaml"),
        (["pytorch", "tensorflow", "mxnet"], "cuda", "{framework}-cuda.yaml"),
        (["pytorch", "oneflow"], "cuda", None),  # oneflow has no CUDA environment of its own
    ],
)
def test_a_training_rules_conda_file_is_a_pattern_where_one_can_name_every_env(frameworks, device, pattern):
    runs = [SimpleNamespace(framework=fw) for fw in frameworks]
    conda = conda_file(runs, device)
    if pattern:
        assert conda == "../../envs/" + pattern
    else:
        assert callable(conda)
    for fw in frameworks:
        name = conda.format(framework=fw) if pattern else conda(SimpleNamespace(framework=fw))
        expected = f"{env_name(fw, device)}.yaml"
        assert os.path.basename(name) == expected
        assert os.path.isfile(os.path.join(REPO, "workflow", "rules", name)) or fw == "oneflow"
