"""The study's CNN: the pytorch/examples MNIST net that the blog's layer sizes describe.

The blog prints a ``forward()`` that max-pools twice (after each convolution), which
contradicts its own ``fc1 = Linear(9216, 128)``: after two pools the flattened size is
64 * 5 * 5 = 1600 and the code fails. The layers it declares describe this network (input
1 x 28 x 28)::

    conv(1, 32, 3) -> ReLU -> conv(32, 64, 3) -> ReLU -> max-pool 2    # 64 x 12 x 12
    -> flatten (9216) -> dropout 0.5 -> fc(9216, 128) -> ReLU -> fc(128, 10)

trained with CrossEntropyLoss on the logits and Adam (lr 1e-3).

:class:`ReferenceNet` is that network written literally. :class:`Net`, the one the benchmark
trains, computes the same function faster:

- max-pool before the second ReLU: ReLU is monotone, so ``maxpool(relu(x)) ==
  relu(maxpool(x))`` exactly, and the ReLU then touches 4x fewer elements;
- under bf16 autocast on a CPU without native bf16 instructions (no AVX512-BF16/AMX; PyTorch
  then runs bf16 convolutions through a slow im2col fallback, about 10x slower than fp32), the
  convolutions and linear layers take bf16-rounded operands, multiply and accumulate them in
  fp32 with the fast fp32 kernels, and round the result to bf16: the numerics of bf16 hardware
  (bf16 inputs, fp32 accumulation, bf16 output), rounding at the same points forward and
  backward. Where the CPU has native bf16, or on CUDA, autocast's own kernels run;
- dropout draws its keep-mask from random *bits* (p = 0.5 exactly: each bit of a uniform random
  integer is an independent fair coin), which costs far less than drawing one float per element
  as ``torch.nn.Dropout`` does. Same distribution (keep with probability 0.5, scale kept values
  by 2), a different random stream; identical in eval mode.

Both share parameter names, so state dicts load into either; the tests check equality of
outputs in eval mode and of the dropout distribution in training mode.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from mnistbench.core import network

FLAT_FEATURES = network.shapes(1).flat  # 9216: 64 channels x 12 x 12 after the 2x2 max-pool
DROPOUT_P = 0.5


#: Whether this CPU runs bf16 convolutions natively (oneDNN's AVX512-BF16 / AMX paths).
NATIVE_CPU_BF16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def _emulate_bf16(x: torch.Tensor) -> bool:
    """True inside CPU bf16 autocast on a CPU without native bf16 (see module docstring)."""
    return (
        not NATIVE_CPU_BF16
        and x.device.type == "cpu"
        and torch.is_autocast_enabled("cpu")
        and torch.get_autocast_dtype("cpu") == torch.bfloat16
    )


def _bf16_operands(*tensors: torch.Tensor) -> list[torch.Tensor]:
    """Round to bf16 (as autocast would), then widen to fp32 for the arithmetic."""
    return [t.to(torch.bfloat16).float() for t in tensors]


def conv2d(layer: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)``, with bf16 numerics on fp32 kernels where bf16 is emulated."""
    if not _emulate_bf16(x):
        return layer(x)
    with torch.autocast("cpu", enabled=False):
        x, w, b = _bf16_operands(x, layer.weight, layer.bias)
        return F.conv2d(x, w, b, layer.stride, layer.padding).to(torch.bfloat16)


def linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)``, with bf16 numerics on fp32 kernels where bf16 is emulated."""
    if not _emulate_bf16(x):
        return layer(x)
    with torch.autocast("cpu", enabled=False):
        x, w, b = _bf16_operands(x, layer.weight, layer.bias)
        return F.linear(x, w, b).to(torch.bfloat16)


class ReferenceNet(nn.Module):
    """The network exactly as its layer sizes describe it (pytorch/examples MNIST); ``width``
    multiplies the convolutions' channels (:func:`mnistbench.core.network.shapes`)."""

    def __init__(self, width: int = 1) -> None:
        super().__init__()
        s = network.shapes(width)
        self.conv1 = nn.Conv2d(*s.conv1, network.KERNEL, 1)
        self.conv2 = nn.Conv2d(*s.conv2, network.KERNEL, 1)
        self.dropout = nn.Dropout(DROPOUT_P)
        self.fc1 = nn.Linear(*s.fc1)
        self.fc2 = nn.Linear(*s.fc2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, network.POOL)
        x = torch.flatten(x, 1)
        x = self.dropout(x)
        x = F.relu(self.fc1(x))
        return self.fc2(x)


def _keep_bits(x: torch.Tensor) -> torch.Tensor:
    """A 0/1 keep-mask shaped like ``x`` (uint8) from random bytes, 8 mask bits per byte."""
    n = x.numel()
    bits = torch.randint(0, 256, ((n + 7) // 8,), dtype=torch.uint8, device=x.device)
    shifts = torch.arange(8, dtype=torch.uint8, device=x.device)
    return (bits.unsqueeze(1) >> shifts).bitwise_and_(1).view(-1)[:n].view_as(x)


class _BitDropout(torch.autograd.Function):
    """Dropout with p = 0.5 whose mask comes from random bytes, 8 mask bits per byte."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        scale = _keep_bits(x).to(x.dtype).mul_(1.0 / (1.0 - DROPOUT_P))
        ctx.save_for_backward(scale)
        return x * scale

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (scale,) = ctx.saved_tensors
        return grad * scale


def bit_dropout(x: torch.Tensor, training: bool) -> torch.Tensor:
    """Dropout with p = 0.5 (see module docstring); the identity when not training."""
    if not training:
        return x
    return _BitDropout.apply(x)


class Net(ReferenceNet):
    """:class:`ReferenceNet`'s function, reformulated for speed (see module docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(conv2d(self.conv1, x))
        x = F.relu(F.max_pool2d(conv2d(self.conv2, x), network.POOL))
        x = torch.flatten(x, 1)
        x = bit_dropout(x, self.training)
        x = F.relu(linear(self.fc1, x))
        return linear(self.fc2, x)


def build_model(seed: int, implementation: str = "tuned", width: int = 1) -> ReferenceNet:
    """A freshly initialised network of channel width ``width``, its weights determined by
    ``seed`` alone: :class:`Net` (``tuned``) or the literal :class:`ReferenceNet` (``stock``,
    the blog's code); both have the same parameters in the same order, so a seed gives both
    the same weights."""
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return ReferenceNet(width) if implementation == "stock" else Net(width)
    finally:
        torch.random.set_rng_state(gen_state)
