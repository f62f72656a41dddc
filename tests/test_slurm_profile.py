"""profiles/slurm: the site's partition, account and QOS come from DLBENCH_SLURM_PARTITION,
DLBENCH_SLURM_ACCOUNT and DLBENCH_SLURM_QOS, read when Snakemake loads the profile (YTE), and
reach sbatch through the Slurm executor plugin (docs/slurm.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

profiles = pytest.importorskip("snakemake.profiles")
resources = pytest.importorskip("snakemake.resources")
plugin = pytest.importorskip("snakemake_executor_plugin_slurm.submit_string")

PROFILE = Path(__file__).resolve().parent.parent / "profiles" / "slurm" / "config.yaml"
SITE = ("DLBENCH_SLURM_PARTITION", "DLBENCH_SLURM_ACCOUNT", "DLBENCH_SLURM_QOS")


def default_resources(monkeypatch, **environ) -> dict:
    """The profile's default-resources as a job sees them: rendered by Snakemake's own profile
    parser (YTE), parsed as `--default-resources`, each value evaluated as for a rule."""
    for name in SITE:
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with open(PROFILE) as stream:
        args = profiles.ProfileConfigFileParser().parse(stream)["default-resources"]
    parsed = resources.Resources.parse(args, allow_expressions=True)
    context = {"wildcards": {}, "input": [], "attempt": 1, "threads": 1, "rulename": "r", "async_run": None}
    return {name: (r.evaluate(**context) if r.is_evaluable() else r).value for name, r in parsed.items()}


class Job:
    """What the plugin reads of a Snakemake job: its resources and threads."""

    def __init__(self, values: dict):
        self.resources = type("Resources", (dict,), {"__getattr__": dict.get})(values)
        self.threads = 1


def test_unset_the_profile_names_no_partition_account_or_qos(monkeypatch):
    assert default_resources(monkeypatch) == {"runtime": 60, "mem_mb": 4000}


def test_each_variable_sets_its_resource_as_a_string(monkeypatch):
    # `all` is a common partition name and a Python builtin; an account may be all digits
    given = default_resources(
        monkeypatch, DLBENCH_SLURM_PARTITION="all", DLBENCH_SLURM_ACCOUNT="123456", DLBENCH_SLURM_QOS="normal"
    )
    site = {"slurm_partition": "all", "slurm_account": "123456", "qos": "normal"}
    assert given == {"runtime": 60, "mem_mb": 4000, **site}
    only_qos = default_resources(monkeypatch, DLBENCH_SLURM_QOS="high-prio")
    assert only_qos == {"runtime": 60, "mem_mb": 4000, "qos": "high-prio"}


def test_the_qos_reaches_sbatch_beside_a_training_rules_own_slurm_extra(monkeypatch):
    given = default_resources(monkeypatch, DLBENCH_SLURM_QOS="normal")
    job = Job({**given, "nodes": 2, "tasks": 4, "mpi": "srun", "slurm_extra": "--ntasks-per-node=2"})
    params = {"run_uuid": "u", "slurm_logfile": "l", "comment_str": "c", "account": "", "partition": "", "workdir": ""}
    line = plugin.get_submit_command(job, params).split()
    assert "--qos=normal" in line and "--ntasks-per-node=2" in line
