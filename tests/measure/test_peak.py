"""Tests of mnistbench.measure.peak: the device's measured limit, on the CPU."""

from __future__ import annotations

import pytest

from mnistbench.core import network
from mnistbench.measure import peak


def test_peak_measures_matmul_and_the_studys_convolution_per_precision(monkeypatch):
    """Every kernel and precision asked for has a positive, finite GFLOP/s from timed calls,
    the record says it was measured, and limit() picks the best kernel of a precision."""
    monkeypatch.setattr(peak, "MIN_SECONDS", 0.02)
    monkeypatch.setitem(peak.MATMUL_N, "cpu", (64, 128))
    monkeypatch.setitem(peak.CONV_WIDTHS, "cpu", (1, 2))
    monkeypatch.setattr(peak, "CONV_BATCH", 4)
    record = peak.measure("cpu", ("fp32", "bf16"), threads=1)
    assert record["threads"] == 1 and record["source"].startswith("measured")
    # Several shapes of each kernel per precision: the limit is the best of them.
    assert sorted((r["kernel"], r["precision"], r["shape"]) for r in record["rows"]) == sorted(
        (kernel, precision, shape) for precision in ("fp32", "bf16") for kernel, shape in (
            ("matmul", "64x64 @ 64x64"), ("matmul", "128x128 @ 128x128"),
            ("conv2", "batch 4, 32->64 ch, 3x3 on 26x26"),
            ("conv2", "batch 4, 64->128 ch, 3x3 on 26x26")))
    for row in record["rows"]:
        assert row["calls"] >= 1 and row["seconds"] >= 0.02
        assert 0 < row["gflops"] < 1e6
    assert peak.limit(record, "fp32") == max(r["gflops"] for r in record["rows"]
                                             if r["precision"] == "fp32")
    assert peak.limit(record, "fp16") is None


def test_the_convolution_kernel_is_the_networks_second_layer(monkeypatch):
    """conv2's FLOPs per call are the second layer's forward FLOPs at the kernel's batch."""
    import torch

    monkeypatch.setattr(peak, "CONV_BATCH", 2)
    _, fn, flops, shape = next(k for k in peak._kernels(torch.device("cpu"), torch.float32)
                               if k[0] == "conv2")
    s = network.shapes(1)
    per_sample = 2 * s.conv2_side ** 2 * s.conv2[1] * s.conv2[0] * network.KERNEL ** 2
    assert flops == 2 * per_sample and "32->64" in shape
    assert tuple(fn().shape) == (2, 64, 24, 24)


def test_an_unknown_precision_is_refused():
    with pytest.raises(KeyError):
        peak.measure("cpu", ("fp8",))
