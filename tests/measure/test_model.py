"""Tests for mnistbench.measure.model: the study's CNN and its faster formulation."""

from __future__ import annotations

import pytest
import torch

from mnistbench.core import network
from mnistbench.measure import model
from mnistbench.measure.model import build_model


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


def _bf16_close(a: torch.Tensor, b: torch.Tensor) -> None:
    """Equal up to bf16 rounding of fp32 accumulations done in different orders."""
    assert a.dtype == b.dtype == torch.bfloat16
    torch.testing.assert_close(a.float(), b.float(), rtol=2**-7, atol=2**-7 * b.abs().max().item())


@pytest.mark.parametrize(
    "make", [lambda: torch.nn.Conv2d(8, 16, 3), lambda: torch.nn.Linear(64, 32)])
def test_emulated_bf16_matches_autocast_kernels(make, monkeypatch) -> None:
    """Emulated bf16 layers give autocast's bf16 results, forward and backward."""
    torch.manual_seed(0)
    layer = make()
    shape = (4, 8, 12, 12) if isinstance(layer, torch.nn.Conv2d) else (4, 64)
    x = torch.randn(shape)
    fn = model.conv2d if isinstance(layer, torch.nn.Conv2d) else model.linear
    results = []
    for emulate in (True, False):
        monkeypatch.setattr(model, "NATIVE_CPU_BF16", not emulate)
        layer.zero_grad()
        xi = x.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = fn(layer, xi)
        out.float().square().sum().backward()
        results.append((out.detach(), xi.grad, layer.weight.grad.clone()))
    (out_e, gx_e, gw_e), (out_n, gx_n, gw_n) = results
    _bf16_close(out_e, out_n)
    torch.testing.assert_close(gx_e.float(), gx_n.float(), rtol=0.02, atol=0.02 * gx_n.abs().max())
    torch.testing.assert_close(gw_e, gw_n, rtol=0.02, atol=0.02 * gw_n.abs().max().item())


def test_layers_are_plain_outside_bf16_autocast() -> None:
    """Without autocast, the helpers are exactly the layers' own calls."""
    conv, fc = torch.nn.Conv2d(1, 4, 3), torch.nn.Linear(10, 3)
    x, v = torch.randn(2, 1, 8, 8), torch.randn(2, 10)
    assert torch.equal(model.conv2d(conv, x), conv(x))
    assert torch.equal(model.linear(fc, v), fc(v))


@pytest.mark.slow
@pytest.mark.parametrize("width", [1, 2])
@pytest.mark.parametrize("implementation", ["stock", "tuned"])
def test_analytic_flops_match_torchs_flop_counter(width, implementation):
    """mnistbench.core.network's FLOPs per evaluation and per training sample are what
    torch.utils.flop_counter counts for the network at that width, both formulations."""
    from torch.utils.flop_counter import FlopCounterMode

    model = build_model(0, implementation, width)
    x = torch.randn(4, 1, 28, 28)
    model.eval()
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x)
    assert counter.get_total_flops() == 4 * network.eval_flops(width)
    model.train()
    with FlopCounterMode(display=False) as counter:
        loss = torch.nn.functional.cross_entropy(model(x), torch.zeros(4, dtype=torch.long))
        loss.backward()
    assert counter.get_total_flops() == 4 * network.train_flops(width)


def test_the_networks_shape_is_the_blogs_at_width_one():
    s = network.shapes(1)
    assert (s.conv1, s.conv2, s.fc1, s.fc2) == ((1, 32), (32, 64), (9216, 128), (128, 10))
    assert network.train_flops() == 71_565_312 and network.eval_flops() == 23_984_896
    assert network.shapes(4).flat == 4 * 9216
    with pytest.raises(ValueError, match="positive integer"):
        network.shapes(0)


def test_the_dataloader_runs_torchvisions_mnist_and_matches_the_resident_data(tiny_mnist):
    """The dataloader loader is torchvision.datasets.MNIST with ToTensor and Normalize over
    the verified files; its samples equal the resident loader's normalised tensor."""
    import numpy as np
    from torchvision import datasets

    from mnistbench.data import mnist as data
    from mnistbench.measure import loaders

    dataset = loaders.torchvision_mnist(tiny_mnist, "train", 100)
    assert isinstance(dataset, datasets.MNIST) and len(dataset) == 100
    images, labels = data.load_split(tiny_mnist, "train")
    resident = loaders.normalised_tensor(images[:100], torch.device("cpu"))
    for i in (0, 57, 99):
        x, y = dataset[i]
        assert torch.equal(x, resident[i]) and y == int(labels[i])
    test = loaders.torchvision_mnist(tiny_mnist, "test", None)
    assert len(test) == len(data.load_split(tiny_mnist, "test")[1])
    assert np.array_equal(test.targets.numpy(), data.load_split(tiny_mnist, "test")[1])
