"""benchmarks/bench_estimate.py's reading of a study's estimate lines (no study is run): the
durations the lines print, and the predicted durations of the first, half-way and last
estimates against the run's start."""

from __future__ import annotations

import pytest

from mnistbench.launch import estimate
from tests.conftest import load_benchmark

bench = load_benchmark("bench_estimate")


@pytest.mark.parametrize("s", [0, 12, 59, 61, 250, 3599, 3600, 3900, 7260])
def test_seconds_reads_what_the_estimate_prints(s):
    assert bench.seconds(estimate.duration(s)) == pytest.approx(s, abs=60 if s >= 3600 else 0)


def test_predictions_add_the_time_spent_to_the_time_left():
    started = 1000.0
    lines = [
        (1001.0, "Building DAG of jobs..."),
        (1002.0, "estimate: 4 cells, about 1 min 00 s (30 s to 2 min 00 s) on this machine, "
                 "ending about 10:00 UTC; from the plan's FLOPs, a default limit (not measured "
                 "yet), ..."),
        (1030.0, "estimate: 4 cells, about 2 min 00 s (1 min 00 s to 4 min 00 s) on this "
                 "machine, ending about 10:00 UTC; from the plan's FLOPs, ..."),
        (1060.0, "estimate: 1/4 cells done (sweep/a); 30 s spent, about 1 min 40 s left "
                 "(1 min 30 s to 1 min 50 s), ending about 10:00 UTC"),
        (1090.0, "progress: cell 2/4 (sweep/b) running for 1 min 00 s; ..."),
        (1100.0, "estimate: 2/4 cells done (sweep/b); 1 min 10 s spent, about 1 min 00 s left "
                 "(50 s to 1 min 10 s), ending about 10:00 UTC"),
        (1150.0, "estimate: 4/4 cells done (sweep/d); 2 min 00 s spent, about 30 s left "
                 "(27 s to 33 s), ending about 10:00 UTC"),
    ]
    assert bench.predictions(lines, started) == {"default": 2 + 60, "first": 30 + 120,
                                                 "half": 100 + 60, "last": 150 + 30}
    assert bench.predictions(lines[:1], started) == {}
