"""A working directory through several grids (docs/workdir.md), for real, in one directory: the
toy plug-in (tests/plugins/toy.py, numpy: a second per run) through Snakemake, the launcher,
the step logs, the tables and the report. A first grid; a second that adds a model and a
scale (only the new runs run, the report shows the second grid); a protocol change (refused by
name, nothing runs or changes); the first grid again (nothing runs, the report shows it alone,
the second's runs stay); and the protocol change where the refusal says, in a directory of its
own. The FLOPs counts (PyTorch, 10-20 s a model here) are laid down as the rule would leave them."""

import hashlib
import html
import json
import re
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from dlbench.planning import asked
from tests.conftest import REPO, framework_python
from tests.test_plugin_toy import PLUGINS, TOY
from tests.tiny_pipeline import snakemake

# The toy plug-in's grid at one scale, 2 measured steps.
FIRST = {**TOY, "grid": {**TOY["grid"], "scales": ["1x1"]}, "protocol": {**TOY["protocol"], "measured_steps": 2}}
SECOND = {**FIRST, "grid": {**FIRST["grid"], "models": ["resnet50", "vgg16"], "scales": ["1x1", "1x2"]}}
RUN = "results/runs/toy/{}/fp32/synthetic/bs4/{}/rep1"
FIRST_RUNS = {RUN.format("resnet50", "1x1/single")}
SECOND_RUNS = {RUN.format(m, s) for m in ("resnet50", "vgg16") for s in ("1x1/single", "1x2/replicas")}
MEASURED_3 = ("--config", "protocol={measured_steps: 3}")


def seed_flops(workdir) -> None:
    """Each model's FLOPs count and what it was counted at, as model_flops leaves them."""
    sizes = {"run": {"image_size": 32, "seq_len": 0}}
    for model in ("resnet50", "vgg16"):
        asked.write_if_changed(workdir / asked.FLOPS_TEMPLATE.format(model=model), asked.flops_basis(model, sizes))
    (workdir / "results/flops").mkdir(parents=True)
    for model in ("resnet50", "vgg16"):  # newer than what they were counted at
        counted = {"model": model, "image_size": 32, "seq_len": None, "train_flops_per_sample": 1e9}
        (workdir / f"results/flops/{model}.json").write_text(json.dumps(counted))


def invoke(workdir, grid: dict, *args: str):
    (workdir / "tiny.yaml").write_text(yaml.safe_dump(grid))
    return snakemake(workdir, *args)


def recorded(workdir) -> dict[str, str]:
    """Every run directory below results/runs with the sha256 of its files (raw logs, record)."""
    found = {}
    for record in (workdir / "results/runs").rglob("launch.json"):
        files = sorted(p for p in record.parent.rglob("*") if p.is_file())
        digest = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in files)).hexdigest()
        found[str(record.parent.relative_to(workdir))] = digest
    return found


def trained(result) -> list[str]:
    """The training jobs an invocation ran (train_1x1, train_1x2 ...)."""
    return re.findall(r"^(?:local)?rule (train_\w+):", result.stdout + result.stderr, re.M)


def cells(workdir) -> set[tuple]:
    table = pd.read_csv(workdir / "results/tables/cells.csv")
    return set(zip(table["model"], table["scale"], strict=True))


def report(workdir) -> tuple[str, str]:
    """The report's title and its text."""
    page = (workdir / "results/report/index.html").read_text()
    title = re.search(r"<title>(.*?)</title>", page).group(1)
    page = re.sub(r"<style.*?</style>", " ", page, flags=re.S)
    return html.unescape(title), html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    if not framework_python("pytorch").exists():
        pytest.skip("the pytorch environment (the toy's numpy) is not built")
    monkeypatch.setenv("DLBENCH_FRAMEWORK_PATH", str(PLUGINS))
    (tmp_path / "config").mkdir()
    (tmp_path / "config/config.yaml").write_text((REPO / "config/config.yaml").read_text())
    seed_flops(tmp_path)
    return tmp_path


def test_a_working_directory_through_two_grids_and_a_protocol_change(workdir):
    first = invoke(workdir, FIRST)
    assert first.returncode == 0, first.stderr[-4000:]
    assert trained(first) == ["train_1x1"] and set(recorded(workdir)) == FIRST_RUNS
    assert cells(workdir) == {("resnet50", "1x1")} and report(workdir)[0] == "dlbench report: ResNet-50 on Toy (numpy)"
    first_runs = recorded(workdir)

    # A model and a scale more: only the three new runs, the report of the second grid.
    second = invoke(workdir, SECOND)
    assert second.returncode == 0, second.stderr[-4000:]
    assert sorted(trained(second)) == ["train_1x1", "train_1x2", "train_1x2"]
    assert set(recorded(workdir)) == SECOND_RUNS
    assert {run: recorded(workdir)[run] for run in first_runs} == first_runs  # untouched
    assert cells(workdir) == {(m, s) for m in ("resnet50", "vgg16") for s in ("1x1", "1x2")}
    title, text = report(workdir)
    assert title == "dlbench report: ResNet-50 and VGG-16 on Toy (numpy)" and "measured steps per run 2" in text
    second_runs, tables = recorded(workdir), (workdir / "results/tables/cells.csv").read_bytes()

    # Another protocol: refused before anything runs, naming the setting and the runs.
    changed = invoke(workdir, SECOND, *MEASURED_3)
    assert changed.returncode != 0 and "Nothing to be done" not in changed.stderr
    assert "4 run(s) of this grid were measured under other settings" in changed.stderr, changed.stderr[-3000:]
    assert "protocol.measured_steps: measured 2, the config asks 3: 4 run(s)" in changed.stderr
    assert RUN.format("resnet50", "1x1/single") in changed.stderr and "--directory DIR" in changed.stderr
    assert not trained(changed) and recorded(workdir) == second_runs
    assert (workdir / "results/tables/cells.csv").read_bytes() == tables
    assert len((workdir / "logs/refused-runs.txt").read_text().splitlines()) == 4

    # The first grid again: nothing trains, its report alone, the second grid's runs stay.
    back = invoke(workdir, FIRST)
    assert back.returncode == 0, back.stderr[-4000:]
    assert not trained(back) and recorded(workdir) == second_runs
    assert cells(workdir) == {("resnet50", "1x1")} and report(workdir)[0] == "dlbench report: ResNet-50 on Toy (numpy)"

    # A plain `snakemake` (Snakemake's every rerun trigger): a command changed with the config
    # runs no recorded run again.
    plain = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir), "-c1", "-n"]
    plain += ["--configfile", str(workdir / "tiny.yaml"), "--config", "run={progress_every: 7}"]
    done = subprocess.run(plain, capture_output=True, text=True, timeout=300, check=False)
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "rerun triggers: mtime" in said and "train_" not in said, said[-3000:]

    # What the refusal says: the new protocol in a working directory of its own.
    elsewhere = workdir / "measured3"
    seed_flops(elsewhere)
    third = snakemake(workdir, *MEASURED_3, "--directory", str(elsewhere))
    assert third.returncode == 0, third.stderr[-4000:]
    assert trained(third) == ["train_1x1"] and set(recorded(elsewhere)) == FIRST_RUNS
    assert "measured steps per run 3" in report(elsewhere)[1] and recorded(workdir) == second_runs
