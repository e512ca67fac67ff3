"""mnistbench.core.durations: the digits of a duration that the command line prints."""

from __future__ import annotations

import pytest

from mnistbench.core import durations


@pytest.mark.parametrize(("value", "text"), [
    (None, "–"),
    (0.0, "0.0"),
    (26.0, "26.0"),
    (3.9, "3.90"),
    (0.5181, "0.518"),
    (0.000123456, "0.000123"),
    (9.999, "10.0"),  # rounding carries into the next magnitude: three digits, not four
    (123.46, "123.5"),  # one decimal from 100 s on
    (5393.0, "5393.0"),
])
def test_seconds_keep_three_significant_digits(value, text) -> None:
    assert durations.seconds(value) == text


def test_train_line_and_table_print_seconds_alike() -> None:
    """`mnistbench train`'s result line and `mnistbench table` share the one formatter."""
    from mnistbench.measure import entry
    from mnistbench.results import table

    assert entry.seconds is durations.seconds
    assert table.seconds is durations.seconds
