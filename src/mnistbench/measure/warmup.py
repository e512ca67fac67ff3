"""The untimed warm-up before a cell's first timed epoch: ``warmup_steps`` full training steps,
one step at the epoch's last (partial) batch size and one evaluation batch of each shape, so
one-time costs (cuDNN autotuning, ``torch.compile``, first-touch allocation) stay out of the
timed epochs; their duration is reported as ``warmup_s``. The model, the optimizer and every
random generator are then restored, so the trajectory the seed determines is unchanged."""

from __future__ import annotations

import time

from mnistbench.measure import mathrecord
from mnistbench.measure.cellconfig import TrainConfig
from mnistbench.measure.limits import first_line
from mnistbench.measure.loaders import Loaders
from mnistbench.measure.timing import synchronize
from mnistbench.measure.trainer import NullTimer, Trainer


def warm_up(trainer: Trainer, loaders: Loaders, cfg: TrainConfig) -> float:
    """Run the untimed warm-up (see module docstring) and restore the trajectory; seconds.
    A whole-step capture cell (``trainer.graphs``) also runs its step eagerly for each shape
    and, after the restore, captures its graphs: both count as warm-up, whatever
    ``warmup_steps`` says (a graph cannot run uncaptured)."""
    graphs = trainer.graphs
    if cfg.warmup_steps == 0 and graphs is None:
        return 0.0
    start = time.perf_counter()
    state = trainer.snapshot()
    null = NullTimer()
    full = min(cfg.batch_size, loaders.train_size)
    shapes = [full] * cfg.warmup_steps
    tail = loaders.train_size % cfg.batch_size
    if tail and not cfg.max_steps:
        shapes.append(tail)
    for size in shapes:
        trainer.step(*loaders.sample_batch("train", size), null)
    if trainer.device.type == "cuda" and shapes:
        cfg.resolved["math_conv_kernels"] = _profiled_kernels(
            lambda: trainer.step(*loaders.sample_batch("train", full), null))
    eval_shapes = {min(cfg.eval_batch_size, loaders.test_size)}
    if loaders.test_size % cfg.eval_batch_size:
        eval_shapes.add(loaders.test_size % cfg.eval_batch_size)
    trainer.evaluate(loaders.sample_batch("test", s) for s in sorted(eval_shapes))
    if graphs is not None:
        graphs.warm_up()
    synchronize(cfg.device)
    trainer.restore(state)
    if graphs is not None:
        graphs.capture_graphs()
    synchronize(cfg.device)
    return time.perf_counter() - start


def _profiled_kernels(step) -> str:
    """The convolution and matmul kernels of one warm-up ``step`` (mathrecord); a profiler
    that fails is said in the field, never a failed cell."""
    try:
        return mathrecord.profile_kernels(step)
    except Exception as exc:  # the profiler is a recorder here, not the measurement
        return f"not recorded: the profiler failed: {type(exc).__name__}: {first_line(exc)}"
