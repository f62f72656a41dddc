"""Measurement checks with planted runs: a trending and a bimodal window (real step logs),
throughput drifting with run order, a cell whose repeats split by node."""

import re
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from dlbench.analysis import drift, placement, stability
from dlbench.analysis.aggregate import cells_table, runs_table
from dlbench.coords import RunCoords
from dlbench.findings import checks
from dlbench.planning import placement as spreading
from dlbench.report import checks as report_checks
from dlbench.report import render
from dlbench.steplog import StepLogWriter, rank_log_name

PROTOCOL = {"preset": "quick", "warmup_steps": 1, "measured_steps": 40, "repeats": 1, "statistic": "mean"}
CONFIG = {"grid": {"frameworks": ["pytorch"], "models": ["resnet50"]}, "run": {"device": "cpu"}}
RNG = np.random.default_rng(7)
STEADY = 0.1 * (1 + 0.02 * RNG.standard_normal(40))
TREND = 0.1 * np.linspace(1.0, 1.3, 40) * (1 + 0.02 * RNG.standard_normal(40))  # throttling
BIMODAL = np.where(RNG.random(40) < 0.4, 0.15, 0.1) * (1 + 0.02 * RNG.standard_normal(40))


def write_run(root, coords: RunCoords, step_times, start="2026-01-02T03:04:05+00:00", node="n1"):
    header = {
        "run": coords.as_dict(),
        "protocol": {"preset": "quick", "warmup_steps": 1, "measured_steps": len(step_times), "statistic": "mean"},
        "batch": 8,
        "rank": 0,
        "world_size": 1,
        "node": node,
        "start_time": start,
        "framework": {"name": coords.framework, "version": "2.5.1"},
    }
    writer = StepLogWriter(root / coords.run_dir / rank_log_name(0), header)
    t, steps = 10.0, []
    for i, step in enumerate([0.5, *step_times]):
        phase = "warmup" if i == 0 else "measure"
        steps.append({"i": i, "phase": phase, "t_start": t, "t_end": t + step, "samples": 8})
        t += step
    writer.write_steps(steps)
    writer.close("ok")


def test_planted_trend_and_bimodal_windows_are_flagged_in_the_report(tmp_path):
    coords = [RunCoords("pytorch", "resnet50", "fp32", "synthetic", "8", "1x1", "single", r) for r in (1, 2, 3)]
    for c, times in zip(coords, (STEADY, TREND, BIMODAL), strict=True):
        write_run(tmp_path, c, times)
    runs = runs_table(coords, tmp_path)
    assert list(runs["stability"]) == ["steady", "trend", "bimodal"]
    trend = runs.iloc[1]
    assert trend["step_last_third_s"] > 1.1 * trend["step_first_third_s"]
    assert "slower" in trend["stability_reason"] and runs.iloc[0]["step_times_s"] == ""
    assert len(stability.parse_step_times(runs.iloc[2]["step_times_s"])) == 40
    html = render(cells_table(runs, "mean"), runs, PROTOCOL, CONFIG, generated="now")
    assert "2 of 3 runs with enough measured steps are not steady" in re.sub(r"<[^>]+>", "", html)
    table = html.split('id="stability"')[1].split("</table>")[0]
    assert table.count("<tr>") == 3 and "TREND" in table and "BIMODAL" in table
    assert 'alt="Step-time histograms of the flagged runs whose step time moved most"' in html


@pytest.mark.parametrize("times", [STEADY, 0.1 * (1 + 0.05 * RNG.standard_normal(60)), [0.1] * 20])
def test_steady_windows_are_not_flagged(times):
    assert stability.verdict(times)[0] == "steady"


def test_too_few_steps_get_no_verdict():
    assert stability.verdict(TREND[:5])[0] == ""


def planted_runs(drop_per_run: float) -> pd.DataFrame:
    """Two frameworks, three cells each, four repeats, interleaved; pytorch loses
    `drop_per_run` of its throughput per run started before it."""
    start, rows = datetime(2026, 1, 2, tzinfo=UTC), []
    for order in range(24):
        fw = ("pytorch", "tensorflow")[order % 2]
        scale = ("1x1", "1x2", "2x2")[(order // 2) % 3]
        base = {"1x1": 100.0, "1x2": 190.0, "2x2": 350.0}[scale] * (1 + 0.01 * RNG.standard_normal())
        rows.append(
            {
                "framework": fw,
                "model": "resnet50",
                "precision": "fp32",
                "data": "synthetic",
                "batch": "8",
                "scale": scale,
                "strategy": "single" if scale == "1x1" else "ddp",
                "activation_checkpointing": "none",
                "grad_accum": 1,
                "pp_schedule": "none",
                "pp_microbatches": 1,
                "repeat": order // 6,
                "status": "ok",
                "throughput": base * (1 - drop_per_run * order if fw == "pytorch" else 1),
                "start_time": (start + timedelta(minutes=3 * order)).isoformat(),
                "nodes": "n1",
            }
        )
    return pd.DataFrame(rows)


def test_planted_drift_with_run_order_is_flagged():
    table = drift.drift_table(planted_runs(0.01)).set_index("framework")
    assert table.loc["pytorch", "drift"] == "drift" and table.loc["tensorflow", "drift"] == "none"
    assert table.loc["pytorch", "order_change_high"] < -0.05
    (found,) = checks.drift_findings(planted_runs(0.01))
    assert found.text.startswith("PyTorch's throughput drifts with the order the runs started in: -")
    assert drift.drift_table(planted_runs(0.0)).set_index("framework").loc["pytorch", "drift"] == "none"


def test_a_cell_whose_repeats_split_by_node_is_flagged():
    runs = planted_runs(0.0)
    cell = (runs["framework"] == "pytorch") & (runs["scale"] == "1x2")
    runs.loc[cell, "nodes"] = ["n1", "n2", "n1", "n2"]
    runs.loc[cell & (runs["nodes"] == "n2"), "throughput"] *= 0.5  # n2 halves it
    other = (runs["framework"] == "tensorflow") & (runs["scale"] == "1x2")
    runs.loc[other, "nodes"] = ["n1", "n2", "n1", "n2"]  # spread, same speed: fine
    wide = (runs["framework"] == "tensorflow") & (runs["scale"] == "2x2")
    runs.loc[wide, "nodes"] = ["n1", "n1;n2", "n1", "n1;n2"]  # one node or two
    table = placement.placement_table(runs).set_index(["framework", "scale"])
    assert table.loc[("pytorch", "1x2"), "placement"] == "node"
    assert table.loc[("tensorflow", "1x2"), "placement"] == ""
    assert table.loc[("tensorflow", "2x2"), "placement"] == "layout"
    (found,) = checks.placement_findings(runs)
    assert found.text.startswith("2 cells with repeats split by node")
    assert "n1: 2 × " in found.text and "n1,n2: 2 × " in found.text


def test_repeats_spread_over_nodes_in_a_moving_window():
    nodes = ["n1", "n2", "n3"]
    assert [spreading.spread_nodelist(1, r, nodes) for r in (1, 2, 3, 4)] == [
        "--nodelist=n1",
        "--nodelist=n2",
        "--nodelist=n3",
        "--nodelist=n1",
    ]
    assert spreading.spread_nodelist(2, 2, nodes) == "--nodelist=n3,n1"
    assert spreading.spread_nodelist(3, 1, nodes) == "" and spreading.spread_nodelist(1, 1, []) == ""
    static = {"nodes": 1, "slurm_extra": "--ntasks-per-node=2"}
    spread = spreading.spread_resources(static, 1, ["n1", "n2"])
    assert spread["slurm_extra"](SimpleNamespace(repeat="2")) == "--ntasks-per-node=2 --nodelist=n2"
    assert spreading.spread_resources(static, 2, ["n1", "n2"]) is static


def drift_row(drift_verdict: str, order: tuple, time: tuple, runs: int = 12) -> dict:
    row = {"framework": "pytorch", "runs": runs, "drift": drift_verdict}
    for name, (change, low, high) in (("order", order), ("time", time)):
        row |= {f"{name}_change": change, f"{name}_change_low": low, f"{name}_change_high": high}
    return row


def test_no_drift_only_when_both_whole_intervals_lie_within_the_band():
    inside = (0.01, -0.02, 0.03)
    assert report_checks.drift_verdict(drift_row("none", inside, inside)) == "no drift"
    crossing = (-0.03, -0.07, 0.01)  # 0.04 towards -5%, which is 0.02 away: 4 × the runs
    verdict = report_checks.drift_verdict(drift_row("none", inside, crossing))
    assert verdict == (
        "inconclusive: the 95% CI crosses the ±5% band: about 48 runs (now 12) to decide it, if the estimate holds"
    )
    assert report_checks.drift_verdict(drift_row("drift", (-0.2, -0.28, -0.15), crossing)) == "DRIFT"
    on_edge = (-0.05, -0.08, -0.02)
    assert report_checks.drift_verdict(drift_row("none", inside, on_edge)).endswith("cannot be decided by more repeats")
    assert report_checks.drift_verdict({"drift": ""}) == "too few runs"


def test_a_planted_small_drift_is_not_called_no_drift_unless_its_interval_is_inside():
    runs = planted_runs(0.002)
    table = drift.drift_table(runs).set_index("framework")
    verdicts = {r["framework"]: r["verdict"] for r in report_checks.drift_part(runs)["rows"]}
    for framework, row in table.iterrows():
        inside = all(row[f"{p}_change_low"] >= -0.05 and row[f"{p}_change_high"] <= 0.05 for p in ("order", "time"))
        name = {"pytorch": "PyTorch", "tensorflow": "TensorFlow"}[framework]
        assert (verdicts[name] == "no drift") == (inside and row["drift"] == "none"), (framework, verdicts[name])
