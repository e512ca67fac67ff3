"""The whole training step as one CUDA graph: ``--implementation tuned-graph``
(:data:`mnistbench.core.options.GRAPH_IMPLEMENTATION`).

This project's best code (the tuned formulation, data resident, fused Adam) launches about 48
small kernels per step one by one from one CPU core; on a fast GPU the host's issue rate, not
the device, sets the pace. PyTorch documents whole-network capture (forward, backward and
optimizer step in one graph, with static inputs); :class:`StepGraphs` applies it to the cell:

- the training split stays resident; the epoch's shuffle order is a device tensor
  (:attr:`StepGraphs.order`), drawn exactly as the resident loader draws it
  (``ResidentLoader.epoch_order``: the cell's CPU generator, then one copy), so the batches are
  those of every other cell with the same seed;
- a step counter on the device (:attr:`StepGraphs.step_index`) selects the batch inside the
  graph: positions ``step_index * batch_size + arange(size)`` of the order, gathered with
  ``index_select``, then forward, loss, backward and the fused Adam step; the loss is written
  to a device record at ``step_index`` and the counter advances, all inside the graph;
- the last, shorter batch of an epoch is a second graph of its own shape;
- the graphs are captured after the warm-up restore (so they hold the restored tensors), the
  warm-up having run the same step eagerly first (on a side stream on CUDA, as PyTorch asks);
- each epoch is: the order copied in, the counter reset, one replay per step; the epoch is
  timed with events around the replays. Forward, backward and optimizer cannot be told apart
  inside a graph: the cell records them as empty (``timing.phase_split`` =
  :data:`mnistbench.core.schema.PHASE_SPLIT_GRAPH`), never as invented shares;
- the evaluation runs eagerly, in large batches (the whole test split by default).

Off CUDA (and in the tests) nothing is captured: :meth:`StepGraphs.replay` runs the same step
function eagerly, so the batch selection and the updates can be checked on a CPU against the
eager loop (``params.cuda_graphs`` records whether graphs ran). fp16 is not offered: its
GradScaler's bookkeeping is not part of the capture.
"""

from __future__ import annotations

import contextlib

import torch
from torch.nn import functional as F

from mnistbench.measure import optim


class StepGraphs:
    """The whole training step of ``trainer`` (a :class:`mnistbench.measure.trainer.Trainer`)
    over the resident ``images`` and ``labels``, at ``batch_size``, ``steps`` steps per epoch
    (the last one shorter when the split does not divide), captured as CUDA graphs when
    ``capture`` (else run eagerly, step by step, with the same buffers)."""

    def __init__(self, trainer, images: torch.Tensor, labels: torch.Tensor, batch_size: int,
                 steps: int, capture: bool) -> None:
        self.trainer = trainer
        self.images, self.labels = images, labels
        self.batch_size, self.steps, self.capture = batch_size, steps, capture
        device = images.device
        n = len(labels)
        #: The epoch's shuffle order (positions into the split), on the device.
        self.order = torch.arange(n, device=device)
        #: The step counter: which batch of the order the next replay trains on.
        self.step_index = torch.zeros((), dtype=torch.int64, device=device)
        #: Each step's training loss, written by the step itself.
        self.losses = torch.zeros(max(steps, 1), device=device)
        self._sizes = [self.size_of(i) for i in range(steps)]
        self._offsets = {size: torch.arange(size, device=device) for size in set(self._sizes)}
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}

    def size_of(self, step: int) -> int:
        """Samples in step ``step`` (0-based) of an epoch: the batch size, or what is left."""
        return min(self.batch_size, len(self.labels) - step * self.batch_size)

    @property
    def shapes(self) -> list[int]:
        """The batch sizes an epoch uses, largest first (one graph each)."""
        return sorted(self._offsets, reverse=True)

    # ----------------------------------------------------------------- the step
    def batch(self, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch the counter selects: positions ``step_index * batch_size`` on of the
        order, ``size`` of them, gathered from the resident split (device ops only)."""
        positions = self.step_index * self.batch_size + self._offsets[size]
        idx = self.order.index_select(0, positions)
        return self.images.index_select(0, idx), self.labels.index_select(0, idx)

    def _step(self, size: int) -> None:
        """One training step of ``size`` samples, every operation on the device: what a graph
        holds."""
        trainer = self.trainer
        x, y = self.batch(size)
        with self._autocast():
            loss = F.cross_entropy(trainer.net(x), y)
        loss.backward()
        trainer.optimizer.step()
        self.losses.index_copy_(0, self.step_index.view(1), loss.detach().float().view(1))
        self.step_index.add_(1)

    def _autocast(self):
        """The precision's autocast without its cast cache: a cast cached outside a capture
        would be replayed stale inside it, so PyTorch asks for ``cache_enabled=False`` with
        CUDA graphs (the numbers are the same: each use casts anew)."""
        dtype = self.trainer.policy.autocast_dtype
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.trainer.device.type, dtype=dtype, cache_enabled=False)

    def run_eagerly(self, size: int) -> None:
        """The step without a graph (the gradients dropped after it, as the eager loop does)."""
        self._step(size)
        self.trainer.optimizer.zero_grad(set_to_none=True)

    # ----------------------------------------------------------------- warm-up and capture
    def warm_up(self, rounds: int = 2) -> None:
        """Run each shape's step eagerly ``rounds`` times (on a side stream on CUDA, as
        PyTorch asks before a capture); the caller restores the state afterwards."""
        def run() -> None:
            for _ in range(rounds):
                for size in self.shapes:
                    self.step_index.zero_()
                    self.run_eagerly(size)
        if self.capture:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                run()
            torch.cuda.current_stream().wait_stream(side)
        else:
            run()
        self.step_index.zero_()

    def capture_graphs(self) -> None:
        """Capture one graph per shape (after the warm-up restore: the graphs hold the
        restored tensors). Capturing runs nothing: the state stays as restored. The Adam
        state is made first, outside any graph (optim.init_state: the restore left it
        empty, and zeros made inside a capture would be replayed, resetting the moments at
        every step); off CUDA too, so the tests run the step as the graphs hold it."""
        optim.init_state(self.trainer.optimizer)
        if not self.capture:
            return
        for size in self.shapes:
            graph = torch.cuda.CUDAGraph()
            self.trainer.optimizer.zero_grad(set_to_none=True)
            with torch.cuda.graph(graph):
                self._step(size)
            self._graphs[size] = graph
        self.step_index.zero_()

    # ----------------------------------------------------------------- an epoch
    def begin_epoch(self, order: torch.Tensor) -> None:
        """Take the epoch's shuffle order (a device tensor) and reset the counter."""
        self.order.copy_(order)
        self.step_index.zero_()

    def replay(self, step: int) -> None:
        """Train step ``step`` of the epoch: one graph replay (or the step run eagerly)."""
        size = self._sizes[step]
        if self._graphs:
            self._graphs[size].replay()
        else:
            self.run_eagerly(size)

    def take_losses(self, steps: int) -> tuple[list[float], list[int]]:
        """The first ``steps`` losses of the epoch (one transfer) and their sample counts."""
        return self.losses[:steps].tolist(), self._sizes[:steps]
