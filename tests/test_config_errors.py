"""Typos a new user makes: a name inside an exclude/only rule that matches nothing, a config
file that does not parse. Each gives exactly one message naming the entry (or the file, line
and column) and the bad value; nothing is written."""

import copy
import shutil
import subprocess
import sys

import pytest

from dlbench.models import CATALOGUE
from dlbench.planning import config as dlbench_config
from dlbench.planning import grid
from dlbench.runners import capabilities, framework_names
from tests.conftest import REPO
from tests.test_config_validation import SNAKEMAKE, dry_run
from tests.test_grid import BASE

KNOWN_MODELS = ", ".join(sorted(CATALOGUE))
KNOWN_FRAMEWORKS = ", ".join(framework_names())
KNOWN_STRATEGIES = ", ".join(sorted({"single"}.union(*(capabilities(fw).strategy_names for fw in framework_names()))))
SCALE_RULE = "must match ^[1-9][0-9]*x[1-9][0-9]*$"
# A syntax error: the flow sequence opened on line 2 is never closed.
UNCLOSED_LIST = 'grid:\n  models: [resnet50\n  scales: ["1x1"]\n'
UNCLOSED_LIST_PROBLEM = ":3:9: expected ',' or ']', but got ':' (while parsing a flow sequence at line 2, column 11)"


def problem(grid_changes: dict) -> str | None:
    """The first check that refuses the grid, in the workflow's order (schema, then grid)."""
    config = copy.deepcopy(BASE)
    config["grid"].update(grid_changes)
    found = dlbench_config.schema_problem(config)
    if found:
        return found
    try:
        grid.check_semantics(config)
    except grid.ConfigError as error:
        return str(error)
    return None


@pytest.mark.parametrize(
    "changes,expected",
    [
        (
            {"exclude": [{"framework": "mxnet", "model": "resnet5O"}]},
            f"grid.exclude[0].model: 'resnet5O' is not a known model (known: {KNOWN_MODELS})",
        ),
        (
            {"only": [{"model": "vgg16"}, {"framework": ["pytorch", "caffe"]}]},
            f"grid.only[1].framework[1]: 'caffe' is not a known framework (known: {KNOWN_FRAMEWORKS})",
        ),
        (
            {"exclude": [{"strategy": "dpp"}]},
            f"grid.exclude[0].strategy: 'dpp' is not a known strategy (known: {KNOWN_STRATEGIES})",
        ),
        (
            {"exclude": [{"precision": "fp64"}]},
            "grid.exclude[0].precision: 'fp64' is not one of ['fp32', 'amp', 'fp8']",
        ),
        ({"only": [{"data": ["real", "reel"]}]}, "grid.only[0].data[1]: 'reel' is not one of ['synthetic', 'real']"),
        ({"exclude": [{"scale": "2n8c"}]}, f"grid.exclude[0].scale: '2n8c' is not allowed ({SCALE_RULE})"),
        (
            {"exclude": [{"framwork": "mxnet"}]},
            "grid.exclude[0]: unknown coordinate 'framwork'; use one of "
            "['activation_checkpointing', 'batch', 'data', 'framework', 'grad_accum', 'model', 'pp_microbatches', "
            "'pp_schedule', 'precision', 'repeat', 'scale', 'strategy']",
        ),
    ],
)
def test_a_rule_naming_what_does_not_exist_is_refused(changes, expected):
    assert problem(changes) == expected


def test_rules_naming_known_values_pass_and_still_filter():
    rule = {
        "framework": ["pytorch"],
        "model": "vgg16",
        "strategy": ["single", "ddp"],
        "precision": ["fp32", "amp"],
        "data": "synthetic",
        "scale": ["1x2"],
        "batch": 8,
    }
    assert problem({"exclude": [rule]}) is None
    config = copy.deepcopy(BASE)
    config["grid"]["exclude"] = [rule]
    runs = grid.expand(config).runs
    assert not any(r.model == "vgg16" and r.scale == "1x2" and r.batch == "8" for r in runs)
    assert any(r.model == "vgg16" and r.scale == "1x1" and r.batch == "8" for r in runs)


def invalid_config_lines(result) -> list[str]:
    return [line for line in (result.stderr + result.stdout).splitlines() if "invalid config" in line]


@pytest.mark.parametrize(
    "rule,expected",
    [
        (
            {"framework": "mxnet", "model": "resnet5O"},
            f"grid.exclude[0].model: 'resnet5O' is not a known model (known: {KNOWN_MODELS})",
        ),
        ({"precision": "fp64"}, "grid.exclude[0].precision: 'fp64' is not one of ['fp32', 'amp', 'fp8']"),
    ],
)
def test_dry_run_with_a_bad_rule_says_so_once_and_writes_nothing(tmp_path, rule, expected):
    result = dry_run(tmp_path, {"grid": {"exclude": [rule]}})
    assert result.returncode != 0
    # The message names the file and line that set the key.
    line = (tmp_path / "override.yaml").read_text().splitlines().index("  exclude:") + 1
    assert invalid_config_lines(result) == [f"invalid config: override.yaml:{line}: {expected}"], result.stderr[-2000:]
    assert not (tmp_path / "results").exists()


def test_dry_run_with_an_unparsable_default_config_names_file_line_and_column(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config/config.yaml").write_text(UNCLOSED_LIST)
    result = subprocess.run(
        [*SNAKEMAKE, "-n", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    expected = f"invalid config file: config/config.yaml{UNCLOSED_LIST_PROBLEM}"
    assert invalid_config_lines(result) == [expected], result.stderr[-2000:]
    assert not (tmp_path / "results").exists()


def test_check_names_each_configfile_of_the_snakemake_command_line(tmp_path):
    """What tools/run.sh runs before Snakemake, which loads --configfile files before the
    Snakefile and reports a syntax error with neither file nor line."""
    shutil.copy(REPO / "config/config.yaml", tmp_path / "good.yaml")
    (tmp_path / "bad.yaml").write_text(UNCLOSED_LIST)
    (tmp_path / "list.yaml").write_text("- grid\n")
    (tmp_path / "empty.yaml").write_text("")
    snakemake_args = ["-n", "--config", "run={threads: 1}", "--configfile=good.yaml", "--configfiles", "bad.yaml"]
    result = subprocess.run(
        [sys.executable, "-m", "dlbench.planning.config", "check", "list.yaml", "--", *snakemake_args, "empty.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "invalid config file: list.yaml: the top level must be a mapping of keys (grid:, protocol:, ...), not a list",
        f"invalid config file: bad.yaml{UNCLOSED_LIST_PROBLEM}",
        "invalid config file: empty.yaml: the top level must be a mapping of keys (grid:, protocol:, ...), "
        "not an empty file",
    ]
    assert dlbench_config.main(["check", str(tmp_path / "good.yaml"), "--", "-n"]) == 0


def test_run_sh_checks_config_files_before_snakemake_loads_them():
    lines = (REPO / "tools/run.sh").read_text().splitlines()
    check = next(
        i for i, line in enumerate(lines) if '-m dlbench.planning.config check config/config.yaml -- "$@"' in line
    )
    first_snakemake = next(i for i, line in enumerate(lines) if "bin/snakemake" in line)
    assert check < first_snakemake
