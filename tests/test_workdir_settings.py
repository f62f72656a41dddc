"""What defines a measurement (dlbench/planning/measured.py), what the tables are made from
(dlbench/planning/asked.py), and both through a dry run under the Slurm profile: no framework,
no training, headers written as the worker writes them."""

import copy
import hashlib
import json
import os
import re
import subprocess
import sys

import yaml
from snakemake.settings.types import RerunTrigger

from dlbench.coords import RunCoords
from dlbench.planning import asked, measured
from dlbench.planning.config import checked_grid
from dlbench.planning.deployment import Deployment
from dlbench.runners import capabilities, run_layout
from tests.conftest import REPO

DEFAULT = yaml.safe_load((REPO / "config/config.yaml").read_text())
DDP = RunCoords("pytorch", "resnet50", "fp32", "synthetic", "8", "1x2", "ddp", 1)
LLAMA = RunCoords("jax", "llama_small", "fp32", "real", "2", "1x1", "single", 1)
FRAMEWORKS = DEFAULT["grid"]["frameworks"]
LOCK_SHA = {fw: hashlib.sha256((REPO / f"envs/{fw}.txt").read_bytes()).hexdigest() for fw in FRAMEWORKS}


def config(protocol: dict | None = None, **run) -> dict:
    resolved = copy.deepcopy(DEFAULT)
    resolved["run"].update(run)
    resolved["protocol"].update(protocol or {})
    checked_grid(resolved)  # the schema's defaults filled in
    return resolved


def asker(resolved: dict, tmp_path) -> measured.Asked:
    deploy = Deployment(
        resolved, str(REPO), set(), lambda: {RerunTrigger.MTIME}, environ={"DLBENCH_VENVS": str(tmp_path)}
    )
    protocol = checked_grid(copy.deepcopy(resolved)).protocol
    return measured.Asked(resolved, deploy, protocol)


def header(run: RunCoords, **changes) -> dict:
    """A rank-0 header as the worker writes it for the default config (4 + 15 steps, 64 px, 64
    tokens, 2 threads per run), with `changes` on top."""
    values = {
        "type": "header",
        "run": run.as_dict(),
        "protocol": {"preset": "caict2020", "warmup_steps": 4, "measured_steps": 15, "statistic": "mean"},
        "image_size": 64,
        "seq_len": 0 if run.model == "resnet50" else 64,
        "threads": 2 // run_layout(run).tasks_per_node,
        "device": "cpu",
        "compile": False,
        "framework": {"name": run.framework, "options": capabilities(run.framework).option_values()},
        "provenance": {
            "env_lock": f"{run.framework}.txt",
            "env_lock_sha256": LOCK_SHA[run.framework],
            "container": None,
        },
    }
    return {**values, **changes}


def write(root, run: RunCoords, record: dict) -> None:
    path = root / run.run_dir
    path.mkdir(parents=True, exist_ok=True)
    (path / "rank0.steps.jsonl").write_text(json.dumps(record) + "\n")
    (path / "launch.json").write_text("{}\n")


def found(tmp_path, resolved, *records) -> dict:
    for run, record in records:
        write(tmp_path, run, record)
    return measured.differences([run for run, _ in records], asker(resolved, tmp_path), str(tmp_path))


def test_a_run_measured_as_asked_is_kept_and_a_differing_setting_is_named(tmp_path):
    default = config()
    assert found(tmp_path, default, (DDP, header(DDP)), (LLAMA, header(LLAMA))) == {}
    assert found(tmp_path, config({"measured_steps": 30}), (DDP, header(DDP))) == {
        ("protocol.measured_steps", "15", "30"): [DDP.run_dir]
    }
    # the size that matters per model kind: an LLM's image size is not compared
    assert set(found(tmp_path, config(image_size=32, seq_len=128), (DDP, header(DDP)), (LLAMA, header(LLAMA)))) == {
        ("run.image_size", "64", "32"),
        ("run.seq_len", "64", "128"),
    }
    assert set(found(tmp_path, config(threads=4), (DDP, header(DDP)))) == {("run.threads (per rank)", "1", "2")}


def test_options_environment_and_container_are_part_of_a_measurement(tmp_path):
    default = config()
    options = copy.deepcopy(default)
    options["framework_options"] = {"pytorch": {"dali": False}}
    assert set(found(tmp_path, options, (DDP, header(DDP)))) == {
        ("framework_options", '{"dali": true, "fp8_emulation": false}', '{"dali": false, "fp8_emulation": false}')
    }
    # A header from before an option was declared (PyTorch's fp8_emulation) ran at its default.
    older = header(DDP, framework={"name": "pytorch", "options": {"dali": True}})
    assert found(tmp_path, default, (DDP, older)) == {}
    other_lock = header(DDP, provenance={"env_lock": "pytorch.txt", "env_lock_sha256": "0" * 64, "container": None})
    ((setting, was, now),) = found(tmp_path, default, (DDP, other_lock))
    assert (setting, was) == ("environment lock", "pytorch.txt sha256 000000000000") and LOCK_SHA["pytorch"][:12] in now
    site = header(DDP, provenance={"env_lock": None, "env_lock_sha256": None, "container": None})
    assert set(found(tmp_path, default, (DDP, site))) == {("environment lock", "site environment", now)}
    podman = header(
        DDP, provenance={**header(DDP)["provenance"], "container": {"runtime": "podman", "digest": "sha256:1"}}
    )
    assert set(found(tmp_path, default, (DDP, podman))) == {("run.container", "podman", "none")}
    # The malloc a rank mapped (a header from before the field: the C library's).
    jemalloc = header(DDP, allocator={"name": "jemalloc", "library": "/usr/lib/libjemalloc.so.2"})
    assert set(found(tmp_path, default, (DDP, jemalloc))) == {("run.allocator", "jemalloc", "system")}
    assert found(tmp_path, config(allocator="jemalloc"), (DDP, jemalloc)) == {}
    assert set(found(tmp_path, config(allocator="jemalloc"), (DDP, header(DDP)))) == {
        ("run.allocator", "system", "jemalloc")
    }


def test_what_a_log_does_not_say_is_not_held_against_it(tmp_path):
    old = header(DDP)
    del old["protocol"], old["framework"]["options"], old["provenance"]  # written before these were recorded
    write(tmp_path, LLAMA.with_(repeat=2), header(LLAMA))
    (tmp_path / LLAMA.with_(repeat=2).run_dir / "rank0.steps.jsonl").unlink()  # its ranks never started
    assert found(tmp_path, config(), (DDP, old)) == {}
    assert measured.differences([LLAMA.with_(repeat=2)], asker(config(), tmp_path), str(tmp_path)) == {}


def test_the_refusal_names_the_setting_the_runs_and_what_to_do(tmp_path):
    runs = [DDP.with_(repeat=r) for r in range(1, 6)]
    differing = {("protocol.measured_steps", "15", "30"): [r.run_dir for r in runs]}
    message = measured.refusal(differing)
    assert message.startswith("5 run(s) of this grid were measured under other settings")
    assert f"measured 15, the config asks 30: 5 run(s): {runs[0].run_dir}" in message and "and 2 more" in message
    assert "--directory DIR" in message and "mv results/runs" in message and measured.refusal({}) == ""
    measured.write_refused(differing, str(tmp_path / "refused.txt"))
    lines = (tmp_path / "refused.txt").read_text().splitlines()
    assert lines[0] == f"{runs[0].run_dir}\tprotocol.measured_steps: 15 -> 30" and len(lines) == 5


def test_what_the_tables_are_made_from_moves_only_when_it_changes(tmp_path):
    path = tmp_path / "asked/tables.json"
    basis = asked.tables_basis(config(), ["a/launch.json"])
    assert asked.write_if_changed(path, basis) and not asked.write_if_changed(path, basis)
    os.utime(path, (1, 1))
    assert not asked.write_if_changed(path, asked.tables_basis(config(), ["a/launch.json"]))
    assert os.path.getmtime(path) == 1  # unchanged: its rules are not re-run
    assert asked.write_if_changed(path, asked.tables_basis(config(), ["a/launch.json", "b/launch.json"]))
    assert asked.flops_basis("resnet50", config(image_size=0)) == {"model": "resnet50", "image_size": 224}
    assert asked.flops_basis("llama_small", config(image_size=0)) == {"model": "llama_small", "seq_len": 64}


# What a finished default run leaves, oldest first (the rules' order).
PRODUCTS = (
    *(f"results/flops/{model}.json" for model in DEFAULT["grid"]["models"]),
    *(f"results/tables/{name}" for name in ("runs.csv", "cells.csv", "cells.md", "environment.json", "run_order.csv")),
    "results/campaign.json",
    *(f"results/figures/{name}.png" for name in ("throughput", "speedup", "real_vs_synthetic")),
    "results/tables/references.csv",
    "results/report/index.html",
)


def test_under_the_slurm_profile_a_new_grid_is_planned_and_a_new_protocol_refused(tmp_path):
    """A directory whose default grid (at one scale) is recorded and tabulated, as `snakemake
    --profile profiles/slurm` sees it: a grid with a scale more plans exactly its new runs and
    the tables again (Snakemake alone said "Nothing to be done"); another protocol is refused."""
    work, venvs = tmp_path / "work", tmp_path / "venvs"
    for env in FRAMEWORKS:  # built environments: stamps newer than their locks
        (venvs / env).mkdir(parents=True)
        (venvs / env / ".dlbench-env").touch()
    (work / "config").mkdir(parents=True)
    (work / "config/config.yaml").write_text(
        yaml.safe_dump({**DEFAULT, "grid": {**DEFAULT["grid"], "scales": ["1x1"]}})
    )
    for run in checked_grid(yaml.safe_load((work / "config/config.yaml").read_text())).runs:
        write(work, run, header(run))
    command = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work), "-n"]
    command += ["--profile", str(REPO / "profiles/slurm")]
    environ = {**os.environ, "DLBENCH_VENVS": str(venvs)}

    def dry(*args):
        done = subprocess.run([*command, *args], capture_output=True, text=True, timeout=300, env=environ)
        return done.returncode, done.stdout + done.stderr  # where the logger writes depends on the executor

    assert dry()[0] == 0  # writes what the tables are made from
    # All of it made a while ago, in the rules' order: environments, runs, what the tables are
    # made from (written by the first dry run), then the products.
    # (after the checkout's own inputs of these rules: the locks and the published references)
    inputs = [*(REPO / "envs").glob("*.txt"), *(REPO / "config/references").glob("*")]
    stamp = max(os.path.getmtime(path) for path in inputs) + 1
    made = [
        *venvs.glob("*/.dlbench-env"),
        *(work / "results/runs").rglob("*.*"),
        *(work / asked.ASKED_DIR).rglob("*.json"),
    ]
    for path in made:
        os.utime(path, (stamp, stamp))
    for i, product in enumerate(PRODUCTS, start=1):
        (work / product).parent.mkdir(parents=True, exist_ok=True)
        (work / product).write_text("made\n")
        os.utime(work / product, (stamp + i, stamp + i))
    code, said = dry()
    assert "Nothing to be done" in said, said[-3000:]
    code, said = dry("--config", "grid={scales: ['1x1', '1x2']}")
    planned = dict(re.findall(r"^(\w+)\s+(\d+)$", said, re.M))  # Snakemake's job stats
    new_runs = checked_grid(config() | {"grid": {**DEFAULT["grid"], "scales": ["1x2"]}}).runs
    assert code == 0 and "train_1x1" not in planned and planned["aggregate"] == "1", said[-3000:]
    assert sum(int(n) for job, n in planned.items() if job.startswith("train_")) == len(new_runs)
    code, said = dry("--config", "protocol={measured_steps: 30}")
    assert code != 0 and "protocol.measured_steps: measured 15, the config asks 30" in said, said[-3000:]
