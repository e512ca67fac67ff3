"""Tests for mnistbench.measure.trainer: the network a cell trains is the one it records (its
width, and so its FLOPs)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from mnistbench.core import network, schema
from mnistbench.measure import train
from mnistbench.measure.cellconfig import TrainConfig
from mnistbench.measure.model import build_model
from mnistbench.measure.trainer import Trainer


def shapes(net: torch.nn.Module) -> list[tuple[int, ...]]:
    return [tuple(p.shape) for p in net.parameters()]


def train_flops_per_sample(net: torch.nn.Module) -> int:
    """What torch's FLOP counter counts for one training sample through ``net``."""
    x = torch.randn(1, 1, 28, 28).contiguous(memory_format=torch.channels_last)
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(net(x), torch.zeros(1, dtype=torch.long)).backward()
    net.zero_grad(set_to_none=True)
    return counter.get_total_flops()


@pytest.mark.parametrize("implementation", ["stock", "tuned"])
@pytest.mark.parametrize("width", [1, 2])
def test_the_trainer_builds_the_network_of_its_width(implementation, width):
    """The trainer's network has the parameters of the network at the configured width (the
    width-1 network in its place would differ in every convolution's channels)."""
    cfg = SimpleNamespace(device="cpu", precision="fp32", implementation=implementation,
                          width=width, compile="", lr=1e-3)
    trainer = Trainer(cfg, torch.device("cpu"), init_seed=0)
    assert shapes(trainer.base) == shapes(build_model(0, implementation, width))
    assert shapes(trainer.base) != shapes(build_model(0, implementation, 3 - width))


@pytest.mark.slow
def test_a_width_two_cell_trains_the_network_it_records(tmp_path, tiny_mnist, monkeypatch):
    """A cell run with width 2 trains the width-2 network: the network its trainer trained has
    the width-2 parameters, and torch counts for it the FLOPs per training sample the summary
    records (network.train_flops(2), which the width-1 network does not reach)."""
    built: list[Trainer] = []
    init = Trainer.__init__

    def recording_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(Trainer, "__init__", recording_init)
    out = tmp_path / "cell"
    cfg = TrainConfig(out=out, data=tiny_mnist, width=2, max_steps=2, warmup_steps=1,
                      batch_size=32, test_limit=64, sample_interval=0.05, quiet=True)
    assert train.run_cell(cfg) == 0
    summary = json.loads((out / schema.SUMMARY_FILE).read_text())
    assert summary["params"]["width"] == 2
    trained = built[-1].base
    assert shapes(trained) == shapes(build_model(0, summary["params"]["implementation"], 2))
    recorded = summary["results"]["train_flops_per_sample"]
    assert recorded == network.train_flops(2) != network.train_flops(1)
    assert train_flops_per_sample(trained) == recorded
