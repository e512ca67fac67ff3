"""Tests for mnistbench.timing: phase timers whose phases add up to the epoch."""

from __future__ import annotations

import time

import pytest
import torch

from mnistbench import timing


def test_cpu_phases_sum_to_span() -> None:
    """Phases split the span between the first and last mark exactly."""
    timer = timing.CpuPhaseTimer()
    timer.start()
    for _ in range(3):
        time.sleep(0.002)
        timer.mark("data")
        time.sleep(0.004)
        timer.mark("forward")
    phases, span = timer.totals()
    assert set(phases) == {"data", "forward"}
    assert sum(phases.values()) == pytest.approx(span, rel=1e-12)
    assert phases["forward"] > phases["data"] > 0.005


def test_cpu_timer_restarts_per_epoch() -> None:
    """start() discards the previous epoch's marks."""
    timer = timing.CpuPhaseTimer()
    timer.start()
    time.sleep(0.01)
    timer.mark("data")
    timer.start()
    timer.mark("data")
    phases, span = timer.totals()
    assert span < 0.005 and phases["data"] < 0.005


def test_phase_timer_picks_by_device() -> None:
    """The CPU timer for cpu; the CUDA event timer for cuda."""
    assert isinstance(timing.phase_timer("cpu"), timing.CpuPhaseTimer)
    assert isinstance(timing.phase_timer("cuda"), timing.CudaPhaseTimer)


@pytest.mark.gpu
def test_cuda_phases_sum_to_span_and_track_wall_time() -> None:
    """CUDA event phases add up to their span, which matches the synchronised wall time."""
    timer = timing.CudaPhaseTimer()
    a = torch.randn(2048, 2048, device="cuda")
    torch.cuda.synchronize()
    wall = time.perf_counter()
    timer.start()
    for _ in range(5):
        a = a @ a
        a = a / a.norm()
        timer.mark("forward")
        time.sleep(0.01)  # host busy: the GPU idles, and the wait lands in the next phase
        timer.mark("data")
    phases, span = timer.totals()
    wall = time.perf_counter() - wall
    assert sum(phases.values()) == pytest.approx(span, rel=1e-6)
    assert span == pytest.approx(wall, rel=0.05)
    assert phases["data"] >= 0.04


def test_process_start_is_exact_to_a_clock_tick() -> None:
    """The start of a process just spawned lies between the moments before and after the
    spawn (psutil's create_time can be up to 1 s early), and a missing process falls back to
    now."""
    import subprocess
    import sys

    before = time.time()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2)"])
    after = time.time()
    try:
        start = timing.process_start_unix(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert before - 0.011 <= start <= after + 0.011
    assert abs(timing.process_start_unix(2**22 + 12345) - time.time()) < 0.5
