"""The trainer of a cell: its model, optimizer and precision policy, one training step with
its phase marks, the evaluation, and a snapshot of every state to undo the warm-up
(:mod:`mnistbench.measure.train` runs it), and the no-op timer of steps that are not timed."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch
from torch.nn import functional as F

from mnistbench.core import options
from mnistbench.measure import backends, model
from mnistbench.measure.optim import AdamImpl, make_adam

if TYPE_CHECKING:
    from mnistbench.measure.capture import StepGraphs

#: What sources.adam records for the stock implementation.
STOCK_ADAM = "torch.optim.Adam (stock)"


class NullTimer:
    """The timer of an untimed step (the warm-up's, the max-batch search's): marks nothing."""

    def mark(self, phase: str) -> None:
        pass


class Trainer:
    """The model, optimizer and precision policy of a cell (``cfg``: its
    :class:`mnistbench.measure.cellconfig.TrainConfig`), and its training and eval steps."""

    def __init__(self, cfg, device: torch.device, init_seed: int) -> None:
        self.cfg, self.device = cfg, device
        self.backend = backends.backend(cfg.device)
        self.policy = backends.precision_policy(cfg.precision)
        self.policy.apply_backend_flags()
        stock = cfg.implementation == "stock"
        # stock: the blog's code as written (ReferenceNet, nn.Dropout, the default memory
        # format, torch.optim.Adam); tuned: the same function, reformulated (model.py).
        self.base = model.build_model(init_seed, cfg.implementation, cfg.width).to(
            device, memory_format=torch.contiguous_format if stock else torch.channels_last)
        self.net = self.base
        if cfg.compile:
            self.net = torch.compile(self.base, mode=cfg.compile)
        # Fused Adam: one kernel (CUDA) or one pass (CPU) over all parameters; the same
        # update as torch.optim.Adam(fused=True) without its start-up cost (optim.py).
        # torch._fused_adam_ when it passes its start-up check, else the public fallback.
        if stock:
            self.optimizer = torch.optim.Adam(self.base.parameters(), lr=cfg.lr)
            self.adam = AdamImpl(STOCK_ADAM)
        else:
            self.optimizer, self.adam = make_adam(
                self.base.parameters(), lr=cfg.lr,
                capturable=cfg.implementation == options.GRAPH_IMPLEMENTATION)
        self.scaler = torch.amp.GradScaler(device.type) if self.policy.grad_scaler else None
        # Each step's training loss stays on the device (one copy, no synchronisation) until
        # take_losses() reads them all at once; _sizes holds each step's samples.
        self._losses = torch.zeros(0, device=device)
        self._sizes: list[int] = []
        #: The whole-step capture of a tuned-graph cell (measure.capture.StepGraphs), set by
        #: the cell once its data is loaded; None for every other cell.
        self.graphs: StepGraphs | None = None

    def begin_epoch(self, steps: int) -> None:
        """Start a new loss record with room for ``steps`` steps (allocated here, outside the
        timed loop)."""
        self._sizes = []
        if len(self._losses) < steps:
            self._losses = torch.zeros(steps, device=self.device)

    def take_losses(self) -> tuple[list[float], list[int]]:
        """The training loss and sample count of every step since the last call (the losses
        read from the device in one transfer), and start a new record."""
        n = len(self._sizes)
        losses = self._losses[:n].tolist() if n else []
        sizes, self._sizes = self._sizes, []
        return losses, sizes

    def step(self, x: torch.Tensor, y: torch.Tensor, timer) -> None:
        """One training step; marks forward, backward and optimizer on ``timer``."""
        with self.policy.autocast(self.device.type):
            loss = F.cross_entropy(self.net(x), y)
        timer.mark("forward")
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            timer.mark("backward")
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            timer.mark("backward")
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        timer.mark("optimizer")
        n = len(self._sizes)
        if n == len(self._losses):  # only in the warm-up: begin_epoch sizes the timed record
            grown = torch.zeros(max(16, 2 * n), device=self.device)
            grown[:n] = self._losses
            self._losses = grown
        self._losses[n] = loss.detach()
        self._sizes.append(len(y))

    @torch.no_grad()
    def evaluate(self, batches) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Summed test loss and correct count (device tensors, not yet read) and sample count."""
        self.net.eval()
        loss = torch.zeros((), device=self.device)
        correct = torch.zeros((), dtype=torch.int64, device=self.device)
        count = 0
        for x, y in batches:
            with self.policy.autocast(self.device.type):
                logits = self.net(x)
            loss += F.cross_entropy(logits.float(), y, reduction="sum")
            correct += (logits.argmax(1) == y).sum()
            count += len(y)
        self.net.train()
        return loss, correct, count

    def snapshot(self) -> dict:
        """Model, optimizer and RNG states, to undo the warm-up."""
        state = {
            "model": copy.deepcopy(self.base.state_dict()),
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),
            "cpu_rng": torch.get_rng_state(),
        }
        if self.device.type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        elif self.backend.is_accelerator:
            state["device_rng"] = self.backend.get_rng_state()
        return state

    def restore(self, state: dict) -> None:
        """Put back what :meth:`snapshot` saved; the loss record starts anew. The GradScaler
        (fp16) keeps what the warm-up taught it (its scale and growth tracker): recreating it
        would throw that calibration away and redo it in timed epoch 1."""
        self.base.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["cpu_rng"])
        if "cuda_rng" in state:
            torch.cuda.set_rng_state(state["cuda_rng"], self.device)
        if "device_rng" in state:
            self.backend.set_rng_state(state["device_rng"])
        self._sizes = []
