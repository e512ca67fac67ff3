"""Tests of mnistbench.report.formatting: how the report writes durations, counts, the
blog's figures, ratios with their intervals and a command, and the sentences of charts without
data."""

from __future__ import annotations

from pathlib import Path

import pytest

from mnistbench.report import charts
from mnistbench.report import formatting as fmt
from mnistbench.results import stats


@pytest.mark.parametrize(("value", "expected"), [
    (58.7, "58.7 s"), (5.2, "5.20 s"), (0.02318, "0.0232 s"), (619.4, "619 s (10.3 min)"),
    (9000.0, "9,000 s (2.5 h)"), (None, "–"), (float("nan"), "–"),
])
def test_seconds_formatting(value, expected):
    """Durations print with three significant digits and minutes or hours when long."""
    assert fmt.seconds(value) == expected


def test_wording_counts_and_blog_figures():
    """Counts take their number (1 epoch, 2 epochs), whole floats print whole, and the blog's
    figures print as the blog prints them."""
    assert fmt.plural(1, "epoch") == "1 epoch" and fmt.plural(2, "epoch") == "2 epochs"
    assert fmt.plural("1", "repeat") == "1 repeat"
    assert fmt.plural("2–3", "repeat") == "2–3 repeats"
    assert fmt.as_printed(5.2, "s") == "5.2 s" and fmt.as_printed(None) == "–"
    assert fmt.as_printed(16_384) == "16,384" and fmt.as_printed(128) == "128"
    assert fmt.count(128.0) == "128" and fmt.usd(0.10) == "$0.10"
    assert fmt.usd(0.0367) == "$0.0367"


def test_small_ratios_need_an_interval_or_say_within_noise():
    """A ratio whose interval holds 1 says "within noise"; one without an interval close to 1
    says it is too close to tell; a clear effect says neither."""
    noisy = stats.Estimate(1.04, 0.97, 1.11, 3, 0.95, "bootstrap")
    assert fmt.ratio_interval(noisy).endswith("within noise")
    single = stats.Estimate(1.04, None, None, 1, None, "single observation on one side")
    assert "too close to 1 to tell" in fmt.ratio_interval(single)
    clear = stats.Estimate(1.4, 1.3, 1.5, 3, 0.95, "bootstrap")
    assert "noise" not in fmt.ratio_interval(clear)


def test_break_even_runs_and_table_ratios():
    """A break-even says what 0 and infinity mean; a table's ratio is the ratio and its
    interval, or a dash and nothing."""
    assert fmt.runs(float("inf")) == "never (the GPU run is not cheaper)"
    assert fmt.runs(0) == "0 (the GPU machine costs no more)"
    assert fmt.runs(1234.4) == "1,234 runs"
    assert fmt.ratio_parts(None) == ("–", "")
    clear = stats.Estimate(1.4, 1.3, 1.5, 6, 0.95, "bootstrap")
    assert fmt.ratio_parts(clear) == ("1.40 ×", "95 % CI 1.30–1.50 ×, 6 runs")


def test_readable_command_quotes_only_where_a_shell_needs_it():
    """Paths under the working folder become relative; quoted arguments keep only the quotes a
    shell needs, double quotes where they read better; text that does not parse stays."""
    assert (fmt.readable_command("snakemake --config 'mirrors=['\"'\"'../m'\"'\"']'")
            == "snakemake --config \"mirrors=['../m']\"")
    assert fmt.readable_command("a 'b c' \"$HOME\"", Path("/x")) == "a \"b c\" '$HOME'"
    assert fmt.readable_command("/work/x/y.yaml", Path("/work/x")) == "y.yaml"
    assert fmt.readable_command("unbalanced 'quote") == "unbalanced 'quote"


def test_charts_without_data_or_not_drawn_say_why_in_a_sentence():
    """Every chart's no-data text, and the not-drawn text of a report without charts, is a
    sentence: a capital first, a full stop last."""
    for figures, state in (({}, "no data"), (None, "not drawn")):
        views = charts.views(figures)
        assert list(views) == [chart.key for chart in charts.CHARTS]
        for view in views.values():
            assert view["uri"] is None and view["state"] == state
            assert view["why"][0].isupper() and view["why"].endswith("."), view["why"]
