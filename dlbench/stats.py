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


def window_throughput(samples: int, seconds: float) -> float:
    return samples / seconds if seconds > 0 else math.nan
