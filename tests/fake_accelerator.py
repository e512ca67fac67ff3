"""A fake ``torch.accelerator`` backend for a machine without one: a module of the shape of
``torch.cuda`` / ``torch.xpu`` (is_available, synchronize, Event, memory statistics, random
state, capability queries) whose device is the CPU, so that the trainer's device-generic path
(:class:`mnistbench.measure.backends.Backend`, the event and sync timers, peak memory, the
capability query) runs for real on CPU tensors. It counts what the trainer asked of it.

Usage: ``fake = install(monkeypatch, "xpu", events=False)`` makes ``backends.backend("xpu")``
return a :class:`~mnistbench.measure.backends.Backend` over ``fake``; every other device is
untouched.
"""

from __future__ import annotations

import time
from collections import Counter

from mnistbench.measure import backends


class FakeAccelerator:
    """The fake module. ``available``: what is_available() says; ``events``: whether it has
    an ``Event`` class; ``bf16``/``bf16_native``: its bf16 query with and without emulation;
    ``fp16``: ``get_device_properties(0).has_fp16``; ``peak_bytes``: what
    max_memory_allocated() reports; ``clock``: what an event reads when recorded (seconds;
    the host clock unless a test sets its own)."""

    def __init__(self, *, available: bool = True, events: bool = True, bf16: bool = True,
                 bf16_native: bool = True, fp16: bool = True, peak_bytes: int = 3 * 2**20):
        self.available, self.bf16, self.bf16_native, self.fp16 = available, bf16, bf16_native, fp16
        self.peak_bytes = peak_bytes
        self.calls: Counter[str] = Counter()
        self.rng_state = object()
        self.clock = time.perf_counter
        self.restored: list[object] = []
        if events:
            fake = self

            class Event:
                """A timing event: the host clock when recorded (CPU work is synchronous, so
                the device has reached the mark then)."""

                def __init__(self, enable_timing: bool = False) -> None:
                    assert enable_timing, "a timing event must be created with enable_timing"
                    fake.calls["Event"] += 1
                    self.t: float | None = None

                def record(self) -> None:
                    fake.calls["record"] += 1
                    self.t = fake.clock()

                def elapsed_time(self, end: Event) -> float:
                    return (end.t - self.t) * 1000.0  # ms, as torch's events

            self.Event = Event

    def is_available(self) -> bool:
        return self.available

    def synchronize(self) -> None:
        self.calls["synchronize"] += 1

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        return self.bf16 if including_emulation else self.bf16_native

    def get_device_properties(self, index: int = 0):
        fake = self

        class Props:
            name = "Fake Accelerator"
            has_fp16 = fake.fp16
            total_memory = 8 * 2**30

        return Props()

    def reset_peak_memory_stats(self, device=None) -> None:
        self.calls["reset_peak_memory_stats"] += 1

    def max_memory_allocated(self, device=None) -> int:
        self.calls["max_memory_allocated"] += 1
        return self.peak_bytes

    def get_rng_state(self):
        self.calls["get_rng_state"] += 1
        return self.rng_state

    def set_rng_state(self, state) -> None:
        self.restored.append(state)


def install(monkeypatch, name: str = "xpu", **options) -> FakeAccelerator:
    """Make ``backends.backend(name)`` a :class:`~mnistbench.measure.backends.Backend` over a new
    :class:`FakeAccelerator` (tensors on the CPU); return the fake."""
    fake = FakeAccelerator(**options)
    real = backends.backend

    def backend(device: str) -> backends.Backend:
        if device == name:
            return backends.Backend(name, fake, tensor_device="cpu")
        return real(device)

    monkeypatch.setattr(backends, "backend", backend)
    return fake
