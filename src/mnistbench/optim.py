"""Adam for the study: the same fused kernel as ``torch.optim.Adam(fused=True)``, without
``torch.optim``'s start-up cost.

Constructing any ``torch.optim`` optimizer imports ``torch._dynamo`` (its methods are wrapped
to disable compilation), which takes 2 to 6 s on a 2-core machine: more than the rest of a
cell's start-up together. This class calls the same ``torch._fused_adam_`` kernel with the
same state layout (float32 ``step`` tensors on the parameter's device), so the update is
bit-identical to ``torch.optim.Adam(fused=True)``; the tests check it. It supports what the
study needs: one parameter group, no weight decay, no amsgrad, ``GradScaler`` (through
``param_groups``, as ``GradScaler.unscale_`` expects), and state save/restore.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class FusedAdam:
    """Adam (Kingma & Ba) with ``betas`` and ``eps`` as torch's defaults; one fused step."""

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        params = list(params)
        if not params:
            raise ValueError("FusedAdam got no parameters")
        if not lr > 0:
            raise ValueError(f"learning rate must be > 0, got {lr}")
        self.param_groups = [{"params": params, "lr": lr, "betas": betas, "eps": eps}]
        self.state: dict[torch.nn.Parameter, dict[str, torch.Tensor]] = {}

    @property
    def params(self) -> list[torch.nn.Parameter]:
        return self.param_groups[0]["params"]

    def _state(self, p: torch.nn.Parameter) -> dict[str, torch.Tensor]:
        state = self.state.get(p)
        if state is None:
            state = self.state[p] = {
                "step": torch.zeros((), dtype=torch.float32, device=p.device),
                "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
            }
        return state

    @torch.no_grad()
    def step(self) -> None:
        """One Adam update of every parameter that has a gradient."""
        group = self.param_groups[0]
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        states = [self._state(p) for p in params]
        steps = [s["step"] for s in states]
        torch._foreach_add_(steps, 1)
        beta1, beta2 = group["betas"]
        torch._fused_adam_(
            params, [p.grad for p in params], [s["exp_avg"] for s in states],
            [s["exp_avg_sq"] for s in states], [], steps,
            lr=group["lr"], beta1=beta1, beta2=beta2, weight_decay=0.0, eps=group["eps"],
            amsgrad=False, maximize=False, grad_scale=None, found_inf=None)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the gradients (set_to_none is the only mode, as the study uses)."""
        for p in self.params:
            p.grad = None

    def state_dict(self) -> dict:
        """Copies of the state tensors, by parameter position."""
        return {i: {k: v.clone() for k, v in self.state[p].items()}
                for i, p in enumerate(self.params) if p in self.state}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned (an empty dict resets the optimizer)."""
        self.state = {self.params[i]: {k: v.clone() for k, v in s.items()}
                      for i, s in state.items()}
