"""Site environments (run.python): a framework's ranks run in a site's own Python, recorded as
such from the header to the tables, the report and the audit (docs/site-environments.md)."""

import copy
import hashlib
import os
import subprocess
import sys
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml

from dlbench import labels, provenance
from dlbench.analysis import audit, environment, tables
from dlbench.analysis.aggregate import cells_table, summarize_run
from dlbench.coords import RunCoords
from dlbench.planning.config import checked_grid, fill_defaults
from dlbench.planning.deployment import Deployment, DeploymentError
from dlbench.planning.grid import ConfigError
from dlbench.planning.snakemake_api import RunWildcards
from dlbench.protocol import RunProtocol
from tests.conftest import REPO, SHARED_CORES_ENV, framework_python

SITE = framework_python("pytorch")  # a Python we did not build for this run stands in for a site's
PYTORCH = SimpleNamespace(framework="pytorch", model="alexnet", scale="1x1", strategy="single")
DEFAULT = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def config_with(python: dict) -> dict:
    config = copy.deepcopy(DEFAULT)
    config["run"]["python"] = python
    return config


def test_a_site_python_that_is_not_there_or_not_runnable_is_one_error_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"run.python.pytorch: /nowhere/bin/python does not exist"):
        checked_grid(config_with({"pytorch": "/nowhere/bin/python"}))
    plain = tmp_path / "python"
    plain.write_text("")
    with pytest.raises(ConfigError, match=rf"run.python.pytorch: {plain} is not executable"):
        checked_grid(config_with({"pytorch": str(plain)}))
    with pytest.raises(ConfigError, match="run.python.caffe: unknown framework; known: .*pytorch"):
        checked_grid(config_with({"caffe": "/usr/bin/python3"}))
    checked_grid(config_with({"pytorch": "/usr/bin/env"}))  # any executable file passes


def deployment(python: dict, **run) -> Deployment:
    config = config_with(python)
    config["run"].update(run)
    fill_defaults(config)
    return Deployment(config, str(REPO), set(), environ={"DLBENCH_VENVS": "/venvs"})


def test_a_site_framework_runs_its_own_python_and_needs_no_venv():
    site = deployment({"pytorch": "/opt/site/bin/python"})
    assert site.python(PYTORCH) == "/opt/site/bin/python"
    assert site.software_inputs(PYTORCH) == [] and site.venv_inputs(PYTORCH) == []
    assert site.env_lock(PYTORCH) is None
    assert site.flops_python() == sys.executable  # FLOPs are counted by formula, in the analysis env
    other = SimpleNamespace(**{**vars(PYTORCH), "framework": "mxnet"})
    assert site.python(other) == "/venvs/mxnet/bin/python"  # the others keep their venvs
    assert site.software_inputs(other) == ["/venvs/mxnet/.dlbench-env"]
    protocol = RunProtocol("caict2020", warmup_steps=1, measured_steps=2, statistic="mean")
    wildcards = RunWildcards({**vars(PYTORCH), "precision": "fp32", "data": "synthetic", "batch": "4", "repeat": "1"})
    argv = site.launch_arguments(wildcards, protocol, None)
    assert "--python-env site" in argv and "--env-lock" not in argv


def test_a_site_python_inside_an_image_is_refused():
    with pytest.raises(DeploymentError, match="run.python names site environments .*run.container: podman"):
        deployment({"pytorch": "/opt/site/bin/python"}, container="podman")


def test_the_header_lists_the_site_distributions_and_their_hash():
    site = provenance.collect(None, site=True)["site_environment"]
    listing = "\n".join(site["distributions"]) + "\n"
    assert site["distributions_sha256"] == hashlib.sha256(listing.encode()).hexdigest()
    assert f"pandas=={pd.__version__}" in site["distributions"]
    assert provenance.collect(None)["site_environment"] is None


@pytest.mark.skipif(not SITE.exists(), reason="the pytorch environment is not built")
def test_a_site_run_is_marked_from_its_header_to_the_tables_and_the_audit(tmp_path):
    coords = RunCoords("pytorch", "alexnet", "fp32", "synthetic", "2", "1x1", "single", 1)
    run_dir = tmp_path / coords.run_dir
    args = [
        *(x for k, v in coords.as_dict().items() for x in (f"--{k.replace('_', '-')}", str(v))),
        *("--run-dir", str(run_dir), "--preset", "caict2020", "--warmup-steps", "1", "--measured-steps", "2"),
        *("--statistic", "mean", "--image-size", "64", "--threads", "1", "--python-env", "site"),
    ]
    result = subprocess.run(
        [str(SITE), "-m", "dlbench.launch", *args],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", **SHARED_CORES_ENV},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    row = summarize_run(coords, root=tmp_path)
    assert row["status"] == "ok" and row["python_env"] == "site", row.get("reason")
    cells = cells_table(pd.DataFrame([row]), "mean")
    assert cells.loc[0, "python_env"] == "site"
    assert tables.cell_text(cells.loc[0]).endswith(labels.SITE_ENV_MARK)
    assert labels.SITE_ENV_TEXT in tables.markdown(cells, {**DEFAULT["protocol"], "repeats": 1, "statistic": "mean"})
    headers = environment.read_headers(pd.DataFrame([row]), tmp_path)
    software = environment.summarize(pd.DataFrame([row]), headers)["software"]
    assert software[0]["env_lock"].startswith(f"{labels.SITE_ENV_TEXT}: {SITE}")
    (note,) = audit.site_environment_notes(headers)
    assert note.startswith(f"pytorch: {labels.SITE_ENV_TEXT}: {SITE}") and os.fspath(SITE) in note
