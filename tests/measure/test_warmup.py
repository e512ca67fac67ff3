"""Tests for mnistbench.measure.warmup: the untimed warm-up runs the timed paths (data,
compilation) and leaves the trajectory and the GradScaler's calibration as they should be."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from mnistbench.core import schema
from mnistbench.measure import trainer, warmup
from mnistbench.measure.cellconfig import TrainConfig
from tests.conftest import TINY_TRAIN
from tests.measure.cells import read_csv, run


@pytest.mark.slow
def test_warm_up_does_not_change_the_trajectory(tmp_path, tiny_mnist) -> None:
    """The same seed gives the same losses and accuracy with and without warm-up steps."""
    settings = {"epochs": 2, "max_steps": 6, "loader": "resident", "threads": 1}
    _, cold, out_cold = run(tmp_path, tiny_mnist, "cold", warmup_steps=0, **settings)
    _, warm, out_warm = run(tmp_path, tiny_mnist, "warm", warmup_steps=4, **settings)
    assert cold["timing"]["warmup_s"] == 0
    assert warm["timing"]["warmup_s"] > 0
    keys = ("train_loss", "test_loss", "test_acc")
    strip = [{k: r[k] for k in keys} for r in read_csv(out_cold / schema.EPOCHS_FILE)]
    assert strip == [{k: r[k] for k in keys} for r in read_csv(out_warm / schema.EPOCHS_FILE)]


@pytest.mark.slow
def test_compiled_model_puts_compilation_into_warm_up(tmp_path, tiny_mnist,
                                                      monkeypatch) -> None:
    """With torch.compile the cell ends ok and compilation shows up as warm-up, not epochs."""
    if not any(shutil.which(cxx) for cxx in ("g++", "c++", "clang++")):
        pytest.skip("torch.compile on CPU needs a C++ compiler, and none is on PATH "
                    "(apt-get install g++)")
    # Inductor compiles in this process, not in a pool of workers that each import torch
    # first: on 2 cores beside the other test worker, 35 CPU-s instead of 47.
    import torch._inductor.config as inductor_config

    monkeypatch.setattr(inductor_config, "compile_threads", 1)
    code, summary, _ = run(tmp_path, tiny_mnist, compile="default", epochs=2, max_steps=4)
    assert code == 0, summary["reason"]
    assert summary["params"]["compile"] == "default"
    assert summary["timing"]["warmup_s"] > summary["results"]["epoch_s_median"]


def test_warm_up_runs_the_timed_data_path(tiny_mnist, monkeypatch) -> None:
    """A resident cell's warm-up draws its training batches as the timed loop does (a host
    permutation copied over, then index_select: ResidentLoader.batch), from its own generator:
    the cell's shuffling generator is untouched, and a warm-up batch is a shuffled gather, not
    the first rows."""
    from mnistbench.measure import loaders as loaders_mod

    cfg = TrainConfig(out=Path("unused"), data=tiny_mnist, batch_size=32,
                      warmup_steps=2, eval_batch_size=32, test_limit=64)
    shuffle_gen = torch.Generator().manual_seed(7)
    before = shuffle_gen.get_state()
    built = loaders_mod.build_loaders(cfg, torch.device("cpu"), shuffle_gen)
    calls = []
    real = loaders_mod.ResidentLoader.batch

    def spy(self, order, i):
        calls.append((len(order), i))
        return real(self, order, i)

    monkeypatch.setattr(loaders_mod.ResidentLoader, "batch", spy)
    x, _ = built.sample_batch("train", 32)
    assert calls == [(TINY_TRAIN, 0)]
    assert not torch.equal(x, built.train.images[:32])  # gathered, not sliced
    calls.clear()
    cell = trainer.Trainer(cfg, torch.device("cpu"), init_seed=0)
    warmup.warm_up(cell, built, cfg)
    assert len(calls) == cfg.warmup_steps  # 512 % 32 == 0: no tail batch
    assert torch.equal(shuffle_gen.get_state(), before)


def test_grad_scaler_keeps_its_warm_up_state() -> None:
    """The warm-up restore puts the model, optimizer and generators back, but the fp16
    GradScaler keeps the scale the warm-up settled on (recreating it threw that away)."""
    cfg = TrainConfig(out=Path("unused"), precision="fp16", batch_size=8)
    cell = trainer.Trainer(cfg, torch.device("cpu"), init_seed=0)
    scaler = cell.scaler
    state = cell.snapshot()
    x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
    cell.step(x, y, trainer.NullTimer())
    scaler.update(new_scale=128.0)  # as a warm-up overflow would have lowered it
    cell.restore(state)
    assert cell.scaler is scaler
    assert cell.scaler.get_scale() == 128.0
