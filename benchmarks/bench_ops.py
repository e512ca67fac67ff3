"""Side-by-side speed of formulations of the tuned network's memory-bound tail (max-pool, ReLU,
dropout and their backward), in one run: each variant trains the same steps on the same batch,
alternating, and the ratio to the current formulation is printed with the ISA named.

Variants (all compute ``Net``'s function with the same random stream; tests/measure/test_model.py
checks that):
- ``current``: ``relu(max_pool(conv2))``, flatten, ``bit_dropout``;
- ``fused``: ``max_pool(conv2)``, flatten, ``relu_bit_dropout`` (ReLU and dropout in one pass
  with one saved multiplier);
- ``inplace``: ``current`` with the first ReLU in place (conv1's output is not needed by the
  convolution's backward).

Usage: python benchmarks/bench_ops.py [--steps 60] [--repeats 5] [--precisions fp32,bf16]
A variant is worth keeping only where it is faster than ``current`` beyond the spread.

Measured 2026-12-03 (Intel Xeon, AVX512 with AVX512-BF16/AMX, 2 threads, batch 128, 40 steps x
5 repeats, medians): fused 0.83x in fp32 and 0.79x in bf16 (slower: the sign test and the
uint8 logical-and cost more than the separate ReLU pass they save), in-place 0.99x and 1.02x
(within noise). Neither is kept in the model; both stay here to be re-measured elsewhere.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from torch.nn import functional as F

from mnistbench.measure import model
from mnistbench.measure.optim import make_adam


class _ReluBitDropout(model._BitDropout):
    """``bit_dropout(relu(x))`` in one pass: the keep-mask (the same random bits) and the sign
    of ``x`` give one multiplier, saved once for the backward (the model's bit dropout's:
    ``grad * scale``); one elementwise pass and one saved tensor instead of two of each."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        keep = model._keep_bits(x).logical_and_(x > 0)
        scale = keep.to(x.dtype).mul_(1.0 / (1.0 - model.DROPOUT_P))
        ctx.save_for_backward(scale)
        return x * scale


def relu_bit_dropout(x: torch.Tensor, training: bool) -> torch.Tensor:
    """``bit_dropout(relu(x), training)`` fused (the same function and random stream); the
    ReLU alone when not training."""
    if not training:
        return F.relu(x)
    return _ReluBitDropout.apply(x)


class Fused(model.Net):
    """Net with ReLU and dropout fused after the pool."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(model.conv2d(self.conv1, x))
        x = F.max_pool2d(model.conv2d(self.conv2, x), 2)
        x = relu_bit_dropout(torch.flatten(x, 1), self.training)
        x = F.relu(model.linear(self.fc1, x))
        return model.linear(self.fc2, x)


class InPlace(model.Net):
    """Net with the first ReLU in place."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu_(model.conv2d(self.conv1, x))
        x = F.relu(F.max_pool2d(model.conv2d(self.conv2, x), 2))
        x = model.bit_dropout(torch.flatten(x, 1), self.training)
        x = F.relu(model.linear(self.fc1, x))
        return model.linear(self.fc2, x)


VARIANTS = {"current": model.Net, "fused": Fused, "inplace": InPlace}


def steps_seconds(cls, x, y, precision: str, steps: int) -> float:
    """Seconds of ``steps`` training steps (after 3 untimed ones) of a fresh ``cls``."""
    torch.manual_seed(0)
    net = cls().to(memory_format=torch.channels_last)
    opt, _ = make_adam(net.parameters(), lr=1e-3)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")

    def step():
        with autocast:
            loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--precisions", default="fp32,bf16")
    args = parser.parse_args(argv)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(args.batch_size, 1, 28, 28, generator=gen).contiguous(
        memory_format=torch.channels_last)
    y = torch.randint(0, 10, (args.batch_size,), generator=gen)
    print(f"ISA {torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, batch {args.batch_size}, {args.steps} steps x "
          f"{args.repeats} repeats, variants alternating; medians", flush=True)
    for precision in args.precisions.split(","):
        times: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for repeat in range(args.repeats):
            order = list(VARIANTS) if repeat % 2 == 0 else list(VARIANTS)[::-1]
            for name in order:
                times[name].append(steps_seconds(VARIANTS[name], x, y, precision, args.steps))
        base = statistics.median(times["current"])
        for name, values in times.items():
            med = statistics.median(values)
            print(f"{precision:5s} {name:8s} {1000 * med / args.steps:7.2f} ms/step "
                  f"(min {1000 * min(values) / args.steps:6.2f}, max "
                  f"{1000 * max(values) / args.steps:6.2f})  current / {name}: "
                  f"{base / med:5.3f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
