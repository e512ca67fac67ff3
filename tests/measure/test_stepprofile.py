"""Tests for mnistbench.measure.stepprofile: the figures of a profiled step (device operations
per step, the device's busy share of its span) from fake intervals, and the probe run end to
end on the CPU (the same set-up as a cell, the steps it says, the files it writes)."""

from __future__ import annotations

import json

import pytest

from mnistbench.core import options
from mnistbench.measure import stepprofile


def test_busy_time_counts_overlapping_operations_once() -> None:
    """The busy time is the union of the intervals: overlaps once, gaps not at all."""
    assert stepprofile.busy_us([(0, 10), (5, 15), (20, 30), (21, 22)]) == 25
    assert stepprofile.busy_us([(20, 30), (0, 10)]) == 20
    assert stepprofile.busy_us([]) == 0


def test_the_figures_of_a_host_bound_loop() -> None:
    """Four operations over two steps, busy 25 µs of a 40 µs span: 2 per step, 62.5 %."""
    got = stepprofile.summarise([(100, 110), (115, 120), (130, 135), (135, 140)], steps=2)
    assert got == {"steps": 2, "device_ops": 4, "device_ops_per_step": 2.0, "span_us": 40,
                   "busy_us": 25, "busy_pct": 62.5}
    empty = stepprofile.summarise([], steps=5)
    assert empty["device_ops_per_step"] is None and empty["busy_pct"] is None


def test_describe_says_the_figures_or_that_there_were_none() -> None:
    line = stepprofile.describe({"device_ops_per_step": 48.0, "busy_pct": 45.2, "steps": 50,
                                 "precision": "fp32", "implementation": "tuned-graph",
                                 "cuda_graphs": True})
    assert line == ("48.0 device ops per step, device busy 45 % of its span (50 steps, fp32, "
                    "tuned-graph, CUDA graphs)")
    assert stepprofile.describe({"steps": 3}).startswith("no device operations recorded")


@pytest.mark.parametrize("implementation", ["tuned", options.GRAPH_IMPLEMENTATION])
def test_the_probe_profiles_a_cell_on_the_cpu(tmp_path, tiny_mnist, capsys,
                                              implementation) -> None:
    """On the CPU the probe sets the cell up, profiles the steps asked (capped at an epoch's)
    and writes its figures (empty: no device operations) and the host ops' table."""
    out = tmp_path / "profile"
    code = stepprofile.main(["--data", str(tiny_mnist), "--batch-size", "64",
                             "--implementation", implementation, "--warmup-steps", "1",
                             "--test-limit", "64", "--out", str(out), "--profile-steps", "3"])
    assert code == 0
    figures = json.loads((out / stepprofile.PROFILE_JSON).read_text())
    assert figures["steps"] == 3 and figures["implementation"] == implementation
    assert figures["device_ops_per_step"] is None and figures["cuda_graphs"] is False
    table = (out / stepprofile.PROFILE_TABLE).read_text()
    assert "convolution" in table  # the host ops of the profiled steps
    assert "no device operations recorded" in capsys.readouterr().out


def test_the_probe_refuses_no_steps(tmp_path, tiny_mnist) -> None:
    with pytest.raises(SystemExit) as exc:
        stepprofile.main(["--data", str(tiny_mnist), "--out", str(tmp_path),
                          "--profile-steps", "0"])
    assert exc.value.code == 2
