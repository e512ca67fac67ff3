"""Phase timers for one epoch: consecutive marks split the epoch into phases, so the phases
add up to the span from the first mark to the last by construction.

- :class:`CpuPhaseTimer`: ``time.perf_counter`` at each mark. CPU work in PyTorch is
  synchronous, so a mark is taken when the phase's work is done.
- :class:`CudaPhaseTimer`: a CUDA event recorded on the current stream at each mark, so every
  phase is measured on the GPU's own timeline with no synchronisation inside the loop. Time
  the GPU spent idle waiting for the host (e.g. for the next batch) lands in the phase whose
  mark came next, which is where it belongs: a GPU starved by its data loader shows it as
  data time. The events are read once, after one synchronisation at the end of the epoch.
- :class:`EventPhaseTimer`: the same with any backend's timing events (``torch.xpu.Event``,
  ``torch.mps.Event``); :class:`CudaPhaseTimer` is it with CUDA's.
- :class:`SyncPhaseTimer`: for a backend without timing events: synchronise the device, then
  ``time.perf_counter``, at each mark (the synchronisations cost the device some overlap).

:func:`phase_timer` picks by the cell's device; the summary records which
(``timing.timing_method``, :data:`mnistbench.core.devices.TIMING_METHODS`).
"""

from __future__ import annotations

import time
from collections import defaultdict


class CpuPhaseTimer:
    """Marks with ``time.perf_counter``; durations in seconds."""

    def __init__(self) -> None:
        self._marks: list[tuple[str, float]] = []

    def start(self) -> None:
        """Begin the epoch (the reference point of the first phase)."""
        self._marks = [("", time.perf_counter())]

    def mark(self, phase: str) -> None:
        """End ``phase`` now; the next phase starts here."""
        self._marks.append((phase, time.perf_counter()))

    def totals(self) -> tuple[dict[str, float], float]:
        """Seconds per phase, and the span from :meth:`start` to the last mark."""
        out: dict[str, float] = defaultdict(float)
        for (_, t0), (phase, t1) in zip(self._marks, self._marks[1:], strict=False):
            out[phase] += t1 - t0
        return dict(out), self._marks[-1][1] - self._marks[0][1]


class EventPhaseTimer:
    """Marks with a backend's timing events on its current stream; durations in seconds.

    ``event``: the event class (called as ``event(enable_timing=True)``); ``synchronize``: the
    backend's device synchronisation. Events are pooled and reused across epochs, so the timed
    loop allocates nothing."""

    def __init__(self, event, synchronize) -> None:
        self._event_class = event
        self._synchronize = synchronize
        self._pool: list = []
        self._phases: list[str] = []
        self._used = 0

    def _event(self):
        if self._used == len(self._pool):
            self._pool.append(self._event_class(enable_timing=True))
        event = self._pool[self._used]
        self._used += 1
        return event

    def start(self) -> None:
        """Begin the epoch: record the reference event."""
        self._used = 0
        self._phases = [""]
        self._event().record()

    def mark(self, phase: str) -> None:
        """End ``phase`` when the device reaches this point of the stream."""
        self._phases.append(phase)
        self._event().record()

    def totals(self) -> tuple[dict[str, float], float]:
        """Synchronise once, then seconds per phase and the span of all marks."""
        self._synchronize()
        events = self._pool[: self._used]
        out: dict[str, float] = defaultdict(float)
        for i in range(1, len(events)):
            out[self._phases[i]] += events[i - 1].elapsed_time(events[i]) / 1000.0
        span = events[0].elapsed_time(events[-1]) / 1000.0 if len(events) > 1 else 0.0
        return dict(out), span


class CudaPhaseTimer(EventPhaseTimer):
    """Marks with CUDA events on the current stream; durations in seconds.

    Events are pooled and reused across epochs, so the timed loop allocates nothing."""

    def __init__(self) -> None:
        import torch

        super().__init__(torch.cuda.Event, torch.cuda.synchronize)


class SyncPhaseTimer(CpuPhaseTimer):
    """For a device without timing events: each mark synchronises the device, then reads
    ``time.perf_counter``; durations in seconds."""

    def __init__(self, synchronize) -> None:
        super().__init__()
        self._synchronize = synchronize

    def start(self) -> None:
        """Begin the epoch once the device is idle."""
        self._synchronize()
        super().start()

    def mark(self, phase: str) -> None:
        """End ``phase`` when the device has done its queued work."""
        self._synchronize()
        super().mark(phase)


def phase_timer(device: str):
    """The right timer for the cell's ``device`` (one of :data:`mnistbench.core.devices.DEVICES`):
    CUDA events on cuda, the backend's events where it has them, else synchronise + host
    clock; the host clock on cpu."""
    if device == "cuda":
        return CudaPhaseTimer()
    if device == "cpu":
        return CpuPhaseTimer()
    from mnistbench.measure import backends

    chosen = backends.backend(device)
    event = chosen.event_class()
    if event is not None:
        return EventPhaseTimer(event, chosen.synchronize)
    return SyncPhaseTimer(chosen.synchronize)


def timing_method(device: str) -> str:
    """How :func:`phase_timer` times ``device`` (a key of
    :data:`mnistbench.core.devices.TIMING_METHODS`)."""
    from mnistbench.measure import backends

    return backends.backend(device).timing_method


def synchronize(device: str) -> None:
    """Wait for the device to finish queued work (a no-op on CPU)."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
    elif device != "cpu":
        from mnistbench.measure import backends

        backends.backend(device).synchronize()
