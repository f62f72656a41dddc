"""The cost of a grid before it runs (dlbench.planning.cost): step times from the committed
campaigns where they measured the cell on the same device type, else from FLOPs; the budget's
refusal; the raw logs' disk; the device-hours a finished grid held."""

import copy
import json
import subprocess
import sys

import pytest
import yaml

from dlbench.analysis.columns import RUNS, col, read_runs
from dlbench.models import kind_of
from dlbench.planning import cost
from dlbench.planning.config import checked_grid
from dlbench.planning.grid import ConfigError
from tests.conftest import REPO

H100_CAMPAIGN = REPO / "campaigns" / "h100-resnet50-2026-11-26"
H200_CAMPAIGN = REPO / "campaigns" / "h200-llama1b-2026-11-27"


def _planned(grid_file: str, **run) -> tuple[dict, object]:
    config = yaml.safe_load((REPO / "config" / "grids" / grid_file).read_text())
    config["run"].update(run)
    return config, checked_grid(config)


def _measured_medians(campaign) -> dict[tuple, float]:
    """Per cell of a committed campaign: the median of its ok runs' step times."""
    runs = read_runs(campaign / "results" / "tables" / "runs.csv")
    ok = runs[runs[col.status] == "ok"]
    keys = [col.framework, col.model, col.precision, col.data, col.batch, col.scale]
    return {key: float(v) for key, v in ok.groupby(keys)[col.step_time_median_s].median().items()}


def _key(cell) -> tuple:
    return (cell.framework, cell.model, cell.precision, cell.data, cell.batch, cell.scale)


@pytest.mark.parametrize(
    ("grid_file", "gpu_type", "campaign"),
    [("gpu_single.yaml", "h100", H100_CAMPAIGN), ("gpu_single_llm.yaml", "h200", H200_CAMPAIGN)],
)
def test_a_cell_a_campaign_measured_on_the_same_device_type_takes_its_step_time(grid_file, gpu_type, campaign):
    config, grid = _planned(grid_file, gpu_type=gpu_type)
    estimate = cost.estimate(grid, config, REPO)
    measured = _measured_medians(campaign)
    assert {_key(c.cell) for c in estimate.cells} == set(measured)
    steps = grid.protocol["warmup_steps"] + grid.protocol["measured_steps"]
    for cell_cost in estimate.cells:
        assert cell_cost.step_s == pytest.approx(measured[_key(cell_cost.cell)])
        assert f"campaigns/{campaign.name}" in cell_cost.basis
        run_s = steps * cell_cost.step_s + cost.STARTUP_S[config["run"]["device"]]
        assert cell_cost.device_hours == pytest.approx(cell_cost.runs * run_s / 3600)
    assert estimate.device_hours == pytest.approx(sum(c.device_hours for c in estimate.cells))
    assert estimate.unit == "GPU-hours"
    summary = "\n".join(estimate.summary_lines())
    assert f"GPU-hours ({gpu_type}: {len(estimate.cells)} cells from campaigns/{campaign.name}" in summary


def test_another_device_type_is_estimated_from_flops_at_the_assumed_mfu():
    config, grid = _planned("gpu_single.yaml", gpu_type="a100")
    estimate = cost.estimate(grid, config, REPO)
    counted = json.loads((H100_CAMPAIGN / "results" / "flops" / "resnet50.json").read_text())
    mfu = kind_of("resnet50").assumed_mfu
    for cell_cost in estimate.cells:
        assert "campaigns/" not in cell_cost.basis
        # The A100's dense peaks (dlbench.devices): TF32 for fp32, fp16 for AMP.
        peak = {"fp32": 156.0, "amp": 312.0}[cell_cost.cell.precision]
        assert f"{mfu:.0%} assumed MFU of {peak:g} TFLOP/s" in cell_cost.basis
        # The table's figure is within 2 % of PyTorch's FLOP counter on the same model.
        expected = counted["train_flops_per_sample"] * 128 / (peak * 1e12 * mfu)
        assert cell_cost.step_s == pytest.approx(expected, rel=0.02)


def test_llm_flops_are_dlbench_llms_count_per_token_times_the_tokens():
    config, grid = _planned("gpu_single_llm.yaml", gpu_type="a100")
    counted = json.loads((H200_CAMPAIGN / "results" / "flops" / "llama3_1b.json").read_text())
    assert cost.train_flops_per_sample("llama3_1b", 0, 2048) == pytest.approx(counted["train_flops_per_sample"] * 2048)
    (cell_cost,) = {c.cell: c for c in cost.estimate(grid, config, REPO).cells if c.cell.framework == "jax"}.values()
    assert cell_cost.step_s == pytest.approx(counted["train_flops_per_sample"] * 2048 * 4 / (312e12 * 0.30))


def test_a_cpu_grid_is_in_cpu_hours_at_the_stated_throughput_per_thread():
    config, grid = _planned("llm_cpu.yaml")
    estimate = cost.estimate(grid, config, REPO)
    assert estimate.unit == "CPU-hours" and estimate.device == "cpu"
    steps = grid.protocol["warmup_steps"] + grid.protocol["measured_steps"]
    by_scale = {}
    for cell_cost in estimate.cells:
        assert f"{cost.CPU_GFLOPS_PER_THREAD:g} GFLOP/s per CPU thread" in cell_cost.basis
        by_scale.setdefault(cell_cost.cell.scale, set()).add(round(cell_cost.step_s, 9))
        devices = int(cell_cost.cell.scale.split("x")[1])
        assert cell_cost.device_hours == pytest.approx(
            cell_cost.runs * devices * (steps * cell_cost.step_s + cost.STARTUP_S["cpu"]) / 3600
        )
    # Two ranks share run.threads: each trains its batch on half of them, twice as long a step.
    (single,), (pair,) = by_scale["1x1"], by_scale["1x2"]
    assert pair == pytest.approx(2 * single)


def test_no_known_peak_is_no_estimate_per_cell_not_an_invented_one():
    config, grid = _planned("gpu_single.yaml", gpu_type="mi300x")
    estimate = cost.estimate(grid, config, REPO)
    assert estimate.device_hours == 0 and estimate.unestimated_runs == len(grid.runs)
    assert all(c.step_s is None and c.basis.startswith("no estimate") for c in estimate.cells)
    assert "set run.peak_tflops" in "\n".join(estimate.summary_lines())
    # An unset run.gpu_type (any GPU the site gives) is costed as the reference GPU, and says so.
    config, grid = _planned("gpu_single.yaml", gpu_type="")
    assumed = cost.estimate(grid, config, REPO)
    assert assumed.unestimated_runs == 0 and assumed.device_hours > 0
    assert "run.gpu_type unset: an H100's" in "\n".join(assumed.summary_lines())
    with_peak = cost.estimate(grid, {**config, "run": {**config["run"], "peak_tflops": 100.0}}, REPO)
    assert with_peak.unestimated_runs == 0 and with_peak.device_hours > 0


def test_a_grid_over_run_max_device_hours_is_refused_naming_key_estimate_and_limit():
    config, grid = _planned("gpu_single.yaml", gpu_type="h100")
    assert config["run"]["max_device_hours"] is None  # the schema's default: no limit
    estimate = cost.estimate(grid, config, REPO)
    assert cost.budget_problem(estimate, config) is None
    config["run"]["max_device_hours"] = estimate.device_hours / 2
    problem = cost.budget_problem(estimate, config)
    assert problem.startswith("run.max_device_hours:")
    assert cost.hours_text(estimate.device_hours) in problem and f"{estimate.device_hours / 2:g}" in problem
    config["run"]["max_device_hours"] = estimate.device_hours * 2
    assert cost.budget_problem(estimate, config) is None


def test_a_negative_budget_is_a_config_error():
    config = yaml.safe_load((REPO / "config" / "grids" / "gpu_single.yaml").read_text())
    config["run"]["max_device_hours"] = -1
    with pytest.raises((ConfigError, ValueError), match="max_device_hours"):
        checked_grid(config)


def test_the_disk_figure_is_within_5_percent_of_the_campaigns_raw_logs():
    config, grid = _planned("gpu_single.yaml", gpu_type="h100")
    written = sum(
        p.stat().st_size
        for p in (H100_CAMPAIGN / "results" / "runs").rglob("*")
        if p.name.endswith(".steps.jsonl") or p.name == "launch.json"
    )
    assert cost.estimate(grid, config, REPO).log_bytes == pytest.approx(written, rel=0.05)


def test_each_step_log_writer_of_a_run_counts_on_disk():
    config, grid = _planned("llm_cpu.yaml")
    cells = cost.estimate(grid, config, REPO).cells
    per_run = {(c.cell.framework, c.cell.strategy): c.log_bytes / c.runs for c in cells}
    one_log = per_run[("pytorch", "single")] - cost.RUN_RECORD_BYTES
    # DDP and FSDP write a log per rank; JAX's sharded strategy one per node.
    assert per_run[("pytorch", "ddp")] - cost.RUN_RECORD_BYTES == pytest.approx(2 * one_log)
    assert per_run[("jax", "sharded")] == pytest.approx(per_run[("jax", "single")])


def test_a_10000_run_grid_is_estimated_once_per_cell_without_pandas():
    """What estimating costs, in work (its time is benchmarks/cost_estimate.py's): one step
    estimate per distinct cell, every run counted, and no pandas imported."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from dag_cost import BIG

    config = copy.deepcopy(BIG)
    grid = checked_grid(config)
    assert len(grid.runs) >= 10_000
    cost.cell_step.cache_clear()
    estimate = cost.estimate(grid, config, REPO)
    assert sum(c.runs for c in estimate.cells) == len(grid.runs)
    assert cost.cell_step.cache_info().misses == len(estimate.cells) == len({r.cell for r in grid.runs})
    script = (
        "import copy, sys; sys.path.insert(0, 'benchmarks'); from dag_cost import BIG;"
        "from dlbench.planning.config import checked_grid; from dlbench.planning import cost;"
        "c = copy.deepcopy(BIG); cost.estimate(checked_grid(c), c, '.'); print('pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("campaign", [H100_CAMPAIGN, H200_CAMPAIGN])
def test_measured_device_hours_lie_between_the_measured_windows_and_the_launchers_walls(campaign):
    every_run = read_runs(campaign / "results" / "tables" / "runs.csv")
    records = [(campaign / files.split(";")[0]).with_name("launch.json") for files in every_run[col.log_files]]
    # A run cancelled by its pipeline's stop has logs but no launch.json: no wall to bound it by.
    launched = every_run[[record.exists() for record in records]]
    walls = sum(
        json.loads(record.read_text())["wall_seconds"] * devices
        for record, devices in zip([r for r in records if r.exists()], launched[col.devices], strict=True)
    )
    windows = (launched[col.window_s] * launched[col.devices]).sum()
    hours = cost.measured_device_hours(launched, campaign)
    assert windows / 3600 < hours < walls / 3600
    assert cost.measured_device_hours(every_run, campaign) >= hours
    doubled = launched.assign(**{col.devices: launched[col.devices] * 2})
    assert cost.measured_device_hours(doubled, campaign) == pytest.approx(2 * hours)


def test_the_runs_columns_planning_reads_are_declared():
    for name in (cost.STATUS, cost.STEP_TIME, cost.DEVICE_NAME, cost.LOG_FILES, cost.DEVICES, *cost.SIZE_FIELDS):
        assert name in RUNS.columns, name
    assert set(cost.CELL_FIELDS) <= set(RUNS.columns)
