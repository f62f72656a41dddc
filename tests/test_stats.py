import math

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
