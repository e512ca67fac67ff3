"""Tests for mnistbench.measure.capture: the whole training step as one CUDA graph, checked on
the CPU where nothing is captured and the same step runs eagerly (batch selection by the
device-side step counter, the updates against the eager loop, the cell's bookkeeping)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from mnistbench.core import devices, options, schema
from mnistbench.measure import capture, optim, train, trainer
from mnistbench.measure.cellconfig import TrainConfig
from mnistbench.measure.loaders import ResidentLoader
from mnistbench.results import validate

GRAPH = options.GRAPH_IMPLEMENTATION


def _split(n: int = 100) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(5)
    return torch.randn(n, 1, 28, 28, generator=gen), torch.randint(0, 10, (n,), generator=gen)


def _cfg(**overrides) -> TrainConfig:
    return TrainConfig(out=Path("unused"), **{"batch_size": 32, **overrides})


def test_the_step_counter_selects_the_eager_loops_batches() -> None:
    """Step by step, the batch the device-side counter gathers from the device order is the
    resident loader's batch of the same seed, the last (shorter) one included."""
    images, labels = _split(100)  # 3 batches of 32 and a tail of 4
    loader = ResidentLoader(images, labels, 32, shuffle=True,
                            generator=torch.Generator().manual_seed(9))
    expected = list(loader)
    cell = trainer.Trainer(_cfg(implementation=GRAPH), torch.device("cpu"), init_seed=0)
    graphs = capture.StepGraphs(cell, images, labels, 32, len(expected), capture=False)
    graphs.begin_epoch(ResidentLoader(images, labels, 32, shuffle=True,
                                      generator=torch.Generator().manual_seed(9)).epoch_order())
    assert graphs.shapes == [32, 4]
    for step, (x, y) in enumerate(expected):
        graphs.step_index.fill_(step)
        got_x, got_y = graphs.batch(graphs.size_of(step))
        assert torch.equal(got_x, x) and torch.equal(got_y, y)


def test_replayed_steps_give_the_eager_loops_parameters() -> None:
    """The captured-style step run eagerly trains to the same parameters, bit for bit, as the
    trainer's eager loop over the same batches with the same seeds (dropout included), and
    records the same losses at the counter's positions."""
    images, labels = _split(100)
    seed = 11

    def eager():
        torch.manual_seed(seed)
        cell = trainer.Trainer(_cfg(), torch.device("cpu"), init_seed=0)
        loader = ResidentLoader(images, labels, 32, shuffle=True,
                                generator=torch.Generator().manual_seed(3))
        cell.begin_epoch(len(loader))
        for x, y in loader:
            cell.step(x, y, trainer.NullTimer())
        return cell, cell.take_losses()

    def graphed():
        torch.manual_seed(seed)
        cell = trainer.Trainer(_cfg(implementation=GRAPH), torch.device("cpu"), init_seed=0)
        loader = ResidentLoader(images, labels, 32, shuffle=True,
                                generator=torch.Generator().manual_seed(3))
        graphs = capture.StepGraphs(cell, images, labels, 32, len(loader), capture=False)
        graphs.begin_epoch(loader.epoch_order())
        for step in range(len(loader)):
            graphs.replay(step)
        assert graphs.step_index.item() == len(loader)
        return cell, graphs.take_losses(len(loader))

    (a, losses_a), (b, losses_b) = eager(), graphed()
    for p, q in zip(a.base.parameters(), b.base.parameters(), strict=True):
        assert torch.equal(p, q)
    assert losses_a == losses_b
    assert losses_b[1] == [32, 32, 32, 4]


def test_warm_up_and_restore_leave_the_trajectory_unchanged() -> None:
    """Running each shape's step in the warm-up, then restoring, leaves the state as it was:
    the step counter back at 0 and the first replay's loss that of a cold start."""
    images, labels = _split(64)

    def first_loss(warm: bool) -> float:
        torch.manual_seed(2)
        cell = trainer.Trainer(_cfg(implementation=GRAPH), torch.device("cpu"), init_seed=0)
        graphs = capture.StepGraphs(cell, images, labels, 32, 2, capture=False)
        if warm:
            state = cell.snapshot()
            graphs.warm_up()
            cell.restore(state)
            graphs.capture_graphs()
        assert graphs.step_index.item() == 0
        graphs.begin_epoch(torch.arange(64))
        graphs.replay(0)
        return graphs.take_losses(1)[0][0]

    assert first_loss(True) == first_loss(False)


@pytest.fixture
def fallback_adam(monkeypatch):
    """Cells of the test get torch.optim.Adam(fused=True), as where the private kernel fails
    its check; the next user checks anew."""
    optim.adam_impl.cache_clear()
    with monkeypatch.context() as patch:
        patch.delattr(torch, "_fused_adam_")
        assert optim.adam_impl().name == optim.PUBLIC_FALLBACK
    yield
    optim.adam_impl.cache_clear()


def _warmed_graph_cell(images, labels) -> capture.StepGraphs:
    """A graph cell through its warm-up, restore and capture, as warm_up runs them."""
    torch.manual_seed(2)
    cell = trainer.Trainer(_cfg(implementation=GRAPH), torch.device("cpu"), init_seed=0)
    graphs = capture.StepGraphs(cell, images, labels, 32, 2, capture=False)
    state = cell.snapshot()
    graphs.warm_up()
    cell.restore(state)
    graphs.capture_graphs()
    return graphs


@pytest.mark.parametrize("impl", ["private kernel", "fallback"])
def test_the_captured_step_makes_no_optimizer_state(request, monkeypatch, impl) -> None:
    """The restore leaves Adam's state empty; the capture makes it first, outside the
    graph. Made inside, its zeros would be a fill each replay runs again: the moments and
    the step count reset at every step. So after capture_graphs a step makes no tensor of
    zeros, and every parameter has its state (step 0, zero moments: a first step's)."""
    if impl == "fallback":
        request.getfixturevalue("fallback_adam")
    graphs = _warmed_graph_cell(*_split(64))
    opt = graphs.trainer.optimizer
    assert isinstance(opt, optim.FusedAdam) == (impl == "private kernel")
    if impl == "fallback":  # torch.optim refuses a capture otherwise
        assert opt.param_groups[0]["capturable"] is True
    params = list(graphs.trainer.base.parameters())
    for p in params:
        state = opt.state[p]
        assert state["step"].item() == 0 and not state["exp_avg"].any()
        assert not state["exp_avg_sq"].any()

    def made_in_the_step(*args, **kwargs):
        raise AssertionError("optimizer state made inside the captured step")

    graphs.begin_epoch(torch.arange(64))
    with monkeypatch.context() as patch:
        patch.setattr(torch, "zeros", made_in_the_step)
        patch.setattr(torch, "zeros_like", made_in_the_step)
        graphs.replay(0)
        graphs.replay(1)
    assert all(opt.state[p]["step"].item() == 2 for p in params)


def test_a_replayed_epoch_reads_nothing_back_to_the_host(monkeypatch) -> None:
    """The batch is selected, the loss recorded and the counter advanced on the device: an
    epoch of replays makes no host read (what a graph could not hold); the losses are read
    once, after it."""
    images, labels = _split(100)
    cell = trainer.Trainer(_cfg(implementation=GRAPH), torch.device("cpu"), init_seed=0)
    graphs = capture.StepGraphs(cell, images, labels, 32, 4, capture=False)
    graphs.capture_graphs()
    graphs.begin_epoch(torch.randperm(100, generator=torch.Generator().manual_seed(0)))

    def host_read(self, *args, **kwargs):
        raise AssertionError("a host read inside the replayed steps")

    with monkeypatch.context() as patch:
        for name in ("item", "tolist", "__bool__", "__int__", "__float__", "numpy"):
            patch.setattr(torch.Tensor, name, host_read)
        for step in range(4):
            graphs.replay(step)
    losses, sizes = graphs.take_losses(4)
    assert sizes == [32, 32, 32, 4] and all(v > 0 for v in losses)
    assert graphs.step_index.item() == 4


def test_a_graph_cell_trains_as_the_tuned_cell_with_the_fallback_adam(fallback_adam) -> None:
    """With torch.optim.Adam(fused=True, capturable=True) (the fallback of a graph cell)
    the replayed steps give the eager tuned cell's parameters bit for bit."""
    images, labels = _split(64)
    order = torch.randperm(64, generator=torch.Generator().manual_seed(1))
    graphs = _warmed_graph_cell(images, labels)
    graphs.begin_epoch(order)
    graphs.replay(0)
    graphs.replay(1)
    torch.manual_seed(2)
    eager = trainer.Trainer(_cfg(), torch.device("cpu"), init_seed=0)
    assert isinstance(eager.optimizer, torch.optim.Adam)
    for i in (0, 32):
        idx = order[i:i + 32]
        eager.step(images[idx], labels[idx], trainer.NullTimer())
    for p, q in zip(eager.base.parameters(), graphs.trainer.base.parameters(), strict=True):
        assert torch.equal(p, q)


def _read(out: Path) -> tuple[dict, list[dict]]:
    summary = json.loads((out / schema.SUMMARY_FILE).read_text())
    with (out / schema.EPOCHS_FILE).open(newline="") as handle:
        return summary, list(csv.DictReader(handle))


def test_a_graph_cell_records_what_it_measured(tmp_path, tiny_mnist) -> None:
    """A tuned-graph cell trains as the tuned cell does (the same training losses, epoch by
    epoch), records data, train and eval time, leaves forward, backward and optimizer empty
    (not split inside a graph), says so (phase_split graph), evaluates the whole test split
    at once and records that no CUDA graph ran on a CPU."""
    runs = tmp_path / "e" / "adhoc"  # RUNS/ENV/EXPERIMENT/CELL, as the reader wants
    # 100 of the folder's samples: three batches of 32 and a tail of 4, as on the full split
    common = {"data": tiny_mnist, "env": "e", "epochs": 2, "batch_size": 32, "train_limit": 100,
              "test_limit": 64, "warmup_steps": 1, "sample_interval": 0.05, "quiet": True}
    for name, impl in (("graph", GRAPH), ("tuned", "tuned")):
        assert train.run_cell(TrainConfig(out=runs / name, implementation=impl,
                                          **common)) == 0
    graph, graph_rows = _read(runs / "graph")
    tuned, tuned_rows = _read(runs / "tuned")
    assert [r["train_loss"] for r in graph_rows] == [r["train_loss"] for r in tuned_rows]
    assert graph["timing"]["phase_split"] == schema.PHASE_SPLIT_GRAPH
    assert tuned["timing"]["phase_split"] == schema.PHASE_SPLIT_STEPS
    assert graph["params"]["eval_batch_size"] == 64  # the whole (limited) test split
    assert graph["params"]["cuda_graphs"] is False
    for row in graph_rows:
        assert int(row["steps"]) == 4 and int(row["samples"]) == 100  # 3 x 32 + a tail of 4
        assert row["forward_s"] == row["backward_s"] == row["optimizer_s"] == ""
        assert float(row["data_s"]) > 0 and float(row["train_s"]) > float(row["data_s"])
        assert float(row["train_s"]) + float(row["eval_s"]) <= float(row["epoch_s"]) * 1.05
    results = graph["results"]
    assert results["forward_s"] is None and results["data_s"] > 0
    assert results["final_test_acc"] == tuned["results"]["final_test_acc"]
    # The results' reader takes the empty phases of a graph cell, and only of one.
    assert validate.read_cell(runs / "graph").problems == []
    tuned["results"]["forward_s"] = None
    (runs / "tuned" / schema.SUMMARY_FILE).write_text(json.dumps(tuned))
    assert validate.read_cell(runs / "tuned").problems == [
        f"{schema.SUMMARY_FILE} results.forward_s is empty, but an ok cell has one"]


@pytest.mark.parametrize(("setting", "needs"), [
    ({"loader": "dataloader"}, "--loader resident"),
    ({"precision": "fp16", "device": "cuda"}, "--precision fp32, tf32 or bf16"),
    ({"compile": "default"}, "no --compile"),
    ({"max_batch": True}, "no --max-batch"),
])
def test_what_the_capture_cannot_run_is_refused(setting, needs) -> None:
    """A graph cell with a loader, precision or option it cannot capture is a usage error
    naming the fix."""
    with pytest.raises(devices.UnsupportedCombination, match=needs.replace("-", "\\-")):
        _cfg(implementation=GRAPH, **setting).validate()


def test_bf16_replays_train_as_the_eager_loop_does() -> None:
    """In bf16 (autocast without its cast cache, as CUDA graphs need) the captured-style step
    still gives the eager loop's parameters."""
    images, labels = _split(64)
    cells = []
    for impl in ("tuned", GRAPH):
        torch.manual_seed(4)
        cell = trainer.Trainer(_cfg(implementation=impl, precision="bf16"),
                               torch.device("cpu"), init_seed=0)
        order = torch.randperm(64, generator=torch.Generator().manual_seed(1))
        if impl == GRAPH:
            graphs = capture.StepGraphs(cell, images, labels, 32, 2, capture=False)
            graphs.begin_epoch(order)
            graphs.replay(0)
            graphs.replay(1)
        else:
            for i in (0, 32):
                idx = order[i:i + 32]
                cell.step(images[idx], labels[idx], trainer.NullTimer())
        cells.append(cell)
    for p, q in zip(cells[0].base.parameters(), cells[1].base.parameters(), strict=True):
        assert torch.equal(p, q)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_on_cuda_the_graphs_replay_the_eager_training(tmp_path, tiny_mnist, precision):
    """On CUDA a tuned-graph cell captures its step (cuda_graphs true, the tail batch a second
    graph), trains as the eager tuned cell does (its losses near the eager ones: cuDNN's
    backward is not deterministic and a graph's dropout draws need not be the eager draws;
    the exact equivalence is the CPU tests'), records its conv kernels, and is timed."""
    common = {"data": tiny_mnist, "device": "cuda", "precision": precision, "epochs": 2,
              "batch_size": 96, "test_limit": 128, "warmup_steps": 1, "sample_interval": 0.05,
              "quiet": True, "cudnn_benchmark": False}
    for name, impl in (("graph", GRAPH), ("tuned", "tuned")):
        assert train.run_cell(TrainConfig(out=tmp_path / name, implementation=impl,
                                          **common)) == 0
    graph, graph_rows = _read(tmp_path / "graph")
    _, tuned_rows = _read(tmp_path / "tuned")
    assert graph["params"]["cuda_graphs"] is True
    assert graph["timing"]["phase_split"] == schema.PHASE_SPLIT_GRAPH
    assert graph["params"]["math_conv_kernels"]
    for g, t in zip(graph_rows, tuned_rows, strict=True):
        assert float(g["train_loss"]) == pytest.approx(float(t["train_loss"]), rel=0.15)
        assert float(g["train_s"]) > 0 and g["forward_s"] == ""
