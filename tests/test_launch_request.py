"""The launch contract: LaunchRequest ⇄ argv, and the launchers that start and place ranks."""

from __future__ import annotations

import dataclasses
import shlex

import pytest

from dlbench.launch import TIME_LIMIT_GRACE_S, LaunchRequest, slurm
from dlbench.launch.launchers import LAUNCHERS, LocalLauncher, SrunLauncher, launcher_for, this_rank
from dlbench.launch.request import LAUNCHER_NAMES
from dlbench.protocol import RunProtocol
from tests.conftest import make_coords


def minimal_request(**options) -> LaunchRequest:
    return LaunchRequest(make_coords(), RunProtocol("caict2020", 5, 20, "mean"), "results/runs/x/rep1", **options)


EVERY_OPTION = {
    "image_size": 64,
    "seq_len": 128,
    "max_batch_file": "results/batch_max/cpu/pytorch/resnet50/fp32.json",
    "threads": 8,
    "device": "cuda",
    "compile": True,
    "time_limit": 900,
    "progress_every": 0,
    "memory_cap_mb": 700,
    "allocator": "jemalloc",
    "env_lock": "/repo/envs/pytorch.txt",
    "launcher": "srun",
    "data_dir": "/data/imagenet tf",
    "data_workers": 3,
    "container": "podman",
    "images": "/images",
    "python_env": "site",
    "options": "sync=loss",
    "task": "prescreen",
    "sizes": "65536,1048576",
    "gpu_request": "gres",
    "gpu_type": "h100",
    "exclusive": True,
    "cpu_bind": "cores",
    "distribution": "block:cyclic",
}


@pytest.mark.parametrize("options", [{}, EVERY_OPTION], ids=["defaults", "every option"])
def test_round_trip(options):
    request = minimal_request(**options)
    assert LaunchRequest.from_argv(request.to_argv()) == request
    # through the shell, as the training rule's command line
    assert LaunchRequest.from_argv(shlex.split(shlex.join(request.to_argv()))) == request


def test_every_option_is_on_the_command_line():
    """A field added to LaunchRequest or RunProtocol reaches the parser and the argv (none is forgotten)."""
    argv = minimal_request(**EVERY_OPTION).to_argv()
    carried = [*dataclasses.fields(LaunchRequest), *dataclasses.fields(RunProtocol)]
    for field in carried:
        if field.name not in ("coords", "protocol"):
            assert "--" + field.name.replace("_", "-") in argv, field.name
    assert set(EVERY_OPTION) == {f.name for f in dataclasses.fields(LaunchRequest)} - {"coords", "protocol", "run_dir"}


def test_the_protocol_travels_as_one_typed_value():
    request = minimal_request()
    back = LaunchRequest.from_argv(request.to_argv())
    assert back.protocol == RunProtocol("caict2020", 5, 20, "mean") and isinstance(back.protocol.warmup_steps, int)
    with pytest.raises(SystemExit):
        LaunchRequest.from_argv([*request.to_argv(), "--statistic", "mode"])  # argparse: the last one counts


def test_defaults_stay_off_the_command_line():
    argv = minimal_request().to_argv()
    assert "--compile" not in argv and "--max-batch-file" not in argv and "--launcher" not in argv
    assert argv[argv.index("--repeat") + 1] == "1" and argv[argv.index("--warmup-steps") + 1] == "5"


def test_from_argv_refuses_bad_values(capsys):
    argv = minimal_request().to_argv()
    with pytest.raises(SystemExit):
        LaunchRequest.from_argv([a if a != "1x1" else "one" for a in argv])
    assert "scale" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        LaunchRequest.from_argv([*argv, "--launcher", "mpirun"])
    with pytest.raises(SystemExit):
        LaunchRequest.from_argv(argv[2:])  # no --framework


def test_one_grace_after_the_time_limit():
    assert minimal_request(time_limit=60).stop_after_s == 60 + TIME_LIMIT_GRACE_S
    assert minimal_request().stop_after_s is None
    # Slurm's limit leaves room for the launcher's grace (and start-up, teardown)
    assert slurm.runtime_minutes(60) * 60 >= 60 + TIME_LIMIT_GRACE_S + 60


def test_launchers_are_registered_by_the_requests_choices():
    assert set(LAUNCHERS) == set(LAUNCHER_NAMES)
    assert isinstance(launcher_for(minimal_request()), LocalLauncher)
    assert isinstance(launcher_for(minimal_request(launcher="srun")), SrunLauncher)


def test_local_rank_environment_is_read_back_as_the_ranks_placement(monkeypatch):
    """`rank_environment` is what a launcher starts a rank with; `placement` reads it back."""
    monkeypatch.delenv("DLBENCH_SRUN", raising=False)
    request = minimal_request()
    launcher = LocalLauncher(dataclasses.replace(request, coords=make_coords(scale="1x2", strategy="ddp")))
    places = [this_rank(launcher.rank_environment(rank, 29999)) for rank in range(2)]
    assert [(p.rank, p.world_size, p.local_world_size, p.master_port) for p in places] == [
        (0, 2, 2, 29999),
        (1, 2, 2, 29999),
    ]
    assert this_rank({"PATH": "/bin"}) is None


def test_every_task_runs_the_same_request(monkeypatch):
    monkeypatch.delenv("SLURM_STEP_ID", raising=False)
    request = minimal_request(launcher="srun", threads=4)
    local = LocalLauncher(request).command()
    assert local[1:3] == ["-m", "dlbench.launch"] and LaunchRequest.from_argv(local[3:]) == request
    srun = SrunLauncher(request).command()
    assert srun[0] == "srun" and srun[-len(local) :] == local and "--cpus-per-task=4" in srun
