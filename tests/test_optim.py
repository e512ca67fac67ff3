"""Tests for mnistbench.optim: the fused Adam without torch.optim's start-up cost."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from mnistbench.model import ReferenceNet
from mnistbench.optim import FusedAdam


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


def test_bit_identical_to_torch_fused_adam() -> None:
    """Same parameters, bit for bit, as torch.optim.Adam(fused=True) after several steps."""
    ours = _train(lambda p: FusedAdam(p, lr=1e-3))
    theirs = _train(lambda p: torch.optim.Adam(p, lr=1e-3, fused=True))
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a, b)


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


def test_does_not_import_dynamo() -> None:
    """Building and stepping it leaves torch._dynamo unimported (the start-up saving)."""
    code = ("import sys, torch; from mnistbench.optim import FusedAdam; "
            "p = torch.nn.Parameter(torch.zeros(2)); o = FusedAdam([p]); "
            "p.grad = torch.ones(2); o.step(); o.zero_grad(); "
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"
