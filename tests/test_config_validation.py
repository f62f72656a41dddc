"""Bad config fails before anything runs, with one message naming the key and the value."""

import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO

SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def dry_run(tmp_path, override: dict):
    """A dry run of the default grid with `override` merged into it, as one grid file (a grid
    file is the whole experiment: nothing lies under it)."""
    from snakemake.utils import update_config

    grid = yaml.safe_load((REPO / "config/config.yaml").read_text())
    update_config(grid, override)
    (tmp_path / "override.yaml").write_text(yaml.safe_dump(grid))
    return subprocess.run(
        [
            *SNAKEMAKE,
            "-n",
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(tmp_path),
            "--configfile",
            str(tmp_path / "override.yaml"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "override,expected",
    [
        ({"grid": {"models": ["resnet5O"]}}, ["grid.models", "resnet5O"]),
        ({"grid": {"batch_per_device": [-4]}}, ["grid.batch_per_device[0]", "-4"]),
        ({"grdi": {}}, ["grdi"]),
        ({"grid": {"models": ["resnet50; rm -rf ~"]}}, ["grid.models[0]", "rm -rf"]),
        ({"grid": {"scales": ["1x2 && reboot"]}}, ["grid.scales[0]", "reboot"]),
        ({"protocol": {"preset": "caict2020", "statistic": "geomean"}}, ["protocol.statistic", "geomean"]),
    ],
)
def test_bad_config_one_clear_error_and_nothing_written(tmp_path, override, expected):
    result = dry_run(tmp_path, override)
    assert result.returncode != 0
    message = [line for line in (result.stderr + result.stdout).splitlines() if "invalid config" in line]
    assert message, result.stderr[-2000:]
    for text in expected:
        assert text in message[0]
    assert not (tmp_path / "results").exists()


def test_dry_run_lists_exactly_the_grid(tmp_path):
    override = {
        "grid": {
            "frameworks": ["pytorch"],
            "models": ["resnet50", "vgg16"],
            "batch_per_device": [1, 8, 32],
            "scales": ["1x1", "1x2"],
            "data": ["synthetic"],
        },
        "protocol": {"preset": "caict2020", "repeats": 3},
    }
    result = dry_run(tmp_path, override)
    assert result.returncode == 0, result.stderr[-2000:]
    table = result.stdout[result.stdout.index("Job stats") :]
    counts = dict(line.split()[:2] for line in table.splitlines()[3:] if len(line.split()) == 2)
    # One training rule per job shape: 1x1 and 1x2 (DDP, a process per device).
    assert counts["train_1x1"] == "18" and counts["train_1x2"] == "18"
    assert counts["aggregate"] == "1" and counts["report_document"] == "1"


@pytest.mark.parametrize("grid", [None, "caict2020.yaml", "paddle_vgg16.yaml", "tf_cnn_benchmarks.yaml"])
def test_fill_defaults_gives_what_snakemakes_validate_gives(grid):
    """dlbench.planning.config.fill_defaults (the Snakefile's schema check, on the schema read once) and
    snakemake.utils.validate(set_default=True) fill in the same config, and refuse the same."""
    import copy

    import jsonschema
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    from dlbench.planning.config import CONFIG_SCHEMA, fill_defaults

    config = yaml.safe_load((REPO / ("config/grids/" + grid if grid else "config/config.yaml")).read_text())
    ours, theirs = copy.deepcopy(config), copy.deepcopy(config)
    fill_defaults(ours)
    validate(theirs, CONFIG_SCHEMA, set_default=True)
    assert ours == theirs and ours != config  # defaults were filled in
    ours["run"]["threads"] = theirs["run"]["threads"] = 0
    with pytest.raises(jsonschema.ValidationError):
        fill_defaults(ours)
    with pytest.raises(WorkflowError, match="Error validating config file"):  # Snakemake wraps it
        validate(theirs, CONFIG_SCHEMA, set_default=True)


def test_a_config_checked_before_is_read_back_filled_without_the_validator(tmp_path):
    """The schema's check is kept per config (planning/schema.py, CHECKED_DIR): a second process
    gets the same filled config without importing jsonschema; a changed config is checked anew,
    and a damaged record is checked again, not trusted."""
    import json

    import jsonschema

    from dlbench.planning.schema import checked_key, fill_defaults

    program = (
        "import json, sys\n"
        "from dlbench.planning.schema import fill_defaults\n"
        "config = json.loads(sys.argv[1])\n"
        "fill_defaults(config, sys.argv[2])\n"
        "print(json.dumps({'config': config, 'validator': 'jsonschema' in sys.modules}))\n"
    )
    config = yaml.safe_load((REPO / "config/grids/caict2020.yaml").read_text())
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", program, json.dumps(config), str(tmp_path)],
                capture_output=True,
                text=True,
                check=True,
                cwd=REPO,
            ).stdout
        )
        for _ in range(2)
    ]
    assert [run["validator"] for run in runs] == [True, False]
    assert runs[0]["config"] == runs[1]["config"] != config
    (record,) = tmp_path.glob("*.json")
    assert record.name == f"{checked_key(config)}.json"
    changed = {**config, "run": {**config["run"], "threads": 0}}
    with pytest.raises(jsonschema.ValidationError):
        fill_defaults(changed, tmp_path)
    record.write_text("{not json")
    again = json.loads(json.dumps(config))
    fill_defaults(again, tmp_path)
    assert again == runs[0]["config"]


def test_command_line_scalars_are_read_as_the_schema_types_them():
    """`--config run='{exclusive: true, threads: 2}'` reaches the config as strings (Snakemake
    reads nested values with YAML's BaseLoader); the schema's types decide what they are."""
    from dlbench.planning.config import checked_grid
    from dlbench.planning.grid import ConfigError

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["run"] = {**config.get("run", {}), "exclusive": "true", "threads": "2", "cpu_bind": "cores"}
    checked_grid(config)
    assert config["run"]["exclusive"] is True and config["run"]["threads"] == 2
    assert config["run"]["cpu_bind"] == "cores"  # a string stays one
    config["run"]["exclusive"] = "yes please"
    with pytest.raises(ConfigError, match="run.exclusive: 'yes please' is not of type 'boolean'"):
        checked_grid(config)
    # a setting that is an integer or a word (repeats: 3 or auto) is read as either
    for given, read in (("1", 1), ("auto", "auto")):
        config["run"]["exclusive"] = "true"
        config["protocol"] = {**config["protocol"], "repeats": given}
        checked_grid(config)
        assert config["protocol"]["repeats"] == read
