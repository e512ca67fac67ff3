"""Tests of mnistbench.results.stats: median intervals and speed-up intervals on known
distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mnistbench.results import stats


@pytest.mark.parametrize(("n", "k", "coverage"), [
    (3, 1, 0.75),
    (5, 1, 0.9375),
    (6, 1, 0.96875),
    (10, 2, 1 - 2 * 11 / 1024),
    (20, 6, 0.958610534667968),
    (100, 40, 0.964799799782295),
])
def test_order_statistic_index_matches_binomial_tables(n, k, coverage):
    """The interval index and its coverage match the textbook binomial values."""
    got_k, got_cov = stats.median_order_stat_k(n)
    assert got_k == k
    assert got_cov == pytest.approx(coverage, abs=1e-12)


def test_order_statistic_index_is_the_widest_that_reaches_95():
    """k+1 would fall below 95 % wherever k itself reaches it."""
    for n in range(6, 200):
        k, coverage = stats.median_order_stat_k(n)
        assert coverage >= 0.95
        next_cdf = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
        assert 1 - 2 * next_cdf < 0.95


@pytest.mark.parametrize(("draw", "true_median"), [
    (lambda rng, size: rng.normal(10.0, 2.0, size), 10.0),
    (lambda rng, size: rng.exponential(3.0, size), 3.0 * math.log(2)),
    (lambda rng, size: rng.lognormal(math.log(60.0), 0.3, size), 60.0),
], ids=["normal", "exponential", "lognormal"])
def test_median_interval_covers_the_true_median_as_promised(draw, true_median):
    """Over 3000 samples of 25, the interval covers the true median at its stated rate."""
    rng = np.random.default_rng(1)
    trials, n = 3000, 25
    samples = draw(rng, (trials, n))
    hits = 0
    for sample in samples:
        est = stats.median_ci(sample)
        hits += est.low <= true_median <= est.high
    _, coverage = stats.median_order_stat_k(n)
    assert hits / trials == pytest.approx(coverage, abs=0.015)
    assert hits / trials >= 0.94


def test_median_interval_for_small_samples_is_min_max_with_true_coverage():
    """Three repeats give [min, max] at 75 %; one gives no interval; none gives None."""
    est = stats.median_ci([3.0, 1.0, 2.0])
    assert (est.value, est.low, est.high, est.n) == (2.0, 1.0, 3.0, 3)
    assert est.coverage == pytest.approx(0.75)
    one = stats.median_ci([5.0])
    assert one.value == 5.0 and not one.has_interval and one.coverage is None
    assert stats.median_ci([]) is None
    assert stats.median_ci([None, float("nan")]) is None
    assert stats.median_ci([None, 4.0, float("inf")]).n == 1


DISTRIBUTIONS = {
    # name -> (draw n values of one side given a generator, that side's true median)
    "lognormal": (lambda rng, n, m: rng.lognormal(math.log(m), 0.2, n), lambda m: m),
    "right-skewed gamma": (lambda rng, n, m: m * rng.gamma(2.0, 1.0, n) / 1.678347, lambda m: m),
    # a run in ten disturbed (twice as slow): the slow tail the epochs of a busy machine show
    "with outliers": (lambda rng, n, m: m * np.where(rng.random(n) < 0.1, 2.0, 1.0)
                      * rng.lognormal(0.0, 0.05, n), None),
}


def _true_median(name, m):
    if DISTRIBUTIONS[name][1] is not None:
        return DISTRIBUTIONS[name][1](m)
    rng = np.random.default_rng(123)  # the median of the mixture, by a large sample
    return float(np.median(DISTRIBUTIONS[name][0](rng, 400_000, m)))


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
@pytest.mark.parametrize("n_a,n_b", [(2, 2), (3, 3), (2, 5), (5, 5), (7, 7)])
def test_ratio_and_difference_intervals_cover_at_least_what_they_state(name, n_a, n_b):
    """By simulation: over 2,000 studies the interval of a ratio of medians (and of a
    difference) covers the true value at least as often as its stated coverage says (less
    the Monte Carlo error), whatever the distribution; with 7 runs a side it states 95 %."""
    draw = DISTRIBUTIONS[name][0]
    true_a, true_b = _true_median(name, 60.0), _true_median(name, 5.0)
    rng = np.random.default_rng(n_a * 100 + n_b)
    trials = 2000
    hits_ratio = hits_diff = 0
    for _ in range(trials):
        a, b = draw(rng, n_a, 60.0), draw(rng, n_b, 5.0)
        ratio, diff = stats.ratio_ci(a, b), stats.diff_ci(a, b)
        hits_ratio += ratio.low <= true_a / true_b <= ratio.high
        hits_diff += diff.low <= true_a - true_b <= diff.high
    stated = ratio.coverage
    assert stated == diff.coverage
    slack = 3 * math.sqrt(stated * (1 - stated) / trials) + 1e-9
    assert hits_ratio / trials >= stated - slack, (hits_ratio / trials, stated)
    assert hits_diff / trials >= stated - slack, (hits_diff / trials, stated)
    if min(n_a, n_b) >= 7:
        assert stated >= stats.CONFIDENCE


def test_stated_coverage_is_the_product_of_the_sides_and_never_95_with_few_runs():
    """2 runs a side state at least 25 % (the two ranges), 3 runs 56 %, 5 runs 88 %: never
    95 %. The interval then is the ratio of the ranges: [min a / max b, max a / min b]."""
    for n, expected in ((2, 0.25), (3, 0.5625), (5, (1 - 2 / 32) ** 2)):
        a = [60.0 + i for i in range(n)]
        b = [5.0 + 0.1 * i for i in range(n)]
        est = stats.ratio_ci(a, b)
        assert est.coverage == pytest.approx(expected)
        assert est.coverage < stats.CONFIDENCE and "too few runs" in est.method
        assert (est.low, est.high) == pytest.approx((min(a) / max(b), max(a) / min(b)))


def test_ratio_interval_is_deterministic_and_brackets_the_estimate():
    """Same inputs give the same interval (no random resampling), around the ratio of the
    medians."""
    cpu, gpu = [58.0, 59.5, 61.0, 60.2], [5.1, 5.3, 5.2, 5.0]
    a, b = stats.ratio_ci(cpu, gpu), stats.ratio_ci(cpu, gpu)
    assert (a.low, a.high) == (b.low, b.high)
    assert a.value == pytest.approx(np.median(cpu) / np.median(gpu))
    assert a.low <= a.value <= a.high
    assert a.n == 4 and a.coverage == pytest.approx((1 - 2 / 16) ** 2)


def test_ratio_interval_needs_two_per_side():
    """One observation on a side gives the ratio without interval; no data or a zero
    denominator gives None."""
    single = stats.ratio_ci([60.0], [5.0, 5.2, 5.1])
    assert single.value == pytest.approx(60.0 / 5.1) and not single.has_interval
    assert stats.ratio_ci([], [1.0]) is None
    assert stats.ratio_ci([1.0, 2.0], [0.0, 0.0]) is None


def test_spread_gives_median_min_max_and_count():
    """spread() summarises repeats as (median, min, max, n) and ignores missing values."""
    assert stats.spread([3.0, None, 1.0, 2.0]) == (2.0, 1.0, 3.0, 3)
    assert stats.spread([]) is None


def test_difference_interval_brackets_a_known_difference():
    """diff_ci gives the difference of the medians with an interval around it, none with one
    observation on a side, and None without data."""
    a, b = [99.1, 99.2, 99.3, 99.25], [99.0, 99.05, 98.95, 99.1]
    est = stats.diff_ci(a, b)
    assert est.value == pytest.approx(np.median(a) - np.median(b))
    assert est.low <= est.value <= est.high and est.high < 0.4
    assert stats.diff_ci(a, b) == est  # deterministic
    assert not stats.diff_ci([99.0], b).has_interval
    assert stats.diff_ci([], b) is None


def test_within_noise_says_whether_the_interval_holds_no_effect():
    """A ratio interval holding 1 (or a difference interval holding 0) is within noise; one
    without an interval cannot say."""
    ratio = stats.ratio_ci([1.0, 1.04, 0.98, 1.06], [1.0, 1.01, 0.99, 1.02])
    assert stats.within_noise(ratio) is True
    assert stats.within_noise(stats.ratio_ci([2.0, 2.1, 2.05], [1.0, 1.02, 0.99])) is False
    assert stats.within_noise(stats.diff_ci([0.1, -0.1, 0.05], [0.0, 0.02, -0.03]), 0.0)
    assert stats.within_noise(stats.ratio_ci([1.0], [1.0, 1.1])) is None
    assert stats.within_noise(None) is None
