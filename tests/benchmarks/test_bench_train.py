"""Tests for benchmarks/bench_train.py's helpers: the baseline's warm-up mirrors ``mnistbench
train``'s, leaves the trajectory unchanged, and the figures are computed alike on both sides."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

from mnistbench.measure import loaders
from mnistbench.measure.cellconfig import TrainConfig
from mnistbench.measure.warmup import warm_up
from tests.conftest import load_benchmark

bench = load_benchmark("bench_train")


class _RecordingTrainer:
    """Stands in for trainer.Trainer: records the batch sizes its warm-up runs."""

    device = torch.device("cpu")
    graphs = None  # no whole-step capture (measure.capture)

    def __init__(self) -> None:
        self.train_sizes: list[int] = []
        self.eval_sizes: list[int] = []

    def snapshot(self) -> dict:
        return {}

    def restore(self, state: dict) -> None:
        pass

    def step(self, x, y, timer) -> None:
        self.train_sizes.append(len(y))

    def evaluate(self, batches) -> None:
        self.eval_sizes.extend(len(y) for _x, y in batches)


@pytest.mark.parametrize(("train_size", "test_size", "warmup", "max_steps", "eval_bs"), [
    (60000, 10000, 3, 0, 128), (60000, 10000, 3, 40, 128), (60000, 10000, 5, 0, 1000),
    (60000, 10000, 0, 0, 128), (512, 256, 2, 0, 128), (500, 250, 1, 0, 100),
])
def test_warmup_shapes_match_mnistbench_train(tmp_path, train_size, test_size, warmup,
                                              max_steps, eval_bs):
    """The baseline warms up the same batch shapes as measure.warmup.warm_up for the same
    settings."""
    cfg = TrainConfig(out=tmp_path, batch_size=128, warmup_steps=warmup,
                      max_steps=max_steps, eval_batch_size=eval_bs)
    feed = loaders.Loaders(train=None, test=None, train_size=train_size, test_size=test_size,
                           sample_batch=lambda split, n: (torch.zeros(n), torch.zeros(n)))
    trainer = _RecordingTrainer()
    warm_up(trainer, feed, cfg)
    shapes = bench.warmup_shapes(train_size, 128, warmup, max_steps, test_size, eval_bs)
    assert shapes == (trainer.train_sizes, sorted(trainer.eval_sizes))


def test_default_warmup_steps_is_mnistbench_trains():
    """The benchmark's default warm-up is the step count ``mnistbench train`` uses by default."""
    assert bench.train_default("warmup_steps") == TrainConfig(out=Path("x")).warmup_steps


@pytest.mark.slow
def test_baseline_warmup_leaves_the_trajectory_unchanged(tiny_mnist):
    """A warmed-up baseline run reaches the same test loss and accuracy as an un-warmed one."""
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        train_ds, test_ds = bench.mnist_datasets(tiny_mnist, Path(tmp))
        cold = bench.run_baseline(train_ds, test_ds, "fp32", 0, warmup_steps=0)
        warm = bench.run_baseline(train_ds, test_ds, "fp32", 0, warmup_steps=3)
    assert cold["warmup_s"] == 0.0 < warm["warmup_s"]
    assert warm["steps"] == cold["steps"] == 4
    assert warm["acc"] == cold["acc"]
    assert warm["test_loss"] == pytest.approx(cold["test_loss"], rel=1e-6)


def test_epoch_seconds_measured_on_full_epochs_extrapolated_otherwise():
    """A full epoch counts as measured; a capped run scales its step time to the epoch."""
    full = {"epoch_s": 50.0, "train_s": 45.0, "steps": 469}
    capped = {"epoch_s": 6.0, "train_s": 4.0, "steps": 40}
    assert bench.epoch_seconds(full, 469) == 50.0
    assert bench.epoch_seconds(capped, 469) == pytest.approx(4.0 / 40 * 469 + 2.0)


def test_speedups_with_and_without_warmup():
    """Both ratios divide the baseline's figure by ours, the included one adding warm-up."""
    runs = {
        "baseline": [{"epoch_s": 40.0, "train_s": 36.0, "steps": 469, "acc": 98.0,
                      "warmup_s": 2.0}],
        "resident": [{"epoch_s": 20.0, "train_s": 18.0, "steps": 469, "acc": 98.5,
                      "warmup_s": 1.0}],
    }
    figures = {side: bench.side_figures(r, 469) for side, r in runs.items()}
    assert figures["baseline"]["with_warmup_s"] == 42.0
    assert bench.speedups(figures) == {"excluded": 2.0, "included": pytest.approx(42.0 / 21.0)}
