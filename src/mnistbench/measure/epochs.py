"""A cell's timed epochs: the loop that times each phase of each epoch, and the row of
``epochs.csv`` each epoch gives.

Phases are split by consecutive marks (``timing.py``): CUDA events on CUDA, with no
synchronisation inside the loop (each step's loss is kept on the device, all read once per
epoch), the backend's own events on xpu and mps, synchronise + host clock on a backend without
events; ``time.perf_counter`` on CPU (``timing.timing_method`` says which). Each epoch is data
-> forward -> backward -> optimizer per step, then evaluation on the test set. A training or
test loss that turns NaN or infinite (diverged) raises :class:`NonFiniteLoss` naming the epoch
and step, checked when the epoch's losses are read, so the loop gains no synchronisation.
"""

from __future__ import annotations

import math
import time

from mnistbench.core import schema
from mnistbench.measure import disturbance
from mnistbench.measure.cellconfig import TrainConfig
from mnistbench.measure.loaders import Loaders
from mnistbench.measure.monitor import ResourceMonitor
from mnistbench.measure.progress import Progress
from mnistbench.measure.timing import phase_timer, synchronize
from mnistbench.measure.trainer import Trainer


class NonFiniteLoss(Exception):
    """A training or test loss turned NaN or infinite: training diverged."""


def steps_per_epoch_of(loaders: Loaders, cfg: TrainConfig) -> int:
    """Training steps in one timed epoch: the loader's, capped by ``max_steps``."""
    steps = len(loaders.train)
    return min(steps, cfg.max_steps) if cfg.max_steps else steps


def train_epochs(trainer: Trainer, loaders: Loaders, cfg: TrainConfig, monitor: ResourceMonitor,
                 progress: Progress, rows: list[dict]) -> dict:
    """The timed epochs: appends one row of ``epochs.csv`` to ``rows`` per finished epoch;
    returns the energy used over them. A whole-step capture cell (``trainer.graphs``) times
    its epoch as three phases: data (the epoch's shuffle order drawn and copied to the
    device), the steps (one replay each: forward, backward and optimizer inside, not split)
    and eval; its forward, backward and optimizer columns stay empty."""
    dev = cfg.device
    timer = phase_timer(dev)
    steps_per_epoch = steps_per_epoch_of(loaders, cfg)
    graphs = trainer.graphs
    monitor.set_stage("train")
    energy_start = monitor.energy()
    monitor.record_gpu_state("start")
    for epoch in range(1, cfg.epochs + 1):
        trainer.begin_epoch(steps_per_epoch)
        synchronize(dev)
        wall_start = time.perf_counter()
        timer.start()
        steps = samples = 0
        if graphs is not None:
            graphs.begin_epoch(loaders.train.epoch_order())
            timer.mark("data")
            for step in range(steps_per_epoch):
                graphs.replay(step)
            timer.mark(schema.PHASE_SPLIT_GRAPH)
            steps = steps_per_epoch
            samples = sum(graphs.size_of(i) for i in range(steps))
        else:
            for x, y in loaders.train:
                timer.mark("data")
                trainer.step(x, y, timer)
                steps += 1
                samples += len(y)
                progress.update(epoch, cfg.epochs, steps, steps_per_epoch, wall_start)
                if steps == steps_per_epoch:
                    break
        loss, correct, count = trainer.evaluate(loaders.test)
        timer.mark("eval")
        phases, _span = timer.totals()  # synchronises once on CUDA
        wall = time.perf_counter() - wall_start
        losses, sizes = graphs.take_losses(steps) if graphs is not None else trainer.take_losses()
        test_loss = loss.item() / max(count, 1)
        check_losses(losses, test_loss, epoch, cfg)
        train_loss = math.fsum(v * n for v, n in zip(losses, sizes, strict=True)) / max(samples, 1)
        progress.update(epoch, cfg.epochs, steps, steps_per_epoch, wall_start, force=True)
        # What else used the machine during this epoch (read outside the timed span).
        others = monitor.others_load_between(wall_start, wall_start + wall)
        rows.append(epoch_row(epoch, steps, samples, phases, wall, train_loss, test_loss,
                              100.0 * correct.item() / max(count, 1), others,
                              graphed=graphs is not None))
    flag_disturbed(rows)
    energy_end = monitor.energy()
    monitor.record_gpu_state("end")
    return energy_between(energy_start, energy_end)


def epoch_row(epoch: int, steps: int, samples: int, phases: dict[str, float], wall: float,
              train_loss: float, test_loss: float, test_acc: float, others: float | None, *,
              graphed: bool) -> dict:
    """The row of ``epochs.csv`` of one timed epoch (``disturbed`` empty until
    :func:`flag_disturbed`); ``phases``: the timer's seconds per phase, ``wall``: the epoch's
    wall time, ``others``: the load of other processes over it (%), ``graphed``: its steps
    replayed one graph (forward, backward and optimizer not measured apart)."""
    train_s = sum(v for p, v in phases.items() if p != "eval")
    # Phases a graph holds together are not measured apart: empty, never invented.
    unsplit: set[str] = set(schema.GRAPH_UNSPLIT) if graphed else set()
    return {
        "epoch": epoch,
        "steps": steps,
        "samples": samples,
        **{f"{p}_s": None if p in unsplit else phases.get(p, 0.0) for p in schema.PHASES},
        "train_s": train_s,
        "epoch_s": wall,
        "train_loss": train_loss,
        "test_loss": test_loss,
        "test_acc": test_acc,
        "samples_per_s": samples / train_s if train_s > 0 else None,
        "others_load_pct": None if others is None else round(others, 1),
        "disturbed": "",
    }


def flag_disturbed(rows: list[dict]) -> None:
    """Set each row's ``disturbed`` to why its epoch was disturbed (disturbance.flags), or
    leave it empty."""
    for row, why in zip(rows, disturbance.flags([r["epoch_s"] for r in rows],
                                                [r["others_load_pct"] for r in rows]),
                        strict=True):
        row["disturbed"] = why


def energy_between(start: dict, end: dict) -> dict:
    """The GPU and CPU energy (J) used from the monitor's reading ``start`` to ``end``; None
    where either reading lacks it."""
    return {
        k: (end[k] - start[k]) if end.get(k) is not None and start.get(k) is not None else None
        for k in ("gpu_j", "cpu_j")
    }


def check_losses(losses: list[float], test_loss: float, epoch: int, cfg: TrainConfig) -> None:
    """Raise :class:`NonFiniteLoss` naming the epoch and the first step whose training loss is
    NaN or infinite (or the epoch's evaluation, for the test loss)."""
    bad = next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)
    if bad is not None:
        where = f"the training loss became {losses[bad]} in epoch {epoch} at step {bad + 1}"
    elif not math.isfinite(test_loss):
        where = (f"the test loss became {test_loss} in the evaluation of epoch {epoch} "
                 f"(after step {len(losses)})")
    else:
        return
    raise NonFiniteLoss(
        f"{where} (lr {cfg.lr:g}, {cfg.precision}, batch size {cfg.batch_size}): training "
        f"diverged. Lower the learning rate (--lr, or config experiments.{cfg.experiment}.lr) "
        "or use another precision")
