"""Job shapes: a run's Slurm resources from its scale and strategy (dlbench/planning/jobs.py)."""

import os
import re

import pytest

from dlbench.planning import jobs, snakemake_api
from tests.conftest import make_coords

RUN = {"device": "cpu", "mem_mb": 8000, "time_limit_s": 600, "threads": 8}


def test_runs_of_one_scale_and_layout_share_a_rule():
    runs = [
        make_coords(framework="pytorch", scale="1x1", strategy="single"),
        make_coords(framework="pytorch", scale="2x4", strategy="ddp"),
        make_coords(framework="tensorflow", scale="2x4", strategy="multi_worker_mirrored"),
        make_coords(framework="pytorch", scale="2x4", strategy="ddp", repeat=2),
    ]
    shapes = jobs.shapes(runs)
    assert [s.rule_name for s in shapes] == ["train_1x1", "train_2x4"]
    assert shapes[jobs.JobShape("2x4", 4)] == ["ddp", "multi_worker_mirrored"]


def test_one_task_per_rank_process_and_the_node_cpus_shared():
    res = jobs.JobShape("2x4", 4).resources(RUN)
    assert res["nodes"] == 2 and res["tasks"] == 8 and res["cpus_per_task"] == 2
    assert res["mpi"] == "srun" and res["slurm_extra"] == "--ntasks-per-node=4"
    assert res["mem_mb"] == 8000 and res["runtime"] == 15  # (600 s + 300 s margin) / 60
    assert "gpu" not in res


def test_a_process_per_node_gets_all_the_node_cpus_and_devices():
    shape = jobs.JobShape("2x4", 1)
    assert shape.rule_name == "train_2x4_p1"
    res = shape.resources({**RUN, "device": "cuda"})
    assert res["tasks"] == 2 and res["cpus_per_task"] == 8
    assert res["slurm_extra"] == "--ntasks-per-node=1 --gpus-per-node=4"


def test_one_task_driving_several_devices_is_not_marked_mpi():
    # snakemake-executor-plugin-slurm refuses `mpi` with one task (seen on the local cluster).
    res = jobs.JobShape("1x2", 1).resources({**RUN, "device": "cuda"})
    assert res["tasks"] == 1 and "mpi" not in res
    assert res["slurm_extra"] == "--gpus-per-node=2"


def test_single_device_cuda_asks_one_gpu_and_no_srun():
    res = jobs.JobShape("1x1", 1).resources({**RUN, "device": "cuda"})
    assert res["gpu"] == 1 and res["tasks"] == 1
    assert "mpi" not in res and "slurm_extra" not in res


def test_one_strategy_name_with_two_layouts_is_refused(monkeypatch):
    from dlbench import runners

    per_node = {("tensorflow", "shared"): 1, ("pytorch", "shared"): 2}
    monkeypatch.setattr(
        runners, "layout", lambda fw, strategy, scale: runners.Layout(per_node[(fw, strategy)], 2, 1, 2)
    )
    runs = [make_coords(framework=fw, scale="1x2", strategy="shared") for fw in ("tensorflow", "pytorch")]
    with pytest.raises(ValueError, match="'shared' at scale 1x2"):
        jobs.shapes(runs)


def test_constraint_matches_exactly_the_values():
    import re

    pattern = jobs.constraint(["1x2", "2x2"])
    assert re.fullmatch(pattern, "2x2") and not re.fullmatch(pattern, "12x2")


def test_recorded_runs_and_the_runs_slurm_ended(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    done = make_coords(framework="pytorch", scale="2x4", strategy="ddp", repeat=1)
    ended = make_coords(framework="pytorch", scale="2x4", strategy="ddp", repeat=2)
    untouched = make_coords(framework="pytorch", scale="2x4", strategy="ddp", repeat=3)
    for run, names in ((done, ["launch.json", "slurm.json"]), (ended, ["slurm.json"])):
        os.makedirs(run.run_dir)
        for name in names:
            open(os.path.join(run.run_dir, name), "w").close()
    recorded = jobs.recorded_runs()
    assert recorded["launch.json"] == {done.run_dir}
    assert recorded["slurm.json"] == {done.run_dir, ended.run_dir}
    constraints = jobs.ended_run_constraints([done, ended, untouched], recorded)
    assert constraints["repeat"] == "2" and constraints["strategy"] == "ddp"
    # the training options at their defaults: an empty match Snakemake takes (an empty
    # constraint it reads as none, which asks for one character at least)
    assert constraints["training"] == "(?:)" and re.fullmatch(constraints["training"], "")
    assert jobs.ended_run_constraints([done, untouched], recorded) is None
    assert jobs.recorded_runs("no/such/dir") == {"launch.json": set(), "slurm.json": set()}


def test_known_signature_tells_snakemake_the_parameters_once(monkeypatch):
    import inspect

    from snakemake.common import get_function_params

    function = snakemake_api.known_signature(lambda wildcards, attempt: attempt)
    monkeypatch.setattr(inspect, "signature", None)  # Snakemake must not inspect it again
    assert list(get_function_params(function)) == ["wildcards", "attempt"]
    assert function(None, attempt=2) == 2
