"""Tests for mnistbench.measure.epochs: the timed epochs' phases add up to their wall time, a
diverged loss fails the cell naming its epoch and step, and the loop fits on one screen."""

from __future__ import annotations

import inspect

import pytest

from mnistbench.core import schema
from mnistbench.measure import epochs, trainer
from tests.measure.cells import read_csv, run, strict_json


@pytest.mark.slow
def test_phases_add_up_to_epoch_wall_time(tmp_path, tiny_mnist) -> None:
    """Data + forward + backward + optimizer + eval is within 5% of each epoch's wall time."""
    code, _, out = run(tmp_path, tiny_mnist, max_steps=0, epochs=2, loader="dataloader")
    assert code == 0
    for row in read_csv(out / schema.EPOCHS_FILE):
        phases = sum(float(row[f"{p}_s"]) for p in schema.PHASES)
        assert phases == pytest.approx(float(row["epoch_s"]), rel=0.05)
        assert float(row["train_s"]) + float(row["eval_s"]) == pytest.approx(phases)
        assert all(float(row[f"{p}_s"]) > 0 for p in schema.PHASES)


def test_diverging_loss_fails_naming_epoch_and_step(tmp_path, tiny_mnist) -> None:
    """A learning rate that blows the weights up ends failed (exit 12) at the first NaN step,
    with strict JSON, instead of ok with NaN losses."""
    code, _, out = run(tmp_path, tiny_mnist, lr=1e10, warmup_steps=0, epochs=2)
    summary = strict_json(out / schema.SUMMARY_FILE)
    assert code == 12 and summary["status"] == "failed"
    assert summary["reason"].startswith("the training loss became nan in epoch 1 at step 2 ")
    assert "Lower the learning rate" in summary["reason"]
    assert read_csv(out / schema.EPOCHS_FILE) == []


def test_non_finite_loss_names_the_exact_epoch_and_step(tmp_path, tiny_mnist,
                                                       monkeypatch) -> None:
    """A loss that turns NaN at the 7th training step (epoch 2, step 3 of 4) is reported
    there; epoch 1, which was finite, keeps its row."""
    real = trainer.F.cross_entropy
    calls = []

    def poisoned(logits, target, **kwargs):
        loss = real(logits, target, **kwargs)
        if kwargs.get("reduction") == "sum":  # evaluation
            return loss
        calls.append(1)
        return loss * float("nan") if len(calls) == 7 else loss

    monkeypatch.setattr(trainer.F, "cross_entropy", poisoned)
    code, _, out = run(tmp_path, tiny_mnist, warmup_steps=0, epochs=3)
    summary = strict_json(out / schema.SUMMARY_FILE)
    assert code == 12
    assert "the training loss became nan in epoch 2 at step 3 " in summary["reason"]
    assert [r["epoch"] for r in read_csv(out / schema.EPOCHS_FILE)] == ["1"]


def test_non_finite_test_loss_fails_the_cell(tmp_path, tiny_mnist, monkeypatch) -> None:
    """An infinite test loss fails the cell, naming the epoch's evaluation and its step."""
    real = trainer.F.cross_entropy

    def infinite_eval(logits, target, **kwargs):
        loss = real(logits, target, **kwargs)
        return loss * float("inf") if kwargs.get("reduction") == "sum" else loss

    monkeypatch.setattr(trainer.F, "cross_entropy", infinite_eval)
    code, _, out = run(tmp_path, tiny_mnist, warmup_steps=0)
    summary = strict_json(out / schema.SUMMARY_FILE)
    assert code == 12
    assert "the test loss became inf in the evaluation of epoch 1 (after step 4)" in \
        summary["reason"]


def test_the_epoch_loop_fits_on_one_screen() -> None:
    """train_epochs, the timed loop, reads at a glance: at most 60 lines (issue 40); what each
    epoch records is epoch_row's, what it costs in energy energy_between's."""
    lines = inspect.getsource(epochs.train_epochs).splitlines()
    assert len(lines) <= 60, f"train_epochs is {len(lines)} lines"


def test_an_epoch_row_of_graph_replays_leaves_the_unsplit_phases_empty() -> None:
    """A graphed epoch records data, steps and eval; forward, backward and optimizer stay
    empty (never invented shares). The throughput is over the training phases."""
    phases = {"data": 0.5, "graph": 1.5, "eval": 1.0}
    row = epochs.epoch_row(2, 10, 320, phases, 3.25, 0.5, 0.25, 91.0, 12.34, graphed=True)
    assert set(row) == set(schema.EPOCH_COLUMNS)
    assert (row["forward_s"], row["backward_s"], row["optimizer_s"]) == (None, None, None)
    assert row["data_s"] == 0.5 and row["eval_s"] == 1.0
    assert row["train_s"] == 2.0 and row["samples_per_s"] == 160.0
    assert row["epoch_s"] == 3.25 and row["others_load_pct"] == 12.3
    assert row["disturbed"] == ""
    eager = epochs.epoch_row(1, 1, 32, {"data": 0.0, "eval": 0.0}, 0.1, 1.0, 1.0, 0.0, None,
                             graphed=False)
    assert eager["forward_s"] == 0.0 and eager["samples_per_s"] is None
    assert eager["others_load_pct"] is None


def test_energy_between_two_readings_is_none_where_either_lacks_it() -> None:
    assert epochs.energy_between({"gpu_j": 10.0, "cpu_j": None}, {"gpu_j": 25.5, "cpu_j": 3.0}) \
        == {"gpu_j": 15.5, "cpu_j": None}
    assert epochs.energy_between({}, {"gpu_j": 1.0}) == {"gpu_j": None, "cpu_j": None}
