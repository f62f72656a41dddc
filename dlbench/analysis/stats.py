"""All statistics dlbench reports, in one place (analysis environment: numpy)."""

from __future__ import annotations

import math

import numpy as np

from dlbench import labels


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


# The protocol's statistics by name (dlbench.protocol.STATISTICS), not columns: this module also
# runs in the framework environments (the benchmarks' intervals), which have no pandas.
STATISTICS = {"mean": mean, "median": median, "olympic_mean": olympic_mean}  # not a column


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


_VECTORISED = {"mean": np.mean, "median": np.median, "olympic_mean": _olympic_axis}  # not a column


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


def allreduce_bandwidth(size_bytes: float, seconds: float, ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s of an all-reduce of `size_bytes` over `ranks` that took `seconds`,
    as nccl-tests define them (doc/PERFORMANCE.md): algbw = size / time; busbw = algbw ×
    2(n−1)/n, the bandwidth each link carries, comparable across rank counts."""
    if not seconds > 0:
        return math.nan, math.nan
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * 2 * (ranks - 1) / ranks


def finite(value) -> bool:
    """A number that is neither NaN nor infinite (None and text are not numbers)."""
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


# ---------------------------------------------------------------- comparing two campaigns


def ratio_ci(name: str, reference, candidate, confidence: float = 0.95, resamples: int = 2000) -> tuple[float, float]:
    """Percentile bootstrap CI of statistic(candidate) ÷ statistic(reference).

    Each side is a list of repeat throughputs, resampled independently; a side with one
    value (a published statistic) is held fixed. NaN when neither side has two repeats.
    Seeded: the same logs give the same interval.
    """
    sides = [np.asarray(v, dtype=float) for v in (reference, candidate)]
    if all(s.size < 2 for s in sides) or any(s.size == 0 for s in sides):
        return (math.nan, math.nan)
    rng = np.random.default_rng(0)
    estimates = []
    for s in sides:
        if s.size < 2:
            estimates.append(np.full(resamples, s[0]))
        else:
            estimates.append(_VECTORISED[name](s[rng.integers(0, s.size, size=(resamples, s.size))], axis=-1))
    ratios = estimates[1] / estimates[0]
    alpha = (1 - confidence) / 2
    low, high = np.quantile(ratios, [alpha, 1 - alpha])
    return float(low), float(high)


def mann_whitney(reference, candidate) -> dict:
    """Two-sided Mann-Whitney U of candidate against reference, with the rank-biserial effect
    size (+1: every candidate repeat above every reference repeat) and the smallest p-value
    these sample sizes can reach at all (3 + 3 repeats: 0.1)."""
    from scipy.stats import mannwhitneyu

    a, b = np.asarray(reference, dtype=float), np.asarray(candidate, dtype=float)
    if a.size < 2 or b.size < 2:
        return {"u": math.nan, "p": math.nan, "effect": math.nan, "min_p": math.nan}
    result = mannwhitneyu(b, a, alternative="two-sided", method="exact" if a.size + b.size <= 16 else "auto")
    return {
        "u": float(result.statistic),
        "p": float(result.pvalue),
        "effect": float(2 * result.statistic / (a.size * b.size) - 1),
        "min_p": float(2 / math.comb(a.size + b.size, a.size)),
    }


MIN_REPEATS = 3  # fewer repeats on a side: a comparison is "uncertain" whatever its interval
SAME_TOLERANCE = 0.05  # the ± band a ratio's whole 95% CI must lie in to be "same" (findings, compare)


# ---------------------------------------------------------------- equal only inside the band


def band_position(ci: tuple[float, float], band: tuple[float, float]) -> str:
    """Where a 95% CI lies against a tolerance band (its low and high edge, inclusive): SAME
    (wholly inside: the only place two things may be called equal), HIGHER or LOWER (wholly
    beyond), INCONCLUSIVE (it crosses an edge), FEW (no interval)."""
    low, high = ci
    if not (finite(low) and finite(high)):
        return labels.FEW
    if band[0] <= low and high <= band[1]:
        return labels.SAME
    if low > band[1] or high < band[0]:
        return labels.HIGHER if low > band[1] else labels.LOWER
    return labels.INCONCLUSIVE


def decide_factor(estimate: float, ci: tuple[float, float], band: tuple[float, float]) -> float:
    """How many times its present sample (repeats, matched steps) a comparison whose 95% CI crosses
    an edge of `band` needs for the CI to clear it, by the usual sample-size projection: a CI's
    half-width shrinks as 1/sqrt(n), so if the point estimate holds, the CI clears an edge at
    distance d from the estimate once its extent w towards that edge has shrunk to d:
    n_needed ≈ n × (w / d)². The largest over the edges it crosses (1: it crosses none). A minimum:
    at that size the CI just reaches the edge, and the estimate itself moves with new repeats.
    NaN, "cannot be decided by more repeats", where there is no CI or the estimate sits on an
    edge it crosses."""
    low, high = ci
    if not (finite(low) and finite(high) and finite(estimate)):
        return math.nan
    factor = 1.0
    for edge in band:
        if not low < edge < high:
            continue
        distance = abs(edge - estimate)
        if distance <= 1e-12 * max(1.0, abs(edge)):
            return math.nan
        towards = high - estimate if edge > estimate else estimate - low
        factor = max(factor, (towards / distance) ** 2)
    return factor


def ratio_band(tolerance: float) -> tuple[float, float]:
    return (1 - tolerance, 1 + tolerance)


def comparison_verdict(
    ci: tuple[float, float],
    tolerance: float,
    repeats: tuple[int, int],
    test: dict,
    alpha: float = 0.05,
    min_repeats: int = MIN_REPEATS,
    estimate: float = math.nan,
) -> tuple[str, str]:
    """faster / slower / same / inconclusive, and why, from the ratio's CI (candidate ÷ reference).

    same: the whole CI within ±tolerance; faster/slower: the whole CI beyond it (and, where
    both sides have runs and their sizes can reach `alpha`, the U test below `alpha`); a CI that
    crosses the band is inconclusive, with the repeats it would take to decide it on the sides
    with runs (decide_factor from `estimate`, the ratio; the CI's middle when not given).
    """
    with_runs = [n for n in repeats if n > 1]
    if not with_runs:
        why = "no repeats on either side (published statistics): the ratio has no confidence interval"
        return labels.INCONCLUSIVE, f"{why}, {labels.CANNOT_DECIDE}"
    if min(with_runs) < min_repeats:
        return (
            labels.INCONCLUSIVE,
            f"too few repeats ({repeats[0]} and {repeats[1]}; {min_repeats} needed on a side with runs)",
        )
    band, position = ratio_band(tolerance), band_position(ci, ratio_band(tolerance))
    if position == labels.FEW:
        return labels.INCONCLUSIVE, f"no confidence interval: {labels.CANNOT_DECIDE}"
    if position == labels.SAME:
        return labels.SAME, f"95% CI within {labels.band(tolerance)}"
    if position == labels.INCONCLUSIVE:
        estimate = estimate if finite(estimate) else (ci[0] + ci[1]) / 2
        factor = decide_factor(estimate, ci, band)
        return labels.INCONCLUSIVE, labels.crosses(tolerance, tuple(with_runs), factor)
    if finite(test.get("p")) and test["min_p"] < alpha and test["p"] >= alpha:
        return labels.INCONCLUSIVE, f"CI beyond {labels.band(tolerance)} but Mann-Whitney p = {test['p']:.3g}"
    direction = labels.FASTER if position == labels.HIGHER else labels.SLOWER
    return direction, f"95% CI beyond {labels.band(tolerance)}"


def quarter_means(values) -> tuple[float, float]:
    """The mean of a series' first quarter and of its last (a quarter is at least one value):
    whether a loss fell over a run, robust to single noisy steps."""
    values = np.asarray(values, dtype=float)
    if not values.size:
        return (math.nan, math.nan)
    n = max(1, values.size // 4)
    return mean(values[:n]), mean(values[-n:])


# ---------------------------------------------------------------- how sure a comparison is


def ratio_verdict(
    ci: tuple[float, float], repeats: tuple[int, int], noisy: bool = False, tolerance: float = SAME_TOLERANCE
) -> str:
    """How sure `candidate ÷ reference` is, from its 95% CI (`ratio_ci`) and the repeat counts:
    'few' (under MIN_REPEATS on a side, or no interval), 'same' (the whole CI within 1 ±
    tolerance: the only verdict that calls the two equal), 'inconclusive' (the CI crosses an edge
    of that band: decide_factor says how many repeats it would take to decide it), 'noisy' (the CI
    wholly beyond the band but a cell is noisy), 'higher' or 'lower'."""
    position = band_position(ci, ratio_band(tolerance))
    if min(repeats) < MIN_REPEATS or position == labels.FEW:
        return labels.FEW
    if noisy and position in (labels.HIGHER, labels.LOWER):
        return labels.NOISY
    return position


# ---------------------------------------------------------------- within-run stability


def window_trend(values, x=None, confidence: float = 0.95) -> dict:
    """Whether a series drifts: the Theil-Sen slope against x (default: the index; robust to
    single slow steps) with its CI (scipy), the relative change the slope and its CI make over
    the span of x, and the medians of the first and last third (the evidence people read)."""
    from scipy.stats import theilslopes

    values = np.asarray(values, dtype=float)
    x = np.arange(values.size, dtype=float) if x is None else np.asarray(x, dtype=float)
    third = max(2, values.size // 3)
    result = theilslopes(values, x, alpha=confidence)
    middle = float(np.median(values))
    span = float(np.ptp(x)) / middle if middle else math.nan
    return {
        "slope": float(result.slope),
        "slope_low": float(result.low_slope),
        "slope_high": float(result.high_slope),
        "change": float(result.slope * span),
        "change_low": float(result.low_slope * span),
        "change_high": float(result.high_slope * span),
        "first": float(np.median(values[:third])),
        "last": float(np.median(values[-third:])),
    }


def two_modes(values, grid: int = 256) -> dict:
    """The two highest peaks of the series' kernel density (a Gaussian kernel with Scott's
    bandwidth, as scipy's gaussian_kde: the same density to 1e-15, 200 times faster on one
    series, which matters at 10,000 runs): the smaller peak's height ÷ the larger's, the lowest
    density between them ÷ the smaller peak, where they split, and the share of values on the
    smaller side. One peak: `ratio` 0."""
    values = np.asarray(values, dtype=float)
    none = {"ratio": 0.0, "valley": 1.0, "split": math.nan, "share": 0.0}
    if values.size < 3 or np.ptp(values) == 0:
        return none
    xs = np.linspace(values.min(), values.max(), grid)
    variance = np.var(values, ddof=1) * values.size ** (-2 / 5)  # Scott's factor n^(-1/5), squared
    kernels = np.exp(-0.5 * (xs[:, None] - values[None, :]) ** 2 / variance)
    density = kernels.sum(axis=1) / (values.size * math.sqrt(2 * math.pi * variance))
    padded = np.concatenate(([-np.inf], density, [-np.inf]))
    peaks = [i for i in range(grid) if padded[i + 1] > padded[i] and padded[i + 1] >= padded[i + 2]]
    if len(peaks) < 2:
        return none
    a, b = sorted(sorted(peaks, key=lambda i: -density[i])[:2])
    smaller = min(density[a], density[b])
    split = float(xs[a + int(np.argmin(density[a : b + 1]))])
    return {
        "ratio": float(smaller / max(density[a], density[b])),
        "valley": float(density[a : b + 1].min() / smaller),
        "split": split,
        "share": float(min((values < split).mean(), (values >= split).mean())),
    }


# ---------------------------------------------------------------- adaptive repeats


def enough_repeats(name: str, values, target: float, minimum: int, maximum: int) -> tuple[bool, float]:
    """(whether a cell has enough repeats, its 95% CI half-width ÷ its statistic): enough when
    the half-width is at most `target` after at least `minimum` repeats, or at `maximum`."""
    values = np.asarray(values, dtype=float)
    low, high = bootstrap_ci(name, values)
    centre = statistic(name, values) if values.size else math.nan
    half = (high - low) / 2 / centre if finite(low) and finite(high) and centre else math.nan
    if values.size < minimum:
        return False, half
    return (finite(half) and half <= target) or values.size >= maximum, half
