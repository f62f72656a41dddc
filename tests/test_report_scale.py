"""The report at the seeds' scale (issue #29): a CAICT-sized campaign (tests/caict_campaign.py:
5 frameworks x 3 models x 3 batches x 2 data x 4 scales, 720 runs' step logs written by the
fixture, not by training) through the one derivation and the report, then read in headless
Chromium with the limits of tests/test_report_browser.check_scale. docs/report.md says how the
report scales."""

from __future__ import annotations

import re
import time

import pandas as pd
import pytest

from dlbench import report
from dlbench.plots import figures as figs
from dlbench.report.regenerate import regenerate
from tests.caict_campaign import caict_config, write_campaign
from tests.test_report import CONFIG, PROTOCOL, cell, hand_made_runs
from tests.test_report_browser import CHROMIUM, SCREENSHOT_DIR, Chromium, check_scale

FRAMEWORK_NAMES = ("JAX", "MXNet", "OneFlow", "PyTorch", "TensorFlow")


@pytest.fixture(scope="module")
def caict(tmp_path_factory):
    """(report path, its HTML, the cells) of the CAICT-sized campaign."""
    root = tmp_path_factory.mktemp("caict")
    config = caict_config()
    started = time.monotonic()
    experiment = write_campaign(root / "raw", config)
    written = time.monotonic()
    paths = regenerate(experiment, root / "raw", root / "out", config)
    print(f"\n{len(experiment.runs)} runs written in {written - started:.1f} s, derived and reported in "
          f"{time.monotonic() - written:.1f} s")  # fmt: skip
    cells = pd.read_csv(paths["cells.csv"], dtype={"batch": str})
    return paths["index.html"], paths["index.html"].read_text(encoding="utf-8"), cells


def test_the_campaign_has_the_caict_grid(caict):
    _, html, cells = caict
    assert len(cells) == 5 * 3 * 3 * 2 * 4
    assert (cells["devices"].unique() == [1, 4, 8, 16]).all() or set(cells["devices"]) == {1, 4, 8, 16}
    size = re.search(r'id="grid-size">(.*?)</p>', html, flags=re.DOTALL).group(1)
    assert "5 frameworks × 3 models × 3 batch sizes × 2 kinds of data × 1 precision × 4 scales" in size
    assert "360 cells" in size and "720 runs" in size


def test_the_report_grows_with_the_models_not_the_runs(caict):
    _, html, _ = caict
    images = re.findall(r'<img src="([^"]+)"', html)
    # The summary; per model throughput, scaling, real vs synthetic, loss curves; stability,
    # drift; the published campaign.
    assert len(images) == 1 + 3 * 4 + 2 + 1, len(images)
    for model in ("resnet50", "vgg16", "bert_base"):
        section = html[html.index(f'<section id="model-{model}"') :]
        section = section[: section.index("</section>")]
        assert "120 cells in 6 tables" in section
        assert section.count('<details class="table"') == 6 and section.count('<details class="table" open>') == 1
        assert '<details class="findings">' in section  # many findings: grouped by topic
    checks = html[html.index('<section id="checks"') :]
    flagged = int(re.search(r"(\d+) TREND", checks).group(1)) + int(re.search(r"(\d+) BIMODAL", checks).group(1))
    assert flagged > 6 and f"the\n6 of {flagged} flagged runs" in checks
    table = checks[checks.index('id="stability"') : checks.index("</table>", checks.index('id="stability"'))]
    assert table.count("<tr>") == flagged + 1  # every flagged run, none dropped


def test_proper_names_everywhere(caict):
    _, html, _ = caict
    title = re.search(r"<title>(.*?)</title>", html).group(1)
    assert all(name in title for name in FRAMEWORK_NAMES), title
    h1 = re.search(r"<h1>(.*?)</h1>", html, flags=re.DOTALL).group(1)
    assert "JAX, MXNet, OneFlow, PyTorch and TensorFlow" in h1
    # Not in a script, nor the coordinates of unmatched cells (their config names, in <code>).
    body = re.sub(
        r"<script>.*?</script>|<ul class=\"unmatched\">.*?</ul>", " ", html[html.index("<body>") :], flags=re.DOTALL
    )
    # Nor addresses (a published row's source: github.com/pytorch/torchtitan/...).
    text = re.sub(r"(cell|model)-[\w-]+|\w+\.txt|[\w/.]+\.csv|\S*github\.com/\S+", " ", re.sub(r"<[^>]+>", " ", body))
    assert re.search(r"\b(jax|mxnet|oneflow|pytorch|tensorflow)\b(?![.\w]| \d)", text) is None


@pytest.mark.skipif(not CHROMIUM or not __import__("pathlib").Path(CHROMIUM).exists(), reason="no Chromium")
def test_caict_report_in_chromium(caict, tmp_path):
    path, _, _ = caict
    profile = tmp_path / "profile"
    profile.mkdir()
    browser = Chromium(profile)
    try:
        measured = check_scale(browser, path)
        assert measured["images"] == 16  # 13 + a loss figure per model
        browser.screenshot(SCREENSHOT_DIR / "screenshot-caict.png")
        # The run-level table sorts and filters in the page (report.js).
        rows = "Array.from(document.querySelectorAll('#stability tbody tr'))"
        shown = f"{rows}.filter(r => !r.hidden).length"
        total = browser.evaluate(f"{rows}.length")
        browser.evaluate(
            "(() => { const i = document.querySelector('input[data-filter=stability]');"
            " i.value = 'BIMODAL'; i.dispatchEvent(new Event('input')); return true; })()"
        )
        bimodal = browser.evaluate(shown)
        assert 0 < bimodal < total
        browser.evaluate("document.querySelectorAll('#stability thead th')[1].click(); true")
        verdicts = browser.evaluate(f"{rows}.map(r => r.cells[1].textContent)")
        assert verdicts == sorted(verdicts)
        assert browser.console_errors() == []
    finally:
        browser.close()


def test_one_scale_draws_no_speedup_panel():
    """Real data at one scale beside synthetic data at two: the scaling figure has the synthetic
    panel only, and the report says why the real one is missing."""
    rows = [
        cell("pytorch", "1x1", 100.0),
        cell("pytorch", "1x2", 180.0),
        cell("pytorch", "1x1", 90.0, data="real"),
        cell("tensorflow", "1x1", 80.0, data="real"),
    ]
    cells = pd.DataFrame(rows)
    cells["speedup"] = [1.0, 1.8, 1.0, 1.0]
    cells["efficiency"] = [1.0, 0.9, 1.0, 1.0]
    cells["noisy"] = False
    drawn, one_scale = figs.scaled_facets(cells)
    assert [k for k, _ in drawn] == [("resnet50", "8", "synthetic", "fp32")]
    assert one_scale == [("resnet50", "8", "real", "fp32")]
    html = report.render(cells, hand_made_runs(cells), PROTOCOL, CONFIG, generated="x")
    assert "One scale, so no speedup: batch 8/device, fp32, real data." in html
