"""Comparing findings say how sure they are: intervals from the repeats; 'level' only when the
whole interval lies inside the tolerance band, 'inconclusive' (with the repeats it would take)
when it crosses it."""

import math

import pandas as pd
import pytest

from dlbench.analysis import stats
from dlbench.analysis.aggregate import cells_table
from dlbench.findings import grid as findings
from dlbench.report import render

PROTOCOL = {"preset": "quick", "warmup_steps": 1, "measured_steps": 3, "repeats": 5, "statistic": "mean"}
CONFIG = {"grid": {"frameworks": ["pytorch", "tensorflow"], "models": ["resnet50"]}, "run": {"device": "cpu"}}


def runs(throughputs: dict[str, list[float]]) -> pd.DataFrame:
    """runs.csv rows: each framework's ResNet-50 at 1x1, one row a repeat."""
    return pd.DataFrame(
        {
            "framework": fw,
            "model": "resnet50",
            "precision": "fp32",
            "data": "synthetic",
            "batch": "8",
            "scale": "1x1",
            "strategy": "single",
            "activation_checkpointing": "none",
            "grad_accum": 1,
            "pp_schedule": "none",
            "pp_microbatches": 1,
            "repeat": i,
            "status": "ok",
            "reason": "",
            "throughput": value,
        }
        for fw, values in throughputs.items()
        for i, value in enumerate(values)
    )


def ranking(throughputs: dict[str, list[float]], tolerance: float = stats.SAME_TOLERANCE):
    table = runs(throughputs)
    cells = cells_table(table, "mean")
    (found,) = [f for f in findings.findings(cells, 0.1, table, tolerance) if f.topic == "compare"]
    return found, cells, table


def comparison(throughputs: dict[str, list[float]]) -> tuple[str, str]:
    found, cells, table = ranking(throughputs)
    return found.text, render(cells, table, PROTOCOL, CONFIG, generated="now")


LEVEL = {"pytorch": [100, 96, 104, 99, 101], "tensorflow": [98, 103, 95, 100, 99]}


def test_a_whole_interval_inside_the_band_is_level():
    text, html = comparison(LEVEL)
    assert "faster by 1.01× [95% CI 0.98–1.04]" in text  # wholly inside 0.95–1.05
    assert text.endswith("PyTorch and TensorFlow are level, the whole 95% CI within ±5%.")
    assert "PyTorch and TensorFlow are level" in html


def test_the_same_interval_against_a_narrower_band_is_inconclusive():
    found, _, _ = ranking(LEVEL, tolerance=0.01)
    assert "level" not in found.text and ": inconclusive, the 95% CI crosses the ±1% band: about " in found.text


def test_an_interval_crossing_the_band_is_inconclusive_with_the_repeats_it_would_take():
    found, _, _ = ranking({"pytorch": [100, 96, 104, 99, 101], "tensorflow": [95, 98, 93, 97, 96]})
    ratio = found.numbers[-1]
    assert ratio.low < 1.05 < ratio.high  # crosses the high edge only
    needed = math.ceil(5 * ((ratio.high - ratio.value) / (1.05 - ratio.value)) ** 2)
    assert found.text.endswith(
        f"PyTorch faster by 1.04× [95% CI 1.02–1.07]: inconclusive, the 95% CI crosses the ±5% band: "
        f"about {needed} and {needed} repeats (now 5 and 5) to decide it, if the estimate holds."
    )
    assert "level" not in found.text


def test_separated_intervals_name_the_faster_and_by_how_much():
    text, html = comparison({"pytorch": [100, 96, 104, 99, 101], "tensorflow": [80, 82, 79, 81, 78]})
    assert text == (
        "At 1x1, ResNet-50 throughput by framework: PyTorch 100.0 images/s; then TensorFlow 80.0, "
        "PyTorch faster by 1.25× [95% CI 1.22–1.28]."
    )
    assert "PyTorch faster by" in html and "apart" not in text


def test_too_few_repeats_or_a_noisy_cell_is_uncertain():
    few, _ = comparison({"pytorch": [100, 104], "tensorflow": [80, 81]})
    assert few.endswith("PyTorch faster by 1.27× [95% CI 1.23–1.30]: uncertain, too few repeats (2 and 2).")
    noisy, _ = comparison({"pytorch": [100, 70, 130, 100, 100], "tensorflow": [50, 51, 49, 50, 50]})
    assert noisy.endswith(": uncertain, a noisy cell.")


def test_a_ranking_states_each_step():
    text, _ = comparison({"pytorch": [100, 99, 101, 100], "tensorflow": [80, 79, 81, 80], "jax": [79.5, 80.5, 80, 81]})
    steps = text.split("; then ")
    assert steps[1].startswith("JAX 80.2, PyTorch faster by 1.25×") and "apart" not in steps[1]
    assert steps[2].startswith("TensorFlow 80.0, JAX faster by 1.00×") and "JAX and TensorFlow are level" in steps[2]


@pytest.mark.parametrize(
    ("ci", "repeats", "noisy", "verdict"),
    [
        ((1.1, 1.3), (3, 3), False, "higher"),
        ((0.7, 0.9), (5, 3), False, "lower"),
        ((0.97, 1.04), (5, 5), False, "same"),
        ((0.97, 1.04), (5, 5), True, "same"),  # the interval already holds the noise
        ((0.9, 1.1), (5, 5), False, "inconclusive"),  # holds 1, but also ±10%
        ((1.02, 1.2), (5, 5), False, "inconclusive"),  # excludes 1, but not the band
        ((1.1, 1.3), (3, 3), True, "noisy"),
        ((1.1, 1.3), (2, 3), False, "few"),
        ((float("nan"), float("nan")), (3, 3), False, "few"),
    ],
)
def test_ratio_verdict(ci, repeats, noisy, verdict):
    assert stats.ratio_verdict(ci, repeats, noisy) == verdict
