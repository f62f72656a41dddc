"""All statistics dlbench reports, in one place (analysis environment: numpy)."""

from __future__ import annotations

import math

import numpy as np


def mean(values) -> float:
    values = np.asarray(values, dtype=float)
    return float(values.mean()) if values.size else math.nan


def median(values) -> float:
    values = np.asarray(values, dtype=float)
    return float(np.median(values)) if values.size else math.nan


def olympic_mean(values) -> float:
    """Mean after dropping the best and the worst value (MLPerf style).

    With fewer than three values there is nothing to drop symmetrically: plain mean.
    """
    values = np.sort(np.asarray(values, dtype=float))
    if values.size < 3:
        return mean(values)
    return float(values[1:-1].mean())


STATISTICS = {"mean": mean, "median": median, "olympic_mean": olympic_mean}


def statistic(name: str, values) -> float:
    return STATISTICS[name](values)


def std(values) -> float:
    """Sample standard deviation (ddof=1); NaN for fewer than two values."""
    values = np.asarray(values, dtype=float)
    return float(values.std(ddof=1)) if values.size > 1 else math.nan


def cv(values) -> float:
    """Coefficient of variation: sample std / mean."""
    m = mean(values)
    return std(values) / m if m and not math.isnan(m) else math.nan


def _olympic_axis(values, axis=-1):
    values = np.sort(values, axis=axis)
    n = values.shape[axis]
    if n < 3:
        return values.mean(axis=axis)
    return np.take(values, range(1, n - 1), axis=axis).mean(axis=axis)


_VECTORISED = {"mean": np.mean, "median": np.median, "olympic_mean": _olympic_axis}


def bootstrap_ci(name: str, values, confidence: float = 0.95, resamples: int = 2000) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the named statistic.

    numpy resampling in one vectorised call (scipy.stats.bootstrap gives the same interval
    but costs ~40 ms a call, too slow for thousands of cells; a test checks they agree).
    Seeded, so that recomputing the tables from the same logs gives the same bytes (audit).
    """
    values = np.asarray(values, dtype=float)
    if values.size < 2:
        return (math.nan, math.nan)
    if np.all(values == values[0]):
        return (float(values[0]), float(values[0]))
    rng = np.random.default_rng(0)
    samples = values[rng.integers(0, values.size, size=(resamples, values.size))]
    estimates = _VECTORISED[name](samples, axis=-1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(estimates, [alpha, 1 - alpha])
    return float(low), float(high)


def window_throughput(samples: int, seconds: float) -> float:
    return samples / seconds if seconds > 0 else math.nan


def finite(value) -> bool:
    """A number that is neither NaN nor infinite (None and text are not numbers)."""
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False
