import math

import pandas as pd
import pytest

from dlbench.analysis.aggregate import cells_table, runs_table, summarize_run
from dlbench.planning.grid import CellKey
from tests.conftest import make_coords, write_run


def test_throughput_excludes_warmup(tmp_path):
    # Two slow warm-up steps, then 4 measured steps of 0.5 s at batch 8: 32 samples / 2 s.
    c = make_coords()
    write_run(tmp_path, c, [5.0, 3.0, 0.5, 0.5, 0.5, 0.5], warmup=2)
    row = summarize_run(c, tmp_path)
    assert row["status"] == "ok"
    assert row["throughput"] == pytest.approx(16.0)
    assert row["measured_steps"] == 4 and row["warmup_steps"] == 2


def test_global_throughput_sums_ranks_over_the_slowest_window(tmp_path):
    c = make_coords(scale="1x2", strategy="ddp")
    write_run(tmp_path, c, [[1.0, 0.5, 0.5], [1.0, 0.5, 1.0]], warmup=1)
    row = summarize_run(c, tmp_path)
    # 2 ranks x 2 measured steps x 8 samples over the longer window (1.5 s), not rank0 x 2.
    assert row["throughput"] == pytest.approx(32 / 1.5)
    assert row["nodes"] == "node0;node1"


def test_missing_rank_log_marks_the_run(tmp_path):
    c = make_coords(scale="1x2", strategy="ddp")
    write_run(tmp_path, c, [[1.0, 0.5]], rank=0)
    row = summarize_run(c, tmp_path)
    assert row["status"] == "missing" and "rank 1: no step log" in row["reason"]


def _cells(tmp_path, runs_spec, statistic="mean"):
    coords = []
    for c, durations, status in runs_spec:
        write_run(tmp_path, c, durations, warmup=1, status=status, error="boom" if status != "ok" else None)
        coords.append(c)
    return cells_table(runs_table(coords, tmp_path), statistic)


def test_cell_statistics_speedup_and_efficiency(tmp_path):
    one = [make_coords(repeat=r) for r in (1, 2, 3)]
    two = [make_coords(scale="1x2", strategy="ddp", repeat=r) for r in (1, 2, 3)]
    spec = [(c, [1.0, d], "ok") for c, d in zip(one, [1.0, 0.5, 0.25], strict=False)]  # 8, 16, 32 img/s
    spec += [(c, [[1.0, 0.5], [1.0, 0.5]], "ok") for c in two]  # 32 img/s each
    cells = _cells(tmp_path, spec).set_index("scale")
    assert cells.loc["1x1", "throughput"] == pytest.approx((8 + 16 + 32) / 3)
    assert cells.loc["1x1", "median"] == pytest.approx(16)
    assert cells.loc["1x1", "olympic_mean"] == pytest.approx(16)
    assert cells.loc["1x1", "n"] == 3
    assert cells.loc["1x2", "speedup"] == pytest.approx(32 / (56 / 3))
    assert cells.loc["1x2", "efficiency"] == pytest.approx(32 / (56 / 3) / 2)
    assert bool(cells.loc["1x1", "noisy"]) and not bool(cells.loc["1x2", "noisy"])


def test_oom_footer_becomes_a_marked_cell(tmp_path):
    spec = [(make_coords(repeat=r), [1.0, 1.0], "oom") for r in (1, 2)]
    spec += [(make_coords(batch="4", repeat=r), [1.0, 1.0], "ok") for r in (1, 2)]
    cells = _cells(tmp_path, spec).set_index("batch")
    assert cells.loc["8", "status"] == "oom"
    assert math.isnan(cells.loc["8", "throughput"])
    assert "oom: boom" in cells.loc["8", "reason"]
    assert cells.loc["4", "status"] == "ok"


def test_one_failed_repeat_gives_partial_cell(tmp_path):
    spec = [(make_coords(repeat=1), [1.0, 1.0], "failed"), (make_coords(repeat=2), [1.0, 0.5], "ok")]
    cell = _cells(tmp_path, spec).iloc[0]
    assert cell["status"] == "partial" and cell["n"] == 1 and cell["throughput"] == pytest.approx(16)


def test_truncated_log_is_excluded_with_reason_not_a_crash(tmp_path):
    c = make_coords()
    run_dir = write_run(tmp_path, c, [1.0, 1.0, 1.0])
    path = run_dir / "rank0.steps.jsonl"
    path.chmod(0o644)
    path.write_text(path.read_text()[:-15])
    cells = cells_table(runs_table([c, make_coords(repeat=2)], tmp_path), "mean")
    row = cells.iloc[0]
    assert row["status"] in ("invalid", "missing")
    assert "truncated last line" in row["reason"]


def test_unavailable_cells_are_kept(tmp_path):
    c = make_coords()
    write_run(tmp_path, c, [1.0, 1.0])
    key = CellKey("pytorch", "bert_base", "fp32", "synthetic", "8", "1x1", "single")
    cells = cells_table(runs_table([c], tmp_path), "mean", {key: "not built"})
    na = cells[cells["model"] == "bert_base"].iloc[0]
    assert na["status"] == "unavailable" and na["reason"] == "not built"
    assert isinstance(cells, pd.DataFrame)


def test_real_data_cells_carry_their_ratio_to_synthetic_and_the_data_wait(tmp_path):
    synthetic = make_coords(data="synthetic")
    real = make_coords(data="real")
    write_run(tmp_path, synthetic, [1.0, 0.5, 0.5], warmup=1)  # 16 samples/s
    write_run(tmp_path, real, [1.0, 2.0, 2.0], warmup=1, data_wait=0.75)  # 4 samples/s, 3/4 waiting
    cells = cells_table(runs_table([synthetic, real], tmp_path), "mean")
    by_data = cells.set_index("data")
    assert by_data.loc["real", "real_vs_synthetic"] == pytest.approx(0.25)
    assert by_data.loc["real", "data_wait_fraction"] == pytest.approx(0.75)
    assert math.isnan(by_data.loc["synthetic", "real_vs_synthetic"])
