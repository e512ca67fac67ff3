"""Tests for mnistbench.measure.timing: phase timers whose phases add up to the epoch."""

from __future__ import annotations

import time

import pytest
import torch

from mnistbench.core import clock
from mnistbench.measure import timing


class ManualClock:
    """A host clock that moves only when told (seconds): timings with exact expected values,
    whatever else loads the machine. ``perf_counter`` stands in for ``time.perf_counter``."""

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def manual_clock(monkeypatch) -> ManualClock:
    """The timing module's host clock, replaced by a :class:`ManualClock`."""
    manual = ManualClock()
    monkeypatch.setattr(timing, "time", manual)
    return manual


def _three_steps(timer, clock: ManualClock) -> None:
    """Three steps of 2 ms "data" then 4 ms "forward", marked on ``timer``."""
    for _ in range(3):
        clock.advance(0.002)
        timer.mark("data")
        clock.advance(0.004)
        timer.mark("forward")


def test_cpu_phases_sum_to_span(manual_clock) -> None:
    """Phases split the span between the first and last mark exactly."""
    timer = timing.CpuPhaseTimer()
    timer.start()
    _three_steps(timer, manual_clock)
    phases, span = timer.totals()
    assert phases == pytest.approx({"data": 0.006, "forward": 0.012}, abs=1e-12)
    assert sum(phases.values()) == pytest.approx(span, rel=1e-12)
    assert span == pytest.approx(0.018, abs=1e-12)


def test_cpu_timer_restarts_per_epoch(manual_clock) -> None:
    """start() discards the previous epoch's marks."""
    timer = timing.CpuPhaseTimer()
    timer.start()
    manual_clock.advance(0.01)
    timer.mark("data")
    timer.start()
    manual_clock.advance(0.001)
    timer.mark("data")
    phases, span = timer.totals()
    assert span == pytest.approx(0.001, abs=1e-12) and phases == pytest.approx({"data": 0.001})


def test_phase_timer_picks_by_device() -> None:
    """The CPU timer for cpu; the CUDA event timer for cuda."""
    assert isinstance(timing.phase_timer("cpu"), timing.CpuPhaseTimer)
    assert isinstance(timing.phase_timer("cuda"), timing.CudaPhaseTimer)


def test_phase_timer_uses_a_backends_events_else_sync_and_host_clock(monkeypatch) -> None:
    """An accelerator with timing events gets the event timer; one without, the timer that
    synchronises before each host-clock mark; the summary's method says which."""
    from tests.fake_accelerator import install

    install(monkeypatch, "xpu")
    assert isinstance(timing.phase_timer("xpu"), timing.EventPhaseTimer)
    assert timing.timing_method("xpu") == "device-events"
    install(monkeypatch, "mps", events=False)
    assert isinstance(timing.phase_timer("mps"), timing.SyncPhaseTimer)
    assert timing.timing_method("mps") == "sync+host-clock"
    assert timing.timing_method("cpu") == "host-clock"
    assert timing.timing_method("cuda") == "cuda-events"


def test_event_timer_phases_sum_to_span_with_one_sync(monkeypatch, manual_clock) -> None:
    """Event phases add up to their span, and the device is synchronised once, when the
    totals are read, not at the marks."""
    from tests.fake_accelerator import install

    fake = install(monkeypatch, "xpu")
    fake.clock = manual_clock.perf_counter
    timer = timing.phase_timer("xpu")
    timer.start()
    _three_steps(timer, manual_clock)
    assert fake.calls["synchronize"] == 0
    phases, span = timer.totals()
    assert fake.calls["synchronize"] == 1
    assert fake.calls["record"] == 7
    assert phases == pytest.approx({"data": 0.006, "forward": 0.012}, abs=1e-9)
    assert sum(phases.values()) == pytest.approx(span, rel=1e-9)
    timer.start()  # a new epoch reuses the pooled events
    timer.mark("data")
    timer.totals()
    assert fake.calls["Event"] == 7


def test_sync_timer_synchronises_at_every_mark(monkeypatch, manual_clock) -> None:
    """Without events, every mark waits for the device before reading the host manual_clock."""
    from tests.fake_accelerator import install

    fake = install(monkeypatch, "mps", events=False)
    timer = timing.phase_timer("mps")
    timer.start()
    manual_clock.advance(0.003)
    timer.mark("data")
    timer.mark("forward")
    phases, span = timer.totals()
    assert fake.calls["synchronize"] == 3
    assert phases == pytest.approx({"data": 0.003, "forward": 0.0}, abs=1e-12)
    assert sum(phases.values()) == pytest.approx(span)


def test_synchronize_reaches_the_backend(monkeypatch) -> None:
    """timing.synchronize waits on an accelerator's backend and does nothing on the CPU."""
    from tests.fake_accelerator import install

    fake = install(monkeypatch, "xpu")
    timing.synchronize("cpu")
    timing.synchronize("xpu")
    assert fake.calls["synchronize"] == 1


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
        start = clock.process_start_unix(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert before - 0.011 <= start <= after + 0.011
    before = time.time()
    missing = clock.process_start_unix(2**22 + 12345)
    assert before <= missing <= time.time()
