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
- :func:`ratio_ci`: the ratio of two medians (a speed-up) with a distribution-free interval
  built from the two sides' order-statistic intervals: if ``[a_lo, a_hi]`` covers the true
  median of the numerator and ``[b_lo, b_hi]`` that of the denominator, then
  ``[a_lo / b_hi, a_hi / b_lo]`` covers the true ratio, so (the sides being independent) its
  coverage is at least the product of the two exact coverages, whatever the distributions.
  Each side's index is chosen so that the product reaches the requested level where the
  repeats allow (7 or more on each side for 95 %); below that the widest intervals
  (``[min, max]`` on each side) are used and the guaranteed coverage is reported as it is:
  2 runs a side give at least 25 %, 3 give 56 %, 5 give 88 %. The report calls such an
  interval a range of n runs, never "95 %". (A percentile bootstrap, used before, claimed
  95 % but covered the true ratio about 70 % of the time with 2 runs a side.)
  tests/results/test_stats.py checks the stated coverage by simulation.
- :func:`diff_ci`: the difference of two medians (an accuracy effect, in points) with the
  same construction, ``[a_lo - b_hi, a_hi - b_lo]``.
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
#: The level of the headline experiment's intervals (its 6 repeats a side): the widest
#: order-statistic interval of 6 runs covers a median 96.9 % of the time, so a ratio of two
#: such sides at least 93.9 % (:func:`min_repeats`); 95 % would need 7 a side.
HEADLINE_CONFIDENCE = 0.90


@dataclass(frozen=True)
class Estimate:
    """A point estimate with an optional interval.

    ``low``/``high`` are None when there are too few observations for any interval;
    ``coverage`` is the interval's coverage probability (0-1: exact for a median, a
    guaranteed lower bound for a ratio or a difference), which is below the requested level
    for small ``n``.
    """

    value: float
    low: float | None
    high: float | None
    n: int
    coverage: float | None
    method: str
    confidence: float = CONFIDENCE  # the level asked for (coverage may fall short of it)

    @property
    def has_interval(self) -> bool:
        """Whether an interval could be computed."""
        return self.low is not None and self.high is not None


def _clean(values: Iterable[float]) -> np.ndarray:
    array = np.asarray([float(v) for v in values if v is not None], dtype=float)
    return array[np.isfinite(array)]


def _coverage(n: int, k: int) -> float:
    """Exact coverage of ``[x_(k), x_(n-k+1)]`` for the median of ``n`` observations:
    ``1 - 2 P(B <= k - 1)``, ``B ~ Binomial(n, 1/2)``."""
    return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) * 0.5 ** n


def median_order_stat_k(n: int, confidence: float = CONFIDENCE) -> tuple[int, float]:
    """The 1-based order-statistic index ``k`` of the interval ``[x_(k), x_(n-k+1)]`` for the
    median of ``n`` observations, and its exact coverage (0-1).

    ``k`` is the largest value with coverage >= ``confidence``; when even ``k = 1`` falls
    short (``n`` < 6 for 95 %), ``k = 1`` is returned with its lower coverage.
    """
    if n < 2:
        raise ValueError(f"an interval needs at least 2 observations, got {n}")
    best_k, best_cov = 1, _coverage(n, 1)
    for k in range(2, n // 2 + 1):
        coverage = _coverage(n, k)
        if coverage < confidence - 1e-12:
            break
        best_k, best_cov = k, coverage
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
        return Estimate(median, None, None, 1, None, "single observation: no interval",
                        confidence)
    k, coverage = median_order_stat_k(n, confidence)
    return Estimate(median, float(x[k - 1]), float(x[n - k]), n, coverage,
                    "order-statistic (binomial) interval of the median", confidence)


def _side_intervals(a: np.ndarray, b: np.ndarray,
                    confidence: float) -> tuple[tuple[float, float], tuple[float, float], float]:
    """Order-statistic intervals of the medians of sorted ``a`` and ``b`` whose coverages
    multiply to at least ``confidence`` where possible, with the tightest such pair (the
    smallest product of relative widths); else the ``[min, max]`` pair. Returns both
    intervals and the product of their exact coverages."""
    best = None
    for k_a in range(1, a.size // 2 + 1):
        cov_a = _coverage(a.size, k_a)
        for k_b in range(1, b.size // 2 + 1):
            cov = cov_a * _coverage(b.size, k_b)
            if cov < confidence - 1e-12:
                continue
            lo_a, hi_a = a[k_a - 1], a[a.size - k_a]
            lo_b, hi_b = b[k_b - 1], b[b.size - k_b]
            width = (hi_a - lo_a) / max(abs(hi_a), 1e-300) + (hi_b - lo_b) / max(abs(hi_b),
                                                                                1e-300)
            if best is None or width < best[0]:
                best = (width, (lo_a, hi_a), (lo_b, hi_b), cov)
    if best is None:
        cov = _coverage(a.size, 1) * _coverage(b.size, 1)
        return (a[0], a[-1]), (b[0], b[-1]), cov
    return best[1], best[2], best[3]


def _method(cov: float, confidence: float, what: str) -> str:
    reached = "" if cov >= confidence - 1e-12 else (
        f"; too few runs for {confidence:.0%}: the widest intervals (each side's range)")
    return (f"{what} of the two medians' order-statistic intervals, coverage at least "
            f"{cov:.0%}{reached}")


def ratio_ci(numerator: Iterable[float], denominator: Iterable[float],
             confidence: float = CONFIDENCE) -> Estimate | None:
    """``median(numerator) / median(denominator)`` with its distribution-free interval
    (module docstring); ``coverage`` is the guaranteed coverage for these repeats.

    Returns None when a side is empty or its median is not positive; no interval when a side
    has a single observation. ``n`` is the smaller of the two sample sizes.
    """
    a = np.sort(_clean(numerator))
    b = np.sort(_clean(denominator))
    if a.size == 0 or b.size == 0:
        return None
    med_a, med_b = float(np.median(a)), float(np.median(b))
    if med_b <= 0 or med_a < 0:
        return None
    ratio = med_a / med_b
    n = int(min(a.size, b.size))
    if n < 2:
        return Estimate(ratio, None, None, n, None,
                        "single observation on one side: no interval", confidence)
    (lo_a, hi_a), (lo_b, hi_b), cov = _side_intervals(a, b, confidence)
    if lo_b <= 0:
        return Estimate(ratio, None, None, n, None, "a denominator run is not positive",
                        confidence)
    return Estimate(ratio, float(lo_a / hi_b), float(hi_a / lo_b), n, cov,
                    _method(cov, confidence, "ratio"), confidence)


def diff_ci(first: Iterable[float], second: Iterable[float],
            confidence: float = CONFIDENCE) -> Estimate | None:
    """``median(first) - median(second)`` with the same construction as :func:`ratio_ci`.
    None when a side is empty; no interval when a side has a single observation. ``n`` is
    the smaller of the two sample sizes."""
    a = np.sort(_clean(first))
    b = np.sort(_clean(second))
    if a.size == 0 or b.size == 0:
        return None
    diff = float(np.median(a)) - float(np.median(b))
    n = int(min(a.size, b.size))
    if n < 2:
        return Estimate(diff, None, None, n, None,
                        "single observation on one side: no interval", confidence)
    (lo_a, hi_a), (lo_b, hi_b), cov = _side_intervals(a, b, confidence)
    return Estimate(diff, float(lo_a - hi_b), float(hi_a - lo_b), n, cov,
                    _method(cov, confidence, "difference"), confidence)


def min_repeats(confidence: float = CONFIDENCE) -> int:
    """The fewest repeats a side with which :func:`ratio_ci` reaches ``confidence`` (each side
    its widest interval, ``[min, max]``, whose coverage is ``1 - 2 / 2**n``): 6 for 90 %, 7
    for 95 %."""
    n = 2
    while _coverage(n, 1) ** 2 < confidence - 1e-12:
        n += 1
    return n


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
