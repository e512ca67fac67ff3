"""Medians with confidence intervals, and the confidence interval of a speed-up.

The unit of replication is the repeat: each repeat of a cell is a separate process with its
own seed, so its per-cell figure (for instance the median epoch time) is one observation.
Epochs within a run are not independent and are never pooled.

- :func:`median_ci`: the median with a distribution-free *order-statistic* interval. For
  ``n`` sorted observations the interval ``[x_(k), x_(n-k+1)]`` covers the true median with
  probability ``1 - 2 P(B <= k-1)``, ``B ~ Binomial(n, 1/2)``, whatever the distribution;
  ``k`` is the largest index that keeps that coverage at or above the requested level. With
  fewer than 6 observations no interval reaches 95 %: the widest one, ``[min, max]``, is
  returned with its true, lower coverage (3 repeats: 75 %), which the report prints. One
  observation has no interval.
- :func:`ratio_ci`: the ratio of two medians (a speed-up) with a percentile-bootstrap interval:
  each side is resampled independently with replacement (:data:`N_BOOT` times, fixed
  :data:`SEED`, so a report is reproducible), the ratio of the resampled medians is taken,
  and its 2.5 and 97.5 percentiles bound the 95 % interval. It needs at least 2 observations
  on each side.
- :func:`diff_ci`: the difference of two medians (an accuracy effect, in points) with the same
  percentile bootstrap.
- :func:`within_noise`: whether an interval contains the value of "no effect" (1 for a ratio,
  0 for a difference), so a small ratio such as 1.04x is never reported as an effect when its
  interval says it may be none.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
#: Bootstrap resamples for ratio intervals.
N_BOOT = 10_000
#: Seed of the bootstrap's random generator (results are reproducible run to run).
SEED = 20240917


@dataclass(frozen=True)
class Estimate:
    """A point estimate with an optional interval.

    ``low``/``high`` are None when there are too few observations for any interval;
    ``coverage`` is the interval's actual coverage probability (0-1; for the bootstrap, the
    nominal level), which can be below the requested level for small ``n``.
    """

    value: float
    low: float | None
    high: float | None
    n: int
    coverage: float | None
    method: str

    @property
    def has_interval(self) -> bool:
        """Whether an interval could be computed."""
        return self.low is not None and self.high is not None


def _clean(values: Iterable[float]) -> np.ndarray:
    array = np.asarray([float(v) for v in values if v is not None], dtype=float)
    return array[np.isfinite(array)]


def median_order_stat_k(n: int, confidence: float = CONFIDENCE) -> tuple[int, float]:
    """The 1-based order-statistic index ``k`` of the interval ``[x_(k), x_(n-k+1)]`` for the
    median of ``n`` observations, and its exact coverage (0-1).

    ``k`` is the largest value with coverage >= ``confidence``; when even ``k = 1`` falls
    short (``n`` < 6 for 95 %), ``k = 1`` is returned with its lower coverage.
    """
    if n < 2:
        raise ValueError(f"an interval needs at least 2 observations, got {n}")
    best_k, best_cov = 1, 1.0 - 2.0 * 0.5 ** n
    cdf = 0.5 ** n  # P(B <= k - 1) for k = 1
    for k in range(1, n // 2 + 1):
        coverage = 1.0 - 2.0 * cdf  # of [x_(k), x_(n-k+1)]
        if coverage < confidence - 1e-12:
            break
        best_k, best_cov = k, coverage
        cdf += math.comb(n, k) * 0.5 ** n  # now P(B <= k)
    return best_k, best_cov


def median_ci(values: Iterable[float], confidence: float = CONFIDENCE) -> Estimate | None:
    """The median of ``values`` (None and non-finite values dropped) with its order-statistic
    interval; None when no value is left, no interval (``low``/``high`` None) for one value."""
    x = np.sort(_clean(values))
    n = int(x.size)
    if n == 0:
        return None
    median = float(np.median(x))
    if n == 1:
        return Estimate(median, None, None, 1, None, "single observation: no interval")
    k, coverage = median_order_stat_k(n, confidence)
    return Estimate(median, float(x[k - 1]), float(x[n - k]), n, coverage,
                    "order-statistic (binomial) interval of the median")


def _bootstrap_medians(a: np.ndarray, b: np.ndarray, n_boot: int,
                       seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n_boot`` medians of each side, each side resampled independently (``a`` first)."""
    rng = np.random.default_rng(seed)
    boot_a = np.median(rng.choice(a, size=(n_boot, a.size), replace=True), axis=1)
    boot_b = np.median(rng.choice(b, size=(n_boot, b.size), replace=True), axis=1)
    return boot_a, boot_b


def _percentiles(values: np.ndarray, confidence: float) -> tuple[float, float]:
    """The central ``confidence`` interval of ``values`` (the percentile method)."""
    alpha = 1.0 - confidence
    low, high = np.quantile(values, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def ratio_ci(numerator: Iterable[float], denominator: Iterable[float],
             confidence: float = CONFIDENCE, n_boot: int = N_BOOT,
             seed: int = SEED) -> Estimate | None:
    """``median(numerator) / median(denominator)`` with a percentile-bootstrap interval.

    Each side is resampled independently. Returns None when a side is empty or its median
    is not positive; no interval when a side has a single observation. ``n`` is the smaller
    of the two sample sizes.
    """
    a = _clean(numerator)
    b = _clean(denominator)
    if a.size == 0 or b.size == 0:
        return None
    med_a, med_b = float(np.median(a)), float(np.median(b))
    if med_b <= 0 or med_a < 0:
        return None
    ratio = med_a / med_b
    n = int(min(a.size, b.size))
    if n < 2:
        return Estimate(ratio, None, None, n, None,
                        "single observation on one side: no interval")
    boot_a, boot_b = _bootstrap_medians(a, b, n_boot, seed)
    low, high = _percentiles(boot_a / boot_b, confidence)
    return Estimate(ratio, low, high, n, confidence,
                    "percentile bootstrap of the ratio of medians")


def diff_ci(first: Iterable[float], second: Iterable[float],
            confidence: float = CONFIDENCE, n_boot: int = N_BOOT,
            seed: int = SEED) -> Estimate | None:
    """``median(first) - median(second)`` with a percentile-bootstrap interval (each side
    resampled independently). None when a side is empty; no interval when a side has a single
    observation. ``n`` is the smaller of the two sample sizes."""
    a = _clean(first)
    b = _clean(second)
    if a.size == 0 or b.size == 0:
        return None
    diff = float(np.median(a)) - float(np.median(b))
    n = int(min(a.size, b.size))
    if n < 2:
        return Estimate(diff, None, None, n, None,
                        "single observation on one side: no interval")
    boot_a, boot_b = _bootstrap_medians(a, b, n_boot, seed)
    low, high = _percentiles(boot_a - boot_b, confidence)
    return Estimate(diff, low, high, n, confidence,
                    "percentile bootstrap of the difference of medians")


def within_noise(est: Estimate | None, null: float = 1.0) -> bool | None:
    """Whether ``est``'s interval contains ``null`` (1: no speed-up; 0: no difference), i.e.
    the data cannot tell the effect from none. None when there is no interval to say."""
    if est is None or not est.has_interval:
        return None
    return est.low <= null <= est.high


def spread(values: Iterable[float]) -> tuple[float, float, float, int] | None:
    """(median, min, max, n) of ``values``, None when empty: the spread over repeats."""
    x = _clean(values)
    if x.size == 0:
        return None
    return float(np.median(x)), float(x.min()), float(x.max()), int(x.size)
