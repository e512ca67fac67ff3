"""Which timed epochs of a cell were disturbed, and why: other processes used the machine
during the epoch (the sampler's system load less the cell's own, per epoch), or the epoch
lies far outside its own cell's spread even where the load counters missed the cause.

A disturbed epoch is flagged in ``epochs.csv`` (``disturbed``: ``load``, ``outlier`` or
``load+outlier``; empty when quiet) and left out of the cell's medians, totals and costs;
the summary counts them and ``mnistbench train`` warns. Never silently averaged in.

Thresholds:

- :data:`LOAD_PCT`: other processes above this share of all cores, on average over the
  epoch (the cell-wide ``busy`` uses the same figure, averaged over every epoch, where one
  disturbed epoch of ten goes unseen);
- an outlier is slower than :data:`OUTLIER_RATIO` times the median epoch of its cell *and*
  more than :data:`OUTLIER_MADS` scaled median absolute deviations above it (both, so a
  cell whose epochs all agree to a few percent does not flag its slowest one); it needs at
  least :data:`MIN_EPOCHS` epochs. Only slow epochs are flagged: nothing makes an epoch
  faster than the hardware allows.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TypeVar

LOAD_PCT = 25.0  # % of all cores, as monitor.BUSY_OTHERS_PCT
OUTLIER_RATIO = 1.25
OUTLIER_MADS = 5.0
MIN_EPOCHS = 3
_MAD_SCALE = 1.4826  # MAD -> standard deviation for normal data
T = TypeVar("T")


def outliers(epoch_s: Sequence[float]) -> list[bool]:
    """For each epoch time, whether it is a slow outlier of the cell (module docstring)."""
    if len(epoch_s) < MIN_EPOCHS:
        return [False] * len(epoch_s)
    median = statistics.median(epoch_s)
    mad = _MAD_SCALE * statistics.median(abs(x - median) for x in epoch_s)
    return [x > OUTLIER_RATIO * median and x > median + OUTLIER_MADS * mad for x in epoch_s]


def flags(epoch_s: Sequence[float], others_pct: Sequence[float | None]) -> list[str]:
    """The ``disturbed`` value of each epoch: ``load``, ``outlier``, both joined by ``+``,
    or ``""``."""
    slow = outliers(epoch_s)
    out = []
    for is_slow, others in zip(slow, others_pct, strict=True):
        why = []
        if others is not None and others > LOAD_PCT:
            why.append("load")
        if is_slow:
            why.append("outlier")
        out.append("+".join(why))
    return out


def quiet(values: Sequence[T], disturbed: Sequence[str]) -> list[T]:
    """``values`` (an epoch's figure or its whole row) of the epochs that were not disturbed;
    all of them when every epoch was (then nothing quiet is left to prefer, and the summary
    says so)."""
    kept = [v for v, why in zip(values, disturbed, strict=True) if not why]
    return kept or list(values)
