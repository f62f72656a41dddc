"""Campaign history (#18): a planted step change is found, with the provenance change beside it."""

import json

from dlbench import report
from dlbench.campaigns import history, load
from dlbench.campaigns.__main__ import main
from tests.test_campaigns import PROTOCOL, PUBLISHED, STEADY, measured_campaign, scaled_copy


def _dated(root, date, version):
    path = root / "results" / "campaign.json"
    manifest = json.loads(path.read_text())
    manifest["date"] = date
    manifest["software"]["frameworks"]["pytorch"] = version
    path.write_text(json.dumps(manifest))


def test_a_planted_step_change_is_found_with_its_provenance(tmp_path):
    coords = measured_campaign(tmp_path / "c1", STEADY, scales=("1x1", "1x2"))
    scaled_copy(tmp_path / "c1", tmp_path / "c2", coords, 1.004)  # noise-sized drift: no change
    scaled_copy(tmp_path / "c1", tmp_path / "c3", coords, 0.85)  # the planted step
    scaled_copy(tmp_path / "c1", tmp_path / "c4", coords, 0.852)
    for i, version in enumerate(["2.1", "2.1", "2.2", "2.2"], start=1):
        _dated(tmp_path / f"c{i}", f"2026-11-0{i}T10:00:00", version)
    ids = {i: load(tmp_path / f"c{i}").id for i in (1, 2, 3, 4)}
    assert len(set(ids.values())) == 4  # each made from its own raw logs
    found = history.detect([load(tmp_path / f"c{i}") for i in (3, 1, 4, 2)])  # any order: sorted by date
    assert [c["id"] for c in found.campaigns] == [ids[1], ids[2], ids[3], ids[4]]
    assert len(found.changes) == 2  # one per cell, both at c2 → c3
    assert set(found.changes["before"]) == {ids[2]} and set(found.changes["after"]) == {ids[3]}
    assert found.changes["ratio"].round(2).tolist() == [0.85, 0.85]
    assert "software.frameworks.pytorch: 2.1 → 2.2" in found.changes["provenance"].iloc[0]


def test_history_command_writes_its_figure_and_needs_three_campaigns(tmp_path):
    coords = measured_campaign(tmp_path / "c1", STEADY)
    for i in (2, 3):
        scaled_copy(tmp_path / "c1", tmp_path / f"c{i}", coords, 1.0)
    assert main(["history", *(str(tmp_path / f"c{i}") for i in (1, 2, 3)), "--out", str(tmp_path / "h")]) == 0
    assert (tmp_path / "h" / "history.png").stat().st_size > 0
    assert (tmp_path / "h" / "changes.csv").read_text().count("\n") == 1  # header only: no change
    try:
        history.detect([load(tmp_path / "c1"), load(tmp_path / "c2")])
    except ValueError as exc:
        assert "3 or more campaigns, got 2" in str(exc)
    else:
        raise AssertionError("two campaigns made a history")


def test_the_report_shows_the_history_of_earlier_campaigns_and_this_run(tmp_path):
    coords = measured_campaign(tmp_path / "c1", STEADY)
    scaled_copy(tmp_path / "c1", tmp_path / "c2", coords, 1.0)
    scaled_copy(tmp_path / "c1", tmp_path / "c3", coords, 0.7)
    for i, version in enumerate(["2.1", "2.1", "2.2"], start=1):
        _dated(tmp_path / f"c{i}", f"2026-11-0{i}T10:00:00", version)
    tables = tmp_path / "c3" / "results" / "tables"
    config = {"references": {"history": [str(tmp_path / "c1"), str(tmp_path / "c2")]}}
    html = report.render_files(tables / "cells.csv", tables / "runs.csv", PROTOCOL, config, published_path=PUBLISHED)
    assert "History: this run after earlier campaigns" in html
    before, after = load(tmp_path / "c2").id, load(tmp_path / "c3").id
    assert f"<td>{before} → {after}</td><td>×0.70</td><td>software.frameworks.pytorch: 2.1 → 2.2</td>" in html
    assert 'alt="throughput per campaign, per cell, with the change points"' in html
