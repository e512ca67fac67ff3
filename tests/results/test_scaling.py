"""Tests of mnistbench.results.scaling: the step-time fit and the batch of a speed-up share."""

from __future__ import annotations

import numpy as np
import pytest

from mnistbench.results import scaling

BATCHES = [32, 64, 128, 256, 512, 1024]


def rates(fixed, per_sample, batches, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    step = np.array([fixed + per_sample * b for b in batches])
    step = step * (1 + noise * rng.standard_normal(len(batches)))
    return np.array(batches) / step


def test_an_exact_line_is_recovered_with_zero_residuals():
    fit = scaling.fit_step_time(BATCHES * 2, rates(0.004, 2e-5, BATCHES * 2))
    assert fit.fixed_s == pytest.approx(0.004) and fit.per_sample_s == pytest.approx(2e-5)
    assert max(abs(r) for r in fit.residuals_s) < 1e-12 and fit.n == 12
    assert fit.fixed_share_at == pytest.approx(200.0)
    assert fit.step_s(128) == pytest.approx(0.004 + 128 * 2e-5)


def test_the_intervals_cover_the_true_line_about_95_percent_of_the_time():
    """By simulation with normal noise (the fit's assumption): 95 % t intervals cover the
    true fixed cost and per-sample cost in 91-99 % of 400 studies of 12 points."""
    hits_fixed = hits_per = 0
    trials = 400
    x = np.array(BATCHES * 2, dtype=float)
    for seed in range(trials):
        rng = np.random.default_rng(seed)
        step = 0.004 + 2e-5 * x + rng.normal(0, 0.0005, x.size)
        fit = scaling.fit_step_time(x, x / step)
        hits_fixed += fit.fixed_ci[0] <= 0.004 <= fit.fixed_ci[1]
        hits_per += fit.per_sample_ci[0] <= 2e-5 <= fit.per_sample_ci[1]
    assert 0.91 <= hits_fixed / trials <= 0.99
    assert 0.91 <= hits_per / trials <= 0.99


def test_too_few_points_give_no_interval_and_one_batch_size_no_fit():
    fit = scaling.fit_step_time([32, 64], rates(0.01, 1e-4, [32, 64]))
    assert fit.fixed_ci is None and fit.per_sample_ci is None
    with pytest.raises(ValueError, match="two batch sizes"):
        scaling.fit_step_time([128, 128], [1000.0, 1010.0])
    # failed cells (no throughput) are left out, not fitted
    fit = scaling.fit_step_time([32, 64, 128, 256], [*rates(0.01, 1e-4, [32, 64, 128]), np.nan])
    assert fit.n == 3


def test_the_batch_where_a_gpu_reaches_a_share_of_its_per_sample_speed_up():
    """A CPU with no fixed cost against a GPU whose steps cost 5 ms of launches: at large
    batches the GPU is 100x faster per sample; the closed form's batch gives exactly 80 % of
    that, as the two fitted lines predict."""
    cpu = scaling.fit_step_time(BATCHES, rates(0.0, 1e-3, BATCHES))
    gpu = scaling.fit_step_time(BATCHES, rates(0.005, 1e-5, BATCHES))
    batch = scaling.batch_for_share(cpu, gpu, 0.8)
    speed_up = cpu.step_s(batch) / gpu.step_s(batch)
    assert speed_up == pytest.approx(0.8 * 100, rel=1e-6)
    assert scaling.batch_for_share(gpu, cpu, 0.8) is None  # the "fast" one is slower
    assert scaling.batch_for_share(cpu, cpu, 0.5) is None
    with pytest.raises(ValueError):
        scaling.batch_for_share(cpu, gpu, 1.0)


def test_t_quantiles():
    assert scaling.t975(1) == 12.706 and scaling.t975(10) == 2.228
    assert scaling.t975(1000) == pytest.approx(1.962, abs=1e-3)
    with pytest.raises(ValueError):
        scaling.t975(0)
