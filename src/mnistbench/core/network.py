"""The study's network as numbers: its layer shapes at a channel width, and its FLOPs per
training and per evaluation sample, computed from those shapes here and nowhere else.

The network (:mod:`mnistbench.measure.model` builds it from these shapes) on a
1 x 28 x 28 input::

    conv(1, 32w, 3) -> ReLU -> conv(32w, 64w, 3) -> ReLU -> max-pool 2   # 64w x 12 x 12
    -> flatten (9216w) -> dropout 0.5 -> fc(9216w, 128) -> ReLU -> fc(128, 10)

``w`` is the width multiplier of the convolutions (1 is the blog's network; the ``scale``
experiment widens it), the rest unchanged.

FLOPs count what dominates the work and what ``torch.utils.flop_counter.FlopCounterMode``
counts: the multiply-adds of the convolutions and linear layers, two FLOPs each; elementwise
work (ReLU, pooling, dropout, the loss, the optimizer) is left out. An evaluation sample costs
the forward pass. A training sample costs the forward pass plus the backward pass: the weight
gradient of every layer (as many FLOPs as its forward) and the input gradient of every layer
but the first (its input is the data, which needs none). At width 1: 23.98 MFLOP forward and
71.57 MFLOP per training sample, so an epoch of 60,000 samples is 4.29 TFLOP.

Standard library only (:mod:`mnistbench.core`).
"""

from __future__ import annotations

from dataclasses import dataclass

INPUT_SIDE = 28  # pixels; the input is 1 x INPUT_SIDE x INPUT_SIDE
KERNEL = 3  # convolution kernel side, stride 1, no padding
POOL = 2  # max-pool window and stride after the second convolution
CONV1_CHANNELS = 32  # at width 1
CONV2_CHANNELS = 64  # at width 1
HIDDEN = 128  # fc1's outputs
CLASSES = 10


@dataclass(frozen=True)
class Shapes:
    """Layer sizes of the network at one width."""

    width: int
    conv1: tuple[int, int]  # (in, out) channels
    conv2: tuple[int, int]
    conv1_side: int  # output side of conv1, pixels
    conv2_side: int
    flat: int  # features after the pool, fc1's inputs
    fc1: tuple[int, int]  # (in, out) features
    fc2: tuple[int, int]


def shapes(width: int = 1) -> Shapes:
    """The layer sizes at channel width multiplier ``width`` (a positive integer)."""
    if not isinstance(width, int) or isinstance(width, bool) or width < 1:
        raise ValueError(f"the network's width must be a positive integer, got {width!r}")
    c1, c2 = CONV1_CHANNELS * width, CONV2_CHANNELS * width
    side1 = INPUT_SIDE - KERNEL + 1
    side2 = side1 - KERNEL + 1
    flat = c2 * (side2 // POOL) ** 2
    return Shapes(width, (1, c1), (c1, c2), side1, side2, flat, (flat, HIDDEN),
                  (HIDDEN, CLASSES))


def _layer_flops(s: Shapes) -> list[int]:
    """Forward FLOPs of each layer in order: conv1, conv2, fc1, fc2."""
    conv1 = 2 * s.conv1_side ** 2 * s.conv1[1] * s.conv1[0] * KERNEL ** 2
    conv2 = 2 * s.conv2_side ** 2 * s.conv2[1] * s.conv2[0] * KERNEL ** 2
    return [conv1, conv2, 2 * s.fc1[0] * s.fc1[1], 2 * s.fc2[0] * s.fc2[1]]


def eval_flops(width: int = 1) -> int:
    """FLOPs of one evaluation sample (the forward pass)."""
    return sum(_layer_flops(shapes(width)))


def train_flops(width: int = 1) -> int:
    """FLOPs of one training sample: forward, weight gradients of every layer, input
    gradients of every layer but the first."""
    layers = _layer_flops(shapes(width))
    return sum(layers) + sum(layers) + sum(layers[1:])
