"""The `data` config section: a bad value stops everything with one message naming the key."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml

from dlbench.planning import config as dlbench_config
from tests.conftest import REPO

with open(REPO / "config/config.yaml") as f:
    BASE = yaml.safe_load(f)


def with_data(data: dict) -> dict:
    config = copy.deepcopy(BASE)
    config["data"] = data
    return config


@pytest.mark.parametrize(
    "data,expected",
    [
        ({"images": {"count": 0}}, "data.images.count: 0 is less than the minimum of 1"),
        ({"images": {"classes": "eight"}}, "data.images.classes: 'eight' is not of type 'integer'"),
        ({"images": {"splits": ["test"]}}, "data.images.splits[0]: 'test' is not one of ['train', 'val']"),
        ({"images": {"source": ""}}, "data.images.source: '' should be non-empty"),
        ({"images": {"shard": 4}}, "data.images: Additional properties are not allowed ('shard' was unexpected)"),
        ({"imagse": {}}, "data: Additional properties are not allowed ('imagse' was unexpected)"),
        ({"text": {"vocab_size": 40000}}, "data.text.vocab_size: 40000 is greater than the maximum of 30522"),
        ({"text": {"masked_lm_prob": 0}}, "data.text.masked_lm_prob: 0 is less than or equal to the minimum of 0"),
    ],
)
def test_schema_names_the_bad_data_key(data, expected):
    assert dlbench_config.schema_problem(with_data(data)) == expected


def test_embedded_default_and_real_source_are_valid():
    assert dlbench_config.schema_problem(BASE) is None
    assert dlbench_config.schema_problem(with_data({"images": {"source": "/data/imagenet"}})) is None


def snakemake(tmp_path, override: dict, *targets: str) -> subprocess.CompletedProcess:
    # The default grid with `override` in it, as one grid file: nothing lies under a grid file.
    from snakemake.utils import update_config

    grid = copy.deepcopy(BASE)
    update_config(grid, override)
    (tmp_path / "override.yaml").write_text(yaml.safe_dump(grid))
    command = [sys.executable, "-m", "snakemake", *targets, "-n", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path)]
    command += ["--configfile", str(tmp_path / "override.yaml")]  # takes several values: last
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(
    "data,expected",
    [
        ({"text": {"seq_len": -1}}, "data.text.seq_len: -1 is less than the minimum of 0"),
        ({"images": {"count": 4, "classes": 8}}, "data.images.count: 4 images cannot fill data.images.classes: 8"),
    ],
)
def test_snakemake_stops_with_one_message_and_writes_nothing(tmp_path, data, expected):
    result = snakemake(tmp_path, {"data": data})
    assert result.returncode != 0
    messages = [line for line in (result.stderr + result.stdout).splitlines() if "invalid config" in line]
    assert messages and expected in messages[0], result.stderr[-2000:]
    assert not (tmp_path / "results").exists()


def test_datasets_target_plans_generation_conversions_bert_and_tokens(tmp_path):
    result = snakemake(tmp_path, {"data": {"images": {"splits": ["train", "val"]}}}, "datasets")
    assert result.returncode == 0, result.stderr[-2000:]
    table = result.stdout[result.stdout.index("Job stats") :]
    counts = dict(line.split()[:2] for line in table.splitlines()[3:] if len(line.split()) == 2)
    expected = ["generate_images", "tfrecords", "imagefolder", "recordio", "bert_data", "llm_tokens", "datasets"]
    assert {rule: counts.get(rule) for rule in expected} == dict.fromkeys(expected, "1")
    assert "validation-00000-of-00001" in result.stdout and "val.rec" in result.stdout


def test_a_missing_real_source_is_named(tmp_path):
    missing = tmp_path / "imagenet"
    result = snakemake(tmp_path, {"data": {"images": {"source": str(missing)}}}, "datasets")
    assert result.returncode != 0
    assert "generate_images" not in result.stdout
    messages = [line for line in (result.stderr + result.stdout).splitlines() if "invalid config" in line]
    line = (tmp_path / "override.yaml").read_text().splitlines().index(f"    source: {missing}") + 1
    expected = f"invalid config: override.yaml:{line}: data.images.source: {missing}: image dataset directory not found"
    assert messages == [expected]
