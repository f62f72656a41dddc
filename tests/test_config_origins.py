"""A grid file is the whole experiment: what it does not say comes from its protocol preset, then
from the schema's defaults, never from the embedded default grid; every setting says where it
came from (dlbench/planning/origins.py), and every dry run starts with the plan summary."""

import re
import subprocess
import sys

import pytest
import yaml

from dlbench.planning import config as dlbench_config
from dlbench.planning import grid as dlbench_grid
from dlbench.planning import origins
from tests.conftest import REPO

ONLY_A_GRID = {
    "grid": {"frameworks": ["pytorch"], "models": ["resnet50"], "batch_per_device": [2, 16], "scales": ["1x1"]}
}


def snakemake_dry_run(workdir, *args) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "-n", "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args]
    return subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=300, check=False)


def show(*args, cwd=REPO) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "dlbench.planning.config", "show", *map(str, args)]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def shown(output: str) -> dict[str, tuple[str, str]]:
    """`show`'s lines as {key: (value, origin)}."""
    rows = {}
    for line in output.splitlines()[1:]:
        parts = re.split(r"\s{2,}", line.strip())
        rows[parts[0]] = (parts[1] if len(parts) == 3 else "", parts[-1])
    return rows


def test_a_grid_file_alone_plans_exactly_its_cells_with_the_presets_repeats(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(ONLY_A_GRID))
    config = dlbench_config.resolve_files([str(path)])
    planned = dlbench_grid.expand(config)
    # Neither the default's exclude (which drops ResNet-50 at batch 2) nor its 4 + 15 window.
    assert sorted({(int(r.batch), r.data) for r in planned.runs}) == [(2, "synthetic"), (16, "synthetic")]
    assert len(planned.runs) == 2 * 3 and not planned.unavailable
    assert (planned.protocol["preset"], planned.protocol["warmup_steps"], planned.protocol["measured_steps"]) == (
        "caict2020",
        20,
        100,
    )
    assert config["run"]["image_size"] == 0 and config["run"]["seq_len"] == 0  # the models' own


def test_the_dry_run_says_the_plan_and_where_each_departure_came_from(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({**ONLY_A_GRID, "run": {"threads": 1}}))
    done = snakemake_dry_run(tmp_path, "-p", "--configfile", str(path), "--config", "protocol={measured_steps: 30}")
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout + done.stderr
    assert "dlbench plan: 6 runs in 2 cells (3 repeats each), 0 cells N/A" in said
    assert "protocol: preset caict2020, 20 warm-up + 30 measured steps, 3 repeats, mean (schema default)" in said
    line = path.read_text().splitlines().index("  threads: 1") + 1
    assert f"run.threads = 1  (mine.yaml:{line})" in said
    assert "protocol.measured_steps = 30  (--config)" in said
    assert said.count("--warmup-steps 20 --measured-steps 30") == 6  # every training command


def test_the_caict_grid_launches_caicts_own_window(tmp_path):
    done = snakemake_dry_run(tmp_path, "--configfile", str(REPO / "config/grids/caict2020.yaml"))
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout + done.stderr
    assert "--warmup-steps 20 --measured-steps 100" in said
    assert "--warmup-steps 4 " not in said and "--seq-len 64" not in said and "--image-size 64" not in said


def test_show_names_file_line_preset_schema_default_and_the_command_line(tmp_path):
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump({**ONLY_A_GRID, "protocol": {"preset": "dlperf", "repeats": 4}}))
    done = show(path, "--config", "run={threads: 1}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = shown(done.stdout)
    lines = path.read_text().splitlines()
    assert rows["protocol.repeats"] == ("4", f"grid.yaml:{lines.index('  repeats: 4') + 1}")
    assert rows["protocol.statistic"] == ("median", "preset dlperf")
    assert rows["protocol.warmup_steps"] == ("20", "preset dlperf")
    assert rows["run.threads"] == ("1", "--config")
    assert rows["run.image_size"] == ("0", "schema default")
    assert rows["grid.scales"] == ('["1x1"]', f"grid.yaml:{lines.index('  scales:') + 1}")


def test_show_without_a_grid_file_shows_the_embedded_default(tmp_path):
    done = show(cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = shown(done.stdout)
    assert rows["protocol.warmup_steps"][0] == "4" and rows["protocol.warmup_steps"][1].endswith(
        "config/config.yaml:35"
    )


@pytest.mark.parametrize(
    "grid_file,config_args,expected",
    [
        ({**ONLY_A_GRID, "protocol": {"preset": "caict2021"}}, [], "grid.yaml:{preset}: protocol.preset: 'caict2021'"),
        (ONLY_A_GRID, ["run={thread: 1}"], "--config: run: Additional properties are not allowed ('thread'"),
        (
            {**ONLY_A_GRID, "protocol": {"preset": "caict2020", "measured_steps": 10}},
            [],
            "grid.yaml:{measured_steps}: protocol.measured_steps: 10 measured steps after 20 warm-up steps",
        ),
    ],
)
def test_bad_input_names_the_key_and_the_file_before_anything_is_written(tmp_path, grid_file, config_args, expected):
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(grid_file))
    lines = path.read_text().splitlines()
    expected = expected.format(
        **{k: lines.index(f"  {k}: " + str(v)) + 1 for k, v in grid_file.get("protocol", {}).items()}
    )
    args = ["--configfile", str(path)] + (["--config", *config_args] if config_args else [])
    done = snakemake_dry_run(tmp_path, *args)
    assert done.returncode != 0
    messages = [line for line in (done.stdout + done.stderr).splitlines() if "invalid config" in line]
    assert len(messages) == 1 and expected in messages[0], messages
    assert not (tmp_path / "results").exists()


def test_departures_compare_with_the_preset_and_the_schema_not_with_the_file():
    config = dlbench_config.resolve_files([str(REPO / "config/config.yaml")])
    found = origins.origins([str(REPO / "config/config.yaml")], None, config)
    changed = {key: value for key, value, _ in origins.departures(config, found)}
    assert changed["protocol.warmup_steps"] == 4 and changed["run.image_size"] == 64
    assert "protocol.preset" not in changed and not any(key.startswith("grid.") for key in changed)
    assert "data.images.count" not in changed  # set in the file, but to the schema's own default


def test_a_grid_over_its_device_hour_budget_is_refused_before_anything_runs(tmp_path):
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump({**ONLY_A_GRID, "run": {"device": "cuda", "max_device_hours": 0.001}}))
    done = snakemake_dry_run(tmp_path, "--configfile", str(path))
    assert done.returncode != 0
    messages = [line for line in (done.stdout + done.stderr).splitlines() if "invalid config" in line]
    line = path.read_text().splitlines().index("  max_device_hours: 0.001") + 1
    assert len(messages) == 1 and f"grid.yaml:{line}: run.max_device_hours:" in messages[0], messages
    assert "GPU-hours" in messages[0] and not (tmp_path / "results").exists()
    # Within the budget, the plan summary gives the estimate.
    path.write_text(yaml.safe_dump({**ONLY_A_GRID, "run": {"device": "cuda", "max_device_hours": 100}}))
    done = snakemake_dry_run(tmp_path, "--configfile", str(path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"estimated [0-9.]+ GPU-hours \(cuda: 2 cells at 12% assumed MFU", done.stdout + done.stderr)
