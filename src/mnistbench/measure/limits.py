"""What bounds a cell: its time limit (a SIGALRM timer around the warm-up and the timed epochs),
the memory a step may use (out-of-memory errors told apart, and ``--max-batch``'s search for the
largest batch that fits), and the batch the loaded data can hold; and how a cell's reason
quotes the exception that stopped it (:func:`first_line`)."""

from __future__ import annotations

import contextlib
import math
import resource
import signal

import torch

from mnistbench.core.options import CPU_MAX_BATCH_CAP, MAX_BATCH_CAP
from mnistbench.measure.cellconfig import InvalidSetting, TrainConfig
from mnistbench.measure.timing import synchronize
from mnistbench.measure.trainer import NullTimer, Trainer

#: Share of the memory available at the start that a CPU search may plan to use.
CPU_MEMORY_SHARE = 0.5


class TimeLimitReached(BaseException):
    """The cell's ``time_limit`` passed during its warm-up or timed epochs. A BaseException
    (like KeyboardInterrupt), so that no ``except Exception`` on the way (e.g. the resource
    sampler's) can swallow it."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise :class:`TimeLimitReached` in the main thread once ``seconds`` have passed inside
    the block (0: no limit). A real-time interval timer (SIGALRM) costs nothing per step; the
    exception lands at the next Python bytecode, i.e. after the running kernel returns."""
    if not seconds:
        yield
        return

    def on_alarm(signum, frame):
        raise TimeLimitReached

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` says the device (or the host) ran out of memory."""
    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return True
    text = str(exc)
    return "out of memory" in text.lower() or "can't allocate memory" in text


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (its type's name when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def find_max_batch(cfg: TrainConfig, device: torch.device, train_size: int) -> int:
    """The largest batch size that fits (--max-batch), found by trying: doubling from
    ``cfg.batch_size``, one training step each on random data, until the device runs out of
    memory (an accelerator), the memory a CPU step would need passes
    :data:`CPU_MEMORY_SHARE` of what was available, or a cap (options.CPU_MAX_BATCH_CAP on a
    CPU, options.MAX_BATCH_CAP elsewhere, and ``train_size``). Sets ``cfg.batch_size`` to it
    and scales ``cfg.max_steps`` so the cell times the same number of samples; records the
    search in ``cfg.resolved`` and returns the size."""
    import psutil

    start = cfg.batch_size
    cap = min(CPU_MAX_BATCH_CAP if device.type == "cpu" else MAX_BATCH_CAP, train_size)
    budget = CPU_MEMORY_SHARE * psutil.virtual_memory().available
    process = psutil.Process()
    best, size, per_sample, stop = start, start, None, "the cap"
    while size <= cap:
        if device.type == "cpu" and per_sample is not None and per_sample * size > budget:
            stop = "the CPU memory budget"
            break
        probe = Trainer(cfg, device, init_seed=0)
        x = torch.randn(size, 1, 28, 28, device=device)
        y = torch.randint(0, 10, (size,), device=device)
        before = process.memory_info().rss
        try:
            probe.step(x, y, NullTimer())
            synchronize(cfg.device)
        except Exception as exc:
            if not is_oom(exc):
                raise
            stop = "out of memory"
            break
        finally:
            del probe, x, y
            if device.type == "cuda":
                torch.cuda.empty_cache()
        used = max(process.memory_info().rss, resource.getrusage(
            resource.RUSAGE_SELF).ru_maxrss * 1024) - before
        per_sample = max(used, 1) / size
        best, size = size, size * 2
    if cfg.max_steps:
        cfg.max_steps = max(1, math.ceil(cfg.max_steps * start / best))
    cfg.batch_size = best
    cfg.resolved["batch_size"] = best
    cfg.resolved["max_batch_stop"] = stop
    return best


def check_batch_fits(cfg: TrainConfig, train_size: int, test_size: int) -> None:
    """Against the data as loaded (a data folder may hold fewer samples than MNIST): raise
    :class:`InvalidSetting` when a step could not hold ``cfg.batch_size`` samples (the cell
    would record a batch size no step had); record the evaluation's batch size as what a
    batch holds at most (``eval_batch_size`` above the test samples is the test set)."""
    if cfg.batch_size > train_size and not cfg.max_batch:
        raise InvalidSetting(
            f"batch size {cfg.batch_size} is larger than the {train_size} training samples in "
            f"{cfg.data}: each step would hold {train_size} samples while the cell recorded "
            f"{cfg.batch_size}; pass --batch-size {train_size} or less")
    cfg.eval_batch_size = min(cfg.eval_batch_size, max(test_size, 1))
