"""How the command line prints a duration: one home for its digits, shared by
``mnistbench train``'s result line and ``mnistbench table`` (the HTML report has its own,
wordier durations in ``mnistbench.report.formatting``)."""

from __future__ import annotations

import math


def seconds(value: float | None) -> str:
    """Seconds to three significant digits, trailing zeros kept (26.0, 3.90, 0.518), one
    decimal from 100 s on; ``–`` for none."""
    if value is None:
        return "–"
    if value <= 0:
        return f"{value:.1f}"
    rounded = float(f"{value:.3g}")  # the magnitude after rounding: 9.999 -> 10.0
    return f"{value:.{min(6, max(1, 2 - math.floor(math.log10(rounded))))}f}"
