import math

import numpy as np
import pytest

from dlbench.analysis import stats


def test_mean_median_olympic_against_hand_values():
    values = [10.0, 12.0, 11.0, 30.0, 1.0]
    assert stats.mean(values) == pytest.approx(64 / 5)
    assert stats.median(values) == 11.0
    # drop 1 and 30: (10 + 11 + 12) / 3
    assert stats.olympic_mean(values) == pytest.approx(11.0)


def test_olympic_mean_drops_only_one_of_tied_extremes():
    assert stats.olympic_mean([5, 5, 5, 9]) == pytest.approx(5.0)
    assert stats.olympic_mean([2, 4]) == pytest.approx(3.0)  # too few to drop: plain mean


def test_std_and_cv():
    assert stats.std([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx(2.138089935)
    assert stats.cv([10, 10, 10]) == 0.0
    assert math.isnan(stats.std([3.0]))


def test_statistic_by_preset_name():
    assert stats.statistic("median", [1, 2, 100]) == 2
    with pytest.raises(KeyError):
        stats.statistic("geomean", [1])


def test_bootstrap_ci_brackets_the_statistic_and_is_reproducible():
    values = [10.0, 11.0, 12.0, 13.0, 30.0]
    low, high = stats.bootstrap_ci("median", values)
    assert 10.0 <= low <= stats.median(values) <= high <= 30.0
    assert (low, high) == stats.bootstrap_ci("median", values)
    low, high = stats.bootstrap_ci("olympic_mean", values)
    assert low <= stats.olympic_mean(values) <= high
    assert math.isnan(stats.bootstrap_ci("mean", [5.0])[0])
    assert stats.bootstrap_ci("mean", [5.0, 5.0]) == (5.0, 5.0)


def test_bootstrap_agrees_with_scipy_percentile_bootstrap():
    import numpy as np
    from scipy.stats import bootstrap

    values = np.array([31.0, 29.5, 30.2, 35.0, 28.1, 30.9, 29.9])
    ours = stats.bootstrap_ci("mean", values, resamples=20000)
    ref = bootstrap((values,), np.mean, method="percentile", n_resamples=20000, rng=np.random.default_rng(1))
    assert ours[0] == pytest.approx(ref.confidence_interval.low, rel=0.01)
    assert ours[1] == pytest.approx(ref.confidence_interval.high, rel=0.01)


# ------------------------------------------------------------------ equal only inside the band

BAND = (0.95, 1.05)


@pytest.mark.parametrize(
    ("ci", "position"),
    [
        ((0.97, 1.03), "same"),  # wholly inside
        ((0.95, 1.05), "same"),  # the edges belong to the band
        ((0.98, 1.08), "inconclusive"),  # crosses the high edge
        ((0.90, 1.10), "inconclusive"),  # crosses both
        ((1.06, 1.20), "higher"),
        ((0.70, 0.94), "lower"),
        ((math.nan, math.nan), "few"),
    ],
)
def test_band_position(ci, position):
    assert stats.band_position(ci, BAND) == position


def test_decide_factor_is_the_square_of_the_interval_over_the_distance_to_the_edge():
    # 1.00 [0.96, 1.10]: crosses 1.05 only; towards it the CI extends 0.10, the edge is 0.05 away.
    assert stats.decide_factor(1.0, (0.96, 1.10), BAND) == pytest.approx((0.10 / 0.05) ** 2)
    # Crossing both edges, the one that is harder to clear decides: 0.02 from 0.95, 0.08 from 1.05.
    assert stats.decide_factor(0.97, (0.90, 1.02), BAND) == pytest.approx((0.07 / 0.02) ** 2)
    assert stats.decide_factor(1.0, (0.97, 1.03), BAND) == 1.0  # inside already
    assert math.isnan(stats.decide_factor(1.05, (1.0, 1.1), BAND))  # the estimate on the edge
    assert math.isnan(stats.decide_factor(1.0, (math.nan, math.nan), BAND))  # no interval


@pytest.mark.parametrize(("centre", "decided"), [(0.045, "same"), (0.07, "higher")])
def test_the_projected_sample_decides_a_crossing_interval_and_half_of_it_does_not(centre, decided):
    """Repeating the same gaps k times keeps the estimate and the spread while n grows k-fold:
    the bootstrap CI must clear the band's edge at the projected size and still cross it at
    half of it."""
    gaps = centre + np.random.default_rng(7).normal(0, 0.1, 12)
    band = (-0.05, 0.05)
    ci = stats.bootstrap_ci("mean", gaps)
    assert stats.band_position(ci, band) == "inconclusive"
    factor = stats.decide_factor(stats.mean(gaps), ci, band)
    assert factor > 4
    enough = np.tile(gaps, math.ceil(factor))
    assert stats.band_position(stats.bootstrap_ci("mean", enough), band) == decided
    half = np.tile(gaps, int(factor / 2))
    assert stats.band_position(stats.bootstrap_ci("mean", half), band) == "inconclusive"


NO_TEST = {"p": math.nan, "min_p": math.nan}


def test_comparison_verdict_is_same_only_for_a_whole_interval_inside_the_band():
    assert stats.comparison_verdict((0.97, 1.04), 0.05, (5, 5), NO_TEST, estimate=1.0) == (
        "same",
        "95% CI within ±5%",
    )
    verdict, why = stats.comparison_verdict((0.97, 1.09), 0.05, (5, 5), NO_TEST, estimate=1.01)
    needed = math.ceil(5 * ((1.09 - 1.01) / (1.05 - 1.01)) ** 2)  # 20
    assert verdict == "inconclusive"
    assert why == f"the 95% CI crosses the ±5% band: about {needed} and {needed} repeats (now 5 and 5) " + (
        "to decide it, if the estimate holds"
    )
    assert stats.comparison_verdict((1.07, 1.2), 0.05, (5, 5), NO_TEST)[0] == "faster"
    assert stats.comparison_verdict((0.7, 0.9), 0.05, (5, 5), NO_TEST)[0] == "slower"


def test_comparison_verdict_against_a_published_number_projects_the_measured_side_alone():
    verdict, why = stats.comparison_verdict((0.92, 1.02), 0.05, (1, 4), NO_TEST, estimate=0.97)
    assert verdict == "inconclusive" and "about 25 repeats (now 4)" in why  # 4 × (0.05 / 0.02)²


def test_comparison_verdict_without_an_interval_cannot_be_decided():
    verdict, why = stats.comparison_verdict((math.nan, math.nan), 0.05, (1, 1), NO_TEST)
    assert verdict == "inconclusive" and why.endswith("cannot be decided by more repeats")
    verdict, why = stats.comparison_verdict((1.0, 1.1), 0.05, (5, 5), NO_TEST, estimate=1.05)
    assert verdict == "inconclusive" and why.endswith("cannot be decided by more repeats")  # on the edge
