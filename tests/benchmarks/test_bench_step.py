"""Tests for benchmarks/bench_step.py's helpers: the per-epoch-rate ratios against the blog's
code and the best code, the medians of a side, and the --extra sides."""

from __future__ import annotations

import pytest

from tests.conftest import load_benchmark

bench = load_benchmark("bench_step")


def _run(train_s: float, steps: int = 60, epoch_s: float | None = None) -> dict:
    return {"train_s": train_s, "steps": steps, "epoch_s": epoch_s or train_s + 3.0,
            "warmup_s": 1.0, "allocator": "glibc"}


def test_ratios_are_per_step_rates_against_the_blog_and_the_best_code():
    """A side twice as fast per step as the best code and five times the blog's reads 2.0x
    and 5.0x; the medians take every run of a side, the epoch's training part is 469 steps."""
    figs = {"blog": bench.figures([_run(6.0), _run(6.6), _run(5.4)]),
            "best": bench.figures([_run(2.4), _run(2.4)]),
            "compiled": bench.figures([_run(1.2, epoch_s=5.0)])}
    assert figs["blog"]["step_ms"] == pytest.approx(100.0)
    assert figs["blog"]["train_epoch_s"] == pytest.approx(46.9)
    assert figs["compiled"]["eval_s"] == pytest.approx(3.8)
    got = bench.ratios(figs)
    assert got["blog"] == pytest.approx((1.0, 0.4))
    assert got["best"] == pytest.approx((2.5, 1.0))
    assert got["compiled"] == pytest.approx((5.0, 2.0))


def test_extra_sides_need_a_name_and_flags():
    assert bench.parse_extra(["graph=--implementation tuned-graph"]) == {
        "graph": "--implementation tuned-graph"}
    with pytest.raises(SystemExit, match="NAME=FLAGS"):
        bench.parse_extra(["--compile default"])
