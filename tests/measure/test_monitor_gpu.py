"""Tests of mnistbench.measure.monitor's GPU utilisation: not reported where the stage is
shorter than the sampler and NVML resolve (issue 39)."""

from __future__ import annotations

import pytest

from mnistbench.core import schema
from mnistbench.measure.monitor import ResourceMonitor


def test_gpu_utilisation_of_a_stage_shorter_than_the_sampler_resolves_is_not_reported():
    """NVML's utilisation is a share of its own sample period (up to 1 s): a train stage of
    0.3 s reads anything from 1 % to 76 %, so it is left empty; from two intervals and 1 s on
    it is reported. The power mean is kept (a mean of readings, not a share)."""
    mon = ResourceMonitor(interval=0.1)

    def rows(dts):
        out = []
        for i, _ in enumerate(dts):
            r = dict.fromkeys(schema.RESOURCE_COLUMNS)
            r.update(t_s=float(i), stage="train", gpu_util_pct=76.0, gpu_power_w=200.0)
            out.append(r)
        return out

    mon.rows, mon._dts = rows([0.1, 0.1, 0.1]), [0.1, 0.1, 0.1]
    short = mon.summary("train")
    assert short["gpu_util_mean"] is None and short["gpu_util_peak"] is None
    assert short["gpu_power_mean_w"] == pytest.approx(200.0)
    mon.rows, mon._dts = rows([0.5, 0.5]), [0.5, 0.5]
    assert mon.summary("train")["gpu_util_mean"] == pytest.approx(76.0)
    assert ResourceMonitor(interval=2.0).min_util_span_s == 4.0
