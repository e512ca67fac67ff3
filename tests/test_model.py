"""Tests for mnistbench.model: the study's CNN and its faster formulation."""

from __future__ import annotations

import pytest
import torch

from mnistbench import model


def test_reference_layer_sizes_match_the_blog() -> None:
    """The flattened size after one 2x2 pool is 9216, as the blog's fc1 declares."""
    net = model.ReferenceNet()
    assert net.fc1.in_features == 9216
    assert net(torch.zeros(2, 1, 28, 28)).shape == (2, 10)


def test_two_pools_would_not_fit_fc1() -> None:
    """The blog's printed forward() (a max-pool after each conv) gives 1600 features, not 9216."""
    net = model.ReferenceNet()
    pool = torch.nn.functional.max_pool2d
    x = pool(net.conv2(pool(net.conv1(torch.zeros(1, 1, 28, 28)), 2)), 2)
    assert torch.flatten(x, 1).shape[1] == 1600
    with pytest.raises(RuntimeError):
        net.fc1(torch.flatten(x, 1))


def test_fast_net_computes_the_reference_function_in_eval_mode() -> None:
    """Net and ReferenceNet give the same outputs for the same weights in eval mode."""
    ref = model.ReferenceNet().eval()
    fast = model.Net().eval()
    fast.load_state_dict(ref.state_dict())
    x = torch.randn(16, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), ref(x), rtol=0, atol=0)


def test_fast_net_gradients_match_reference_without_dropout() -> None:
    """With dropout off, both formulations give identical gradients (pool and ReLU commute)."""
    ref = model.ReferenceNet().eval()
    fast = model.Net().eval()
    fast.load_state_dict(ref.state_dict())
    x = torch.randn(8, 1, 28, 28)
    y = torch.randint(0, 10, (8,))
    for net in (ref, fast):
        torch.nn.functional.cross_entropy(net(x), y).backward()
    for (name, p_ref), p_fast in zip(ref.named_parameters(), fast.parameters(), strict=True):
        torch.testing.assert_close(p_fast.grad, p_ref.grad, msg=name)


def test_bit_dropout_keeps_half_and_scales_by_two() -> None:
    """Bit dropout keeps each element with probability 0.5 and doubles what it keeps."""
    torch.manual_seed(0)
    x = torch.ones(64, 9216)
    y = model.bit_dropout(x, training=True)
    assert set(torch.unique(y).tolist()) <= {0.0, 2.0}
    kept = (y > 0).float().mean().item()
    assert kept == pytest.approx(0.5, abs=0.005)
    # No structure: per-position keep rates are independent fair coins.
    per_column = (y > 0).float().mean(0)
    assert per_column.std().item() == pytest.approx(0.5 / 8, rel=0.2)


def test_bit_dropout_backward_uses_the_same_mask() -> None:
    """The gradient flows through kept elements only, scaled by 2."""
    x = torch.randn(4, 100, requires_grad=True)
    y = model.bit_dropout(x, training=True)
    y.sum().backward()
    torch.testing.assert_close(x.grad, (y.detach() != 0).float() * 2.0)


def test_bit_dropout_is_identity_in_eval() -> None:
    """Outside training, dropout returns its input unchanged."""
    x = torch.randn(3, 5)
    assert model.bit_dropout(x, training=False) is x


def test_build_model_is_seeded_and_leaves_global_rng_alone() -> None:
    """Two builds with one seed are identical, and building does not consume the global RNG."""
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a, b = model.build_model(7), model.build_model(7)
    assert torch.equal(torch.get_rng_state(), before)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    c = model.build_model(8)
    assert not torch.equal(a.conv1.weight, c.conv1.weight)
