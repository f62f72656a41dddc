"""Sanity before speed (dlbench.analysis.sanity): a verdict per run from its losses, on hand-made step
logs -- finite everywhere, falling on real data within the protocol's tolerance, changing on
synthetic data -- carried into runs.csv, cells.csv, cells.md and the report, throughput kept."""

import math
from types import SimpleNamespace

import pytest

from dlbench import labels, recipe
from dlbench.analysis import audit, sanity, stats, tables
from dlbench.analysis.aggregate import cells_table, runs_table
from dlbench.planning.grid import Grid
from dlbench.report import render
from dlbench.steplog import StepLogWriter, rank_log_name
from tests.conftest import make_coords

PROTOCOL = {"preset": "caict2020", "warmup_steps": 2, "measured_steps": 6, "repeats": 1, "statistic": "mean"}
RISING = [6.9, 7.0, 6.8, 9.0, 40.0, 1e3, 1e4, 1e5]
FALLING = [6.9, 6.5, 5.0, 4.0, 3.5, 3.0, 2.5, 2.0]


def write_losses(root, coords, per_rank: list[list[float | None]]):
    """A finished run whose rank logs carry these losses (one step of 0.1 s each)."""
    for rank, losses in enumerate(per_rank):
        header = {"run": coords.as_dict(), "rank": rank, "world_size": len(per_rank), "node": "n1"}
        header["framework"] = {"name": coords.framework, "version": "test"}
        writer = StepLogWriter(root / coords.run_dir / rank_log_name(rank), header)
        steps = [
            {"i": i, "phase": "warmup" if i < 2 else "measure", "t_start": i / 10, "t_end": (i + 1) / 10}
            | {"samples": 8, "loss": loss}
            for i, loss in enumerate(losses)
        ]
        writer.write_steps(steps)
        writer.close("ok")


def test_quarter_means_are_the_first_and_last_quarters():
    assert stats.quarter_means(FALLING) == (pytest.approx(6.7), pytest.approx(2.25))
    assert stats.quarter_means([3.0]) == (3.0, 3.0)
    assert all(math.isnan(x) for x in stats.quarter_means([]))


@pytest.mark.parametrize(
    ("losses", "data", "tolerance", "verdict", "words"),
    [
        (FALLING, "real", 0.0, "pass", ""),
        (RISING, "real", 0.0, "suspect", "loss rose 6.95 → 5.5e+04"),
        ([2.0, 2.0, 2.1, 2.1], "real", 0.1, "pass", ""),  # within the tolerance
        ([2.0, 2.0, 2.3, 2.3], "real", 0.1, "suspect", "more than the 10% allowed"),
        (RISING, "synthetic", 0.0, "pass", ""),  # synthetic: finite and changing is enough
        ([6.9, 6.9, 6.9, 6.9], "synthetic", 0.0, "suspect", "loss did not change (6.9 at all 4 steps)"),
        ([6.9, 5.0, None, None], "synthetic", 0.0, "suspect", "loss not finite from step 2 (2 of 4 steps)"),
        ([6.9, 5.0, None, 1.0], "real", 0.0, "suspect", "not finite"),
        ([], "real", 0.0, "", ""),
    ],
)
def test_judge_losses(losses, data, tolerance, verdict, words):
    judged = sanity.judge_losses(losses, data, tolerance)
    assert judged.sanity == verdict
    assert words in judged.reason
    assert bool(judged.reason) == (verdict == "suspect")


def test_loss_tolerance_defaults_to_the_schema():
    assert sanity.loss_tolerance({}) == 0.0
    assert sanity.loss_tolerance({"loss_tolerance": 0.25}) == 0.25


def test_a_suspect_run_keeps_its_throughput_and_its_cell_is_marked(tmp_path):
    good, bad = make_coords(data="real"), make_coords(data="real", framework="tensorflow")
    flat = make_coords(data="synthetic")
    nan = make_coords(data="synthetic", framework="tensorflow", scale="1x2", strategy="multi_worker_mirrored")
    write_losses(tmp_path, good, [FALLING])
    write_losses(tmp_path, bad, [RISING])
    write_losses(tmp_path, flat, [[6.9] * 8])
    write_losses(tmp_path, nan, [FALLING, FALLING[:4] + [None] * 4])
    runs = runs_table([good, bad, flat, nan], tmp_path)
    assert runs["status"].tolist() == ["ok"] * 4
    assert runs["throughput"].notna().all()  # sanity never removes a number
    assert runs["sanity"].tolist() == ["pass", "suspect", "suspect", "suspect"]
    assert runs.loc[3, "sanity_reason"] == "rank 1: loss not finite from step 4 (4 of 8 steps)"
    assert runs.loc[0, "loss_first_quarter"] == pytest.approx(6.7)

    cells = cells_table(runs, "mean").set_index(["framework", "data", "scale"])
    bad_cell = cells.loc[("tensorflow", "real", "1x1")]
    assert bad_cell["status"] == "ok" and bad_cell["sanity"] == "suspect"
    assert bad_cell["sanity_reason"].startswith("loss rose 6.95 → 5.5e+04")
    assert tables.cell_text(bad_cell).endswith(" SUSPECT")
    assert "SUSPECT" not in tables.cell_text(cells.loc[("pytorch", "real", "1x1")])

    markdown = tables.markdown(cells.reset_index(), PROTOCOL)
    assert "1 of 4 cells pass" in markdown
    assert "tensorflow resnet50 bs8 1x1 single real: SUSPECT: loss rose 6.95 → 5.5e+04" in markdown


def test_the_report_shows_the_sanity_column_and_why(tmp_path):
    good, bad = make_coords(data="real"), make_coords(data="real", framework="tensorflow")
    write_losses(tmp_path, good, [FALLING])
    write_losses(tmp_path, bad, [RISING])
    runs = runs_table([good, bad], tmp_path)
    cells = cells_table(runs, "mean")
    html = render(cells, runs, PROTOCOL, {})
    table = html[html.index("<h3>Sanity</h3>") :]
    table = table[: table.index("</table>")]
    assert table.count('class="verdict">PASS<') == 1 and table.count('class="verdict">SUSPECT<') == 1
    assert "6.7 → 2.25" in table and "loss rose 6.95 → 5.5e+04" in table
    # The throughput table marks the cell, and its note gives the reason.
    throughput = html[: html.index("<h3>Sanity</h3>")]
    assert throughput.count("status-ok sanity-suspect") == 1
    assert labels.sanity_label("suspect", cells.loc[1, "sanity_reason"]) in throughput


def test_runs_without_losses_get_no_verdict(tmp_path):
    coords = make_coords()
    write_losses(tmp_path, coords, [[]])
    runs = runs_table([coords], tmp_path)
    assert runs.loc[0, "status"] == "invalid"  # no measured steps: no number, no verdict either
    cells = cells_table(runs, "mean")
    assert cells.loc[0, "sanity"] == ""


def test_the_audit_recomputes_the_sanity_columns(tmp_path):
    good, bad = make_coords(data="real"), make_coords(data="real", framework="tensorflow")
    write_losses(tmp_path, good, [FALLING])
    write_losses(tmp_path, bad, [RISING])
    experiment = Grid(runs=[good, bad], unavailable={}, protocol=PROTOCOL | {"loss_tolerance": 0.5})
    runs, cells = tables.build(experiment, tmp_path)
    tables_dir = tmp_path / "tables"
    tables_dir.mkdir()
    (tables_dir / "runs.csv").write_bytes(tables.csv_bytes(runs))
    (tables_dir / "cells.csv").write_bytes(tables.csv_bytes(cells))
    assert audit.audit(experiment, {}, tables_dir, tmp_path, images_dir=tmp_path).passed
    # The tolerance is part of the protocol the audit recomputes with: another one, other tables.
    assert runs["sanity"].tolist() == ["pass", "suspect"]
    lenient = Grid(runs=[good, bad], unavailable={}, protocol=PROTOCOL | {"loss_tolerance": 1e5})
    assert tables.build(lenient, tmp_path)[0]["sanity"].tolist() == ["pass", "pass"]
    assert not audit.audit(lenient, {}, tables_dir, tmp_path, images_dir=tmp_path).passed


def test_the_learning_rate_scales_with_the_global_batch_and_the_planting_factor(monkeypatch):
    spec = SimpleNamespace(batch=8, coords=make_coords(scale="2x2", strategy="ddp"))
    monkeypatch.delenv(recipe.LR_SCALE_ENV, raising=False)
    assert recipe.sgd_lr(spec) == pytest.approx(0.05 * 32 / 256)
    monkeypatch.setenv(recipe.LR_SCALE_ENV, "1e5")
    assert recipe.sgd_lr(spec) == pytest.approx(1e5 * 0.05 * 32 / 256)
    for bad in ("fast", "0", "-1"):
        monkeypatch.setenv(recipe.LR_SCALE_ENV, bad)
        with pytest.raises(ValueError, match=f"DLBENCH_LR_SCALE='{bad}'"):
            recipe.sgd_lr(spec)
