"""The fixed cost of a training step, from the sweep: per environment, device, precision and
loader, the step time ``t = fixed + per_sample x batch`` fitted over every ok sweep cell
(each repeat one point; ``t = batch / samples_per_s``), with intervals and residuals.

``fixed`` is what a step costs whatever its size (kernel launches, Python, the optimizer's
per-tensor work, a DataLoader's per-batch overhead); ``per_sample`` the marginal cost of a
sample. Their ratio says from which batch size a device is busy with samples rather than with
steps, and two devices' fits say from which batch the faster one's advantage reaches a share
of its per-sample speed-up (:func:`batch_for_share`): the line behind the blog's "batch sizes
above 32" advice.

The fit is ordinary least squares. Its intervals are the usual t intervals (Student's t with
``n - 2`` degrees of freedom), which assume independent, roughly normal residuals: the
residuals are returned with the fit so a reader can judge that, and with fewer than 3 points
there is no interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Two-sided 95 % quantiles of Student's t, by degrees of freedom (1-30); beyond, the normal
#: quantile with the first-order correction (exact to 3 decimals from 31 on).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    """The 97.5 % quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z ** 3 + z) / (4 * df)


@dataclass(frozen=True)
class StepFit:
    """``step_s = fixed_s + per_sample_s x batch``, each with its 95 % interval (None
    without one), over ``n`` points, with the residuals in input order."""

    fixed_s: float
    fixed_ci: tuple[float, float] | None
    per_sample_s: float
    per_sample_ci: tuple[float, float] | None
    n: int
    batch_sizes: tuple[float, ...]
    residuals_s: tuple[float, ...]
    r2: float | None

    def step_s(self, batch: float) -> float:
        """The fitted step time at ``batch``."""
        return self.fixed_s + self.per_sample_s * batch

    @property
    def fixed_share_at(self) -> float | None:
        """The batch size at which the fixed part is half the step (fixed / per_sample)."""
        return self.fixed_s / self.per_sample_s if self.per_sample_s > 0 else None


def fit_step_time(batch_sizes: Sequence[float], samples_per_s: Sequence[float]) -> StepFit:
    """Fit ``t = fixed + per_sample x batch`` to the step times ``batch / samples_per_s``.
    Needs at least two distinct batch sizes; raises ValueError otherwise."""
    x = np.asarray(batch_sizes, dtype=float)
    rate = np.asarray(samples_per_s, dtype=float)
    keep = np.isfinite(x) & np.isfinite(rate) & (rate > 0) & (x > 0)
    x, rate = x[keep], rate[keep]
    if np.unique(x).size < 2:
        raise ValueError("a step-time fit needs ok cells at two batch sizes at least")
    y = x / rate
    design = np.column_stack([np.ones_like(x), x])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    fixed, per_sample = float(coef[0]), float(coef[1])
    residuals = y - design @ coef
    n = int(x.size)
    total = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(residuals ** 2)) / total if total > 0 else None
    fixed_ci = per_ci = None
    if n >= 3:
        sigma2 = float(np.sum(residuals ** 2)) / (n - 2)
        cov = sigma2 * np.linalg.inv(design.T @ design)
        half = t975(n - 2)
        se_fixed, se_per = math.sqrt(max(cov[0, 0], 0.0)), math.sqrt(max(cov[1, 1], 0.0))
        fixed_ci = (fixed - half * se_fixed, fixed + half * se_fixed)
        per_ci = (per_sample - half * se_per, per_sample + half * se_per)
    return StepFit(fixed, fixed_ci, per_sample, per_ci, n, tuple(float(v) for v in x),
                   tuple(float(r) for r in residuals), r2)


def batch_for_share(slow: StepFit, fast: StepFit, share: float) -> float | None:
    """The batch size from which the fast device's speed-up over the slow one reaches
    ``share`` (0-1) of its per-sample speed-up (``slow.per_sample_s / fast.per_sample_s``,
    the limit at large batches). 1.0 when it is reached at any batch; None when the fits
    cannot say (a non-positive per-sample cost, or the fast device is not faster per sample).
    """
    if not 0 < share < 1:
        raise ValueError(f"share must lie between 0 and 1, got {share}")
    a_s, b_s, a_f, b_f = slow.fixed_s, slow.per_sample_s, fast.fixed_s, fast.per_sample_s
    if b_s <= 0 or b_f <= 0 or b_s <= b_f:
        return None
    # (a_s + b_s B) / (a_f + b_f B) = share * b_s / b_f, solved for B
    batch = (share * b_s * a_f - b_f * a_s) / (b_s * b_f * (1 - share))
    return max(batch, 1.0)
