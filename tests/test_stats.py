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


def test_ratio_interval_covers_a_known_speedup():
    """The bootstrap interval of a ratio of medians covers the true ratio about 95 % of the
    time when each side has 15 lognormal repeats (true speed-up 12)."""
    rng = np.random.default_rng(7)
    trials, hits = 300, 0
    for _ in range(trials):
        cpu = rng.lognormal(math.log(60.0), 0.05, 15)
        gpu = rng.lognormal(math.log(5.0), 0.08, 15)
        est = stats.ratio_ci(cpu, gpu, n_boot=1000, seed=int(rng.integers(1 << 30)))
        hits += est.low <= 12.0 <= est.high
    assert 0.88 <= hits / trials <= 0.995


def test_ratio_interval_is_reproducible_and_brackets_the_estimate():
    """Same inputs give the same interval (fixed seed), around the ratio of the medians."""
    cpu, gpu = [58.0, 59.5, 61.0, 60.2], [5.1, 5.3, 5.2, 5.0]
    a, b = stats.ratio_ci(cpu, gpu), stats.ratio_ci(cpu, gpu)
    assert (a.low, a.high) == (b.low, b.high)
    assert a.value == pytest.approx(np.median(cpu) / np.median(gpu))
    assert a.low <= a.value <= a.high
    assert a.coverage == stats.CONFIDENCE and a.n == 4


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
    """diff_ci gives the difference of the medians with a bootstrap interval around it, none
    with one observation on a side, and None without data."""
    a, b = [99.1, 99.2, 99.3, 99.25], [99.0, 99.05, 98.95, 99.1]
    est = stats.diff_ci(a, b)
    assert est.value == pytest.approx(np.median(a) - np.median(b))
    assert est.low <= est.value <= est.high and est.high < 0.4
    assert stats.diff_ci(a, b) == est  # fixed seed: reproducible
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
