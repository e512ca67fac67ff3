"""Tests for benchmarks/bench_ops.py: every formulation it times computes the tuned network's
function from the same random stream, so its ratios compare like with like."""

from __future__ import annotations

import pytest
import torch

from mnistbench.measure import model
from tests.conftest import load_benchmark

bench = load_benchmark("bench_ops")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_relu_dropout_is_dropout_of_relu_with_the_same_stream(dtype) -> None:
    """relu_bit_dropout gives bit_dropout(relu(x))'s values and gradients from the same random
    bits, and is the plain ReLU in eval mode."""
    x = torch.randn(8, 300, dtype=dtype)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    torch.manual_seed(5)
    fused = bench.relu_bit_dropout(a, training=True)
    torch.manual_seed(5)
    plain = model.bit_dropout(torch.relu(b), training=True)
    torch.testing.assert_close(fused, plain, rtol=0, atol=0)
    grad = torch.randn_like(fused)
    fused.backward(grad)
    plain.backward(grad)
    torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=0)
    torch.testing.assert_close(bench.relu_bit_dropout(x, training=False), torch.relu(x))


@pytest.mark.parametrize("name", ["fused", "inplace"])
def test_every_variant_trains_like_the_current_network(name) -> None:
    """From the same weights and seed, each variant's training-mode output and gradients equal
    the current Net's."""
    x = torch.randn(16, 1, 28, 28)
    y = torch.randint(0, 10, (16,))
    outputs, grads = [], []
    for cls in (model.Net, bench.VARIANTS[name]):
        torch.manual_seed(0)
        net = cls()
        torch.manual_seed(1)
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        outputs.append(loss.detach())
        grads.append([p.grad for p in net.parameters()])
    torch.testing.assert_close(outputs[0], outputs[1])
    for g0, g1 in zip(*grads, strict=True):
        torch.testing.assert_close(g0, g1)
