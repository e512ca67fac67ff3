"""Tests for mnistbench.measure.optim: the fused Adam without torch.optim's start-up cost, and the
check of the private kernel it calls, with the fallback to torch.optim.Adam(fused=True)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from mnistbench.measure import optim
from mnistbench.measure.model import ReferenceNet
from mnistbench.measure.optim import FusedAdam


def _train(opt_factory, steps: int = 5) -> list[torch.Tensor]:
    """Parameters of a small net after a few seeded steps with the given optimizer."""
    torch.manual_seed(0)
    net = ReferenceNet().eval()  # eval: no dropout, so both runs see the same function
    opt = opt_factory(net.parameters())
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(8, 1, 28, 28, generator=gen)
        y = torch.randint(0, 10, (8,), generator=gen)
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in net.parameters()]


@pytest.mark.slow
def test_bit_identical_to_torch_fused_adam() -> None:
    """Same parameters, bit for bit, as torch.optim.Adam(fused=True) after several steps."""
    ours = _train(lambda p: FusedAdam(p, lr=1e-3))
    theirs = _train(lambda p: torch.optim.Adam(p, lr=1e-3, fused=True))
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a, b)


@pytest.mark.slow
def test_close_to_default_adam() -> None:
    """Within float rounding of torch's default (foreach) Adam."""
    ours = _train(lambda p: FusedAdam(p, lr=1e-3))
    theirs = _train(lambda p: torch.optim.Adam(p, lr=1e-3))
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_state_round_trip_restores_the_trajectory() -> None:
    """Saving, stepping and restoring the state makes the next steps repeat exactly."""
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(5))
    opt = FusedAdam([p])
    p.grad = torch.ones(5)
    opt.step()
    saved_state, saved_p = opt.state_dict(), p.detach().clone()
    p.grad = torch.full((5,), 3.0)
    opt.step()
    after = p.detach().clone()
    with torch.no_grad():
        p.copy_(saved_p)
    opt.load_state_dict(saved_state)
    p.grad = torch.full((5,), 3.0)
    opt.step()
    assert torch.equal(p.detach(), after)


def test_empty_state_resets() -> None:
    """Loading an empty state forgets the moments, as a fresh optimizer."""
    p = torch.nn.Parameter(torch.zeros(3))
    opt = FusedAdam([p])
    p.grad = torch.ones(3)
    opt.step()
    opt.load_state_dict({})
    assert opt.state == {}


def test_rejects_bad_arguments() -> None:
    """No parameters or a non-positive learning rate are errors."""
    with pytest.raises(ValueError, match="no parameters"):
        FusedAdam([])
    with pytest.raises(ValueError, match="learning rate"):
        FusedAdam([torch.nn.Parameter(torch.zeros(1))], lr=0)


@pytest.mark.slow
def test_does_not_import_dynamo() -> None:
    """Checking the kernel, building and stepping it leave torch._dynamo unimported (the
    start-up saving)."""
    code = ("import sys, torch; from mnistbench.measure.optim import FusedAdam, make_adam; "
            "p = torch.nn.Parameter(torch.zeros(2)); o, impl = make_adam([p]); "
            "p.grad = torch.ones(2); o.step(); o.zero_grad(); "
            "print('torch._dynamo' in sys.modules, type(o).__name__, impl.name)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "FusedAdam", "torch._fused_adam_"]


# --------------------------------------------------------------------------- kernel check


@pytest.fixture
def fresh_check():
    """adam_impl() checks anew in the test, and the next user checks anew after it."""
    optim.adam_impl.cache_clear()
    yield
    optim.adam_impl.cache_clear()


def test_the_pinned_torch_passes_the_kernel_check(fresh_check) -> None:
    """torch._fused_adam_ of the pinned torch passes: make_adam gives FusedAdam, no fallback.
    (Failing here after a torch upgrade means cells now run the fallback: slower start-up.)"""
    assert optim.check_private_kernel() is None
    opt, impl = optim.make_adam([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
    assert isinstance(opt, FusedAdam)
    assert impl == optim.AdamImpl(optim.PRIVATE_KERNEL, None)
    assert optim.adam_impl() is impl  # checked once per process


def _kernel_without_max_exp_avg_sqs(self, grads, exp_avgs, exp_avg_sqs, state_steps, *, lr,
                                    beta1, beta2, weight_decay, eps, amsgrad, maximize,
                                    grad_scale=None, found_inf=None):
    """A kernel whose signature has changed: one positional list fewer."""


def _kernel_that_does_nothing(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
                              state_steps, *, lr, beta1, beta2, weight_decay, eps, amsgrad,
                              maximize, grad_scale=None, found_inf=None):
    """The expected signature, but no update."""


@pytest.mark.slow
@pytest.mark.parametrize(("kernel", "why"), [
    (None, "has no torch._fused_adam_"),
    (_kernel_without_max_exp_avg_sqs, "rejects the expected call: TypeError"),
    (_kernel_that_does_nothing, "unexpected first Adam step (exp_avg [0.0, 0.0, 0.0]"),
])
def test_an_unusable_kernel_falls_back_to_torch_optim(fresh_check, monkeypatch, kernel,
                                                      why) -> None:
    """Without torch._fused_adam_, with another signature or another update, the start-up
    check picks torch.optim.Adam(fused=True) and says why; its training equals
    torch.optim.Adam(fused=True)'s bit for bit and torch's default Adam's within rounding."""
    with monkeypatch.context() as patch:
        if kernel is None:
            patch.delattr(torch, "_fused_adam_")
        else:
            patch.setattr(torch, "_fused_adam_", kernel)
        impl = optim.adam_impl()
    # torch.optim's own fused Adam calls the real kernel: here it is back, as a torch whose
    # private kernel changed would still have a working torch.optim.
    assert impl.name == optim.PUBLIC_FALLBACK
    assert impl.fallback_reason is not None and why in impl.fallback_reason
    opt, again = optim.make_adam([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
    assert again is impl
    assert isinstance(opt, torch.optim.Adam) and opt.defaults["fused"] is True
    ours = _train(lambda p: optim.make_adam(p, lr=1e-3)[0])
    fused = _train(lambda p: torch.optim.Adam(p, lr=1e-3, fused=True))
    default = _train(lambda p: torch.optim.Adam(p, lr=1e-3))
    for a, b, c in zip(ours, fused, default, strict=True):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-6)


def test_the_fallback_state_round_trip_restores_the_trajectory(fresh_check,
                                                                monkeypatch) -> None:
    """The trainer's snapshot/restore (deep-copied state_dict, load_state_dict) works on the
    fallback too: the steps after a restore repeat exactly."""
    import copy

    with monkeypatch.context() as patch:
        patch.delattr(torch, "_fused_adam_")
        assert optim.adam_impl().name == optim.PUBLIC_FALLBACK
    p = torch.nn.Parameter(torch.randn(5, generator=torch.Generator().manual_seed(0)))
    opt, _ = optim.make_adam([p], lr=1e-2)
    p.grad = torch.ones(5)
    opt.step()
    saved_state, saved_p = copy.deepcopy(opt.state_dict()), p.detach().clone()
    p.grad = torch.full((5,), 3.0)
    opt.step()
    after = p.detach().clone()
    with torch.no_grad():
        p.copy_(saved_p)
    opt.load_state_dict(saved_state)
    p.grad = torch.full((5,), 3.0)
    opt.step()
    assert torch.equal(p.detach(), after)


def _scaled_fp16_steps(opt, net, steps: int = 4) -> None:
    """``steps`` fp16-autocast steps of ``net`` with ``opt`` under a CPU GradScaler, on
    batches of 2 (fp16 convolutions are slow on a CPU without them)."""
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    gen = torch.Generator().manual_seed(3)
    for _ in range(steps):
        x = torch.randn(2, 1, 28, 28, generator=gen)
        y = torch.randint(0, 10, (2,), generator=gen)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(net(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)


def test_grad_scaler_step_reads_nothing_back_to_the_host(monkeypatch) -> None:
    """Under a GradScaler, FusedAdam takes the scale and the inf check as device tensors
    (_step_supports_amp_scaling): no .item(), so no host synchronisation per fp16 step; the
    update equals torch.optim.Adam(fused=True)'s under the same scaler."""
    torch.manual_seed(0)
    ours_net = ReferenceNet().eval()
    theirs_net = ReferenceNet().eval()
    theirs_net.load_state_dict(ours_net.state_dict())
    _scaled_fp16_steps(torch.optim.Adam(theirs_net.parameters(), lr=1e-3, fused=True),
                       theirs_net)

    def no_item(self):
        raise AssertionError("a host read (.item()) in the scaled step")

    ours = FusedAdam(ours_net.parameters(), lr=1e-3)
    monkeypatch.setattr(torch.Tensor, "item", no_item)
    _scaled_fp16_steps(ours, ours_net)
    monkeypatch.undo()
    for a, b in zip(ours_net.parameters(), theirs_net.parameters(), strict=True):
        assert torch.equal(a, b)
    assert not hasattr(ours, "grad_scale")  # the scaler's attributes last one step only


def test_a_step_skipped_for_inf_does_not_count() -> None:
    """found_inf set: the parameters and moments stay, and the step counter does not move."""
    p = torch.nn.Parameter(torch.tensor([1.0, -1.0]))
    opt = FusedAdam([p], lr=0.1)
    p.grad = torch.tensor([0.5, 0.5])
    opt.step()
    before = p.detach().clone()
    p.grad = torch.tensor([float("inf"), 0.5])
    opt.grad_scale, opt.found_inf = torch.tensor(1.0), torch.tensor(1.0)
    opt.step()
    assert torch.equal(p.detach(), before)
    assert opt.state[p]["step"].item() == 1.0
