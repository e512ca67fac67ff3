"""Adam for the study: the same fused kernel as ``torch.optim.Adam(fused=True)``, without
``torch.optim``'s start-up cost.

Constructing any ``torch.optim`` optimizer imports ``torch._dynamo`` (its methods are wrapped
to disable compilation), which takes 2 to 6 s on a 2-core machine: more than the rest of a
cell's start-up together. This class calls the same ``torch._fused_adam_`` kernel with the
same state layout (float32 ``step`` tensors on the parameter's device), so the update is
bit-identical to ``torch.optim.Adam(fused=True)``; the tests check it. It supports what the
study needs: one parameter group, no weight decay, no amsgrad, ``GradScaler`` (through
``param_groups``, as ``GradScaler.unscale_`` expects), and state save/restore.

``torch._fused_adam_`` is private: a torch release may drop or change it without notice. So
:func:`make_adam`, the trainer's way in, first checks it once per process
(:func:`adam_impl`): that it exists and takes :class:`FusedAdam`'s call, by one step on a tiny
CPU tensor compared with Adam's closed form. If not, it falls back to
``torch.optim.Adam(fused=True)`` (the same update, plus the start-up cost) and says why, for the
cell's summary.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

import torch

#: The Adam implementations :func:`make_adam` chooses from, as a summary records them.
PRIVATE_KERNEL = "torch._fused_adam_"
PUBLIC_FALLBACK = "torch.optim.Adam(fused=True)"


def _fused_adam_step(params: list[torch.Tensor], grads: list[torch.Tensor],
                     exp_avgs: list[torch.Tensor], exp_avg_sqs: list[torch.Tensor],
                     steps: list[torch.Tensor], lr: float, beta1: float, beta2: float,
                     eps: float, grad_scale: torch.Tensor | None = None,
                     found_inf: torch.Tensor | None = None) -> None:
    """The one call of the private kernel (looked up now, so a test can replace it): what
    :meth:`FusedAdam.step` runs and :func:`check_private_kernel` checks. ``grad_scale`` and
    ``found_inf`` (a GradScaler's, on the device): the kernel unscales the gradients and skips
    the update where ``found_inf`` is set, with no host synchronisation."""
    torch._fused_adam_(
        params, grads, exp_avgs, exp_avg_sqs, [], steps,
        lr=lr, beta1=beta1, beta2=beta2, weight_decay=0.0, eps=eps,
        amsgrad=False, maximize=False, grad_scale=grad_scale, found_inf=found_inf)


def check_private_kernel() -> str | None:
    """Why ``torch._fused_adam_`` cannot serve :class:`FusedAdam` here, or None when it can.

    It must exist, accept :class:`FusedAdam`'s call (the positional lists and keywords of
    ``aten::_fused_adam_``), and give Adam's first step: ``m = (1 - b1) g``,
    ``v = (1 - b2) g^2``, ``p -= lr g / (|g| + eps)``, on a 3-element float32 CPU tensor."""
    if not callable(getattr(torch, "_fused_adam_", None)):
        return f"torch {torch.__version__} has no torch._fused_adam_"
    lr, beta1, beta2, eps = 0.1, 0.9, 0.999, 1e-8
    p = torch.tensor([1.0, -1.0, 0.5])
    g = torch.tensor([0.5, -2.0, 1e-3])
    m, v, step = torch.zeros(3), torch.zeros(3), torch.ones((), dtype=torch.float32)
    expect_p = p - lr * g / (g.abs() + eps)
    try:
        _fused_adam_step([p], [g], [m], [v], [step], lr, beta1, beta2, eps)
    except Exception as exc:
        first_line = (str(exc).strip().splitlines() or [""])[0]
        return (f"torch._fused_adam_ of torch {torch.__version__} rejects the expected call: "
                f"{type(exc).__name__}: {first_line}")
    expected = {"exp_avg": (m, (1 - beta1) * g), "exp_avg_sq": (v, (1 - beta2) * g * g),
                "param": (p, expect_p)}
    for name, (got, want) in expected.items():
        if not torch.allclose(got, want, rtol=1e-5, atol=1e-7):
            return (f"torch._fused_adam_ of torch {torch.__version__} gave an unexpected first "
                    f"Adam step ({name} {got.tolist()}, expected {want.tolist()})")
    return None


@dataclass(frozen=True)
class AdamImpl:
    """Which Adam a process uses: :data:`PRIVATE_KERNEL` (:class:`FusedAdam`) or
    :data:`PUBLIC_FALLBACK`, and, for the fallback, why the private kernel was not usable."""

    name: str
    fallback_reason: str | None = None


@functools.cache
def adam_impl() -> AdamImpl:
    """The Adam of this process, checked once (:func:`check_private_kernel`) and cached."""
    reason = check_private_kernel()
    return AdamImpl(PRIVATE_KERNEL) if reason is None else AdamImpl(PUBLIC_FALLBACK, reason)


def make_adam(params: Iterable[torch.nn.Parameter], lr: float = 1e-3, *,
              capturable: bool = False) -> tuple[FusedAdam | torch.optim.Adam, AdamImpl]:
    """The study's Adam for ``params`` and which implementation it is: :class:`FusedAdam`
    where the private kernel passes its check, else ``torch.optim.Adam(fused=True)``. Both
    offer what the trainer uses: ``step``, ``zero_grad``, ``param_groups`` (GradScaler) and a
    ``state_dict`` / ``load_state_dict`` round trip. ``capturable``: its step is captured in a
    CUDA graph (measure.capture): the fallback must be told (torch.optim refuses a capture
    otherwise); :class:`FusedAdam` keeps its state on the device and captures as it is."""
    impl = adam_impl()
    if impl.name == PRIVATE_KERNEL:
        return FusedAdam(params, lr=lr), impl
    return torch.optim.Adam(params, lr=lr, fused=True, capturable=capturable), impl


def init_state(optimizer: FusedAdam | torch.optim.Adam) -> None:
    """Make every parameter's Adam state now where it is missing (step 0, zero moments): what
    its first step would make lazily, so the update is the same. A CUDA graph must find the
    state made: zeros made inside a capture are a fill kernel that every replay runs again,
    which would reset the moments and the step count at each step (measure.capture)."""
    if isinstance(optimizer, FusedAdam):
        for p in optimizer.params:
            optimizer._state(p)
        return
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state[p]
            if not state:  # as torch.optim.Adam._init_group makes it for fused=True
                state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)


class FusedAdam:
    """Adam (Kingma & Ba) with ``betas`` and ``eps`` as torch's defaults; one fused step.

    Under a ``GradScaler`` (fp16) the scaler hands the step its scale and its inf check as
    device tensors (``grad_scale``, ``found_inf``: the contract of
    ``_step_supports_amp_scaling``, as for ``torch.optim.Adam(fused=True)``), so the step
    unscales and skips on the device: no ``.item()``, no host synchronisation per step."""

    #: GradScaler.step passes grad_scale and found_inf instead of reading found_inf itself.
    _step_supports_amp_scaling = True

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
        # Set by GradScaler.step for this call only (_step_supports_amp_scaling).
        grad_scale = getattr(self, "grad_scale", None)
        found_inf = getattr(self, "found_inf", None)
        _fused_adam_step(params, [p.grad for p in params], [s["exp_avg"] for s in states],
                         [s["exp_avg_sq"] for s in states], steps,
                         lr=group["lr"], beta1=beta1, beta2=beta2, eps=group["eps"],
                         grad_scale=grad_scale, found_inf=found_inf)
        if found_inf is not None:  # a skipped step does not count (torch.optim.Adam's rule)
            torch._foreach_sub_(steps, [found_inf.to(steps[0].dtype)] * len(steps))

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
