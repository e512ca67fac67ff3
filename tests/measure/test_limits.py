"""Tests for mnistbench.measure.limits: the time limit (a failed cell naming it, never
swallowed, the signal put back), --max-batch's search, and a batch the data cannot hold."""

from __future__ import annotations

import contextlib
import signal
import time

import pytest
import torch

from mnistbench.core import options, schema
from mnistbench.measure import limits, train, trainer
from tests.conftest import TINY_TRAIN
from tests.measure.cells import read_csv, run


def test_time_limit_fails_the_cell_with_the_limit_as_reason(tmp_path, tiny_mnist,
                                                           monkeypatch) -> None:
    """A cell that outruns --time-limit ends failed (exit 12), naming the limit, the epoch it
    reached and the config key, with no epoch rows, and the next cell is not disturbed."""
    real_step = trainer.Trainer.step

    def slow(self, x, y, timer):
        time.sleep(0.05)
        return real_step(self, x, y, timer)

    monkeypatch.setattr(trainer.Trainer, "step", slow)
    code, summary, out = run(tmp_path, tiny_mnist, epochs=50, time_limit=0.6,
                             experiment="convergence")
    assert code == schema.EXIT_CODES["failed"]
    assert summary["status"] == "failed"
    assert summary["reason"].startswith("time limit of 0.6 s reached in timed epoch ")
    assert "of 50" in summary["reason"]
    assert "experiments.convergence.time_limit" in summary["reason"]
    assert summary["params"]["time_limit"] == 0.6
    assert read_csv(out / schema.EPOCHS_FILE) == []
    assert summary["timing"]["warmup_s"] > 0
    monkeypatch.setattr(trainer.Trainer, "step", real_step)
    code, summary, _ = run(tmp_path, tiny_mnist, name="after", time_limit=60)
    assert code == 0 and summary["status"] == "ok", summary["reason"]
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.default_int_handler)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_time_limit_is_not_swallowed_by_broad_handlers(tmp_path, tiny_mnist,
                                                      monkeypatch) -> None:
    """The limit fires through code that catches every Exception (as the resource sampler's
    stage switch does): the cell still ends failed, never ok."""
    real_step = trainer.Trainer.step

    def guarded(self, x, y, timer):
        with contextlib.suppress(Exception):  # a broad handler must not hide the limit
            time.sleep(0.05)
        return real_step(self, x, y, timer)

    monkeypatch.setattr(trainer.Trainer, "step", guarded)
    code, summary, _ = run(tmp_path, tiny_mnist, epochs=50, time_limit=0.3)
    assert code == 12 and summary["reason"].startswith("time limit of 0.3 s")


def test_time_limit_in_warm_up_says_so(tmp_path, tiny_mnist, monkeypatch) -> None:
    """A limit reached before the first timed epoch names the warm-up."""
    def stuck(trainer, loaders, cfg):
        time.sleep(5)

    monkeypatch.setattr(train, "warm_up", stuck)
    code, summary, _ = run(tmp_path, tiny_mnist, time_limit=0.2)
    assert code == 12 and "reached in the warm-up" in summary["reason"]


@pytest.mark.slow
def test_max_batch_doubles_until_out_of_memory_and_times_the_same_samples(
        tmp_path, tiny_mnist, monkeypatch) -> None:
    """--max-batch doubles from --batch-size until a step runs out of memory (simulated
    above 64 samples), trains at the last size that fitted, and scales max_steps so the cell
    times the same number of samples; the stop reason is recorded."""
    real_step = trainer.Trainer.step

    def step(self, x, y, timer):
        if len(y) > 64:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real_step(self, x, y, timer)

    monkeypatch.setattr(trainer.Trainer, "step", step)
    code, summary, _ = run(tmp_path, tiny_mnist, batch_size=16, max_steps=8, max_batch=True)
    assert code == 0, summary["reason"]
    params = summary["params"]
    assert (params["batch_size"], params["max_batch"], params["max_batch_stop"]) == (
        64, True, "out of memory")
    assert params["max_steps"] == 2  # 8 steps of 16 samples = 2 steps of 64
    assert summary["results"]["steps_per_epoch"] == 2


@pytest.mark.slow
def test_max_batch_on_a_cpu_stops_at_its_cap(tmp_path, tiny_mnist) -> None:
    """On a CPU the search stops at the training samples or the CPU cap, never beyond."""
    code, summary, _ = run(tmp_path, tiny_mnist, batch_size=64, max_steps=4, max_batch=True)
    assert code == 0, summary["reason"]
    assert summary["params"]["batch_size"] == min(options.CPU_MAX_BATCH_CAP, TINY_TRAIN)
    assert summary["params"]["max_batch_stop"] == "the cap"


def test_a_batch_larger_than_the_data_folder_holds_fails_naming_both(tmp_path,
                                                                     tiny_mnist) -> None:
    """A data folder with fewer samples than MNIST (here 512) and a batch of 1024: the cell is
    failed naming both numbers, never recorded as batch 1024 with steps of 512."""
    code, summary, _ = run(tmp_path, tiny_mnist, batch_size=1024)
    assert code == 12 and summary["status"] == "failed"
    assert summary["reason"].startswith(
        f"batch size 1024 is larger than the {TINY_TRAIN} training samples in {tiny_mnist}")


def test_out_of_memory_is_told_from_other_errors() -> None:
    """torch's OutOfMemoryError, MemoryError and the allocators' messages are out of memory
    (a cell's oom status, the search's stop); any other error is not."""
    assert limits.is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert limits.is_oom(MemoryError())
    assert limits.is_oom(RuntimeError("HIP out of memory"))
    assert limits.is_oom(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried"))
    assert not limits.is_oom(ValueError("the step broke"))


def test_a_reason_quotes_the_first_line_of_the_message_or_the_type() -> None:
    assert limits.first_line(RuntimeError("  first\nsecond")) == "first"
    assert limits.first_line(ValueError()) == "ValueError"


def test_no_time_limit_leaves_the_alarm_alone() -> None:
    """time_limit(0) installs no handler and no timer."""
    before = signal.getsignal(signal.SIGALRM)
    with limits.time_limit(0):
        assert signal.getsignal(signal.SIGALRM) is before
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
