"""The device's measured limit: how many FLOP/s a dense matmul and the study's convolution
reach here, per precision, with the cell's threads. A cell's achieved FLOP/s is set against
this figure (the "why" of a speed-up), so it is measured in the same environment, never taken
from a datasheet.

Kernels (forward only, FLOPs = 2 x multiply-adds, as :mod:`mnistbench.core.network` counts),
each at several shapes, so that a cell cannot silently run past the limit because one shape
suited its kernels better (the published width-8 "fp32" cells on an H200 ran at 63.2 TFLOP/s
against a limit of 51.1 timed at one matmul and one convolution shape):

- ``matmul``: ``n x n`` by ``n x n`` products for each n of :data:`MATMUL_N` (512 to 2048 on
  a CPU, 2048 to 8192 on an accelerator), the best a device does on dense work;
- ``conv2``: the study's second convolution at batch 128 (32 -> 64 channels, 3 x 3, on
  26 x 26), the layer that holds 89 % of the network's FLOPs, at each channel width of
  :data:`CONV_WIDTHS` (the scale experiment's wider networks), channels-last on a CPU; on
  CUDA with cuDNN autotuning on, as the cells run it, so the limit sees the algorithms (e.g.
  Winograd) the cells get.

The limit of a precision is the best row (:func:`limit`); the aggregate flags a cell past
100 % with the reason its recorded math gives (``limit_note``).

Each kernel is warmed up (:data:`WARMUP` calls, oneDNN's and cuDNN's choices made there),
then called in a loop until :data:`MIN_SECONDS` have passed; the device is synchronised
before each clock read. The result records the shape, the calls, the seconds, the threads and
``source: measured`` (its fields: :data:`mnistbench.core.schema.PEAK_FIELDS`).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch.nn import functional as F

from mnistbench.core import network, schema
from mnistbench.measure import backends

MATMUL_N = {"cpu": (512, 1024, 2048), "accelerator": (2048, 4096, 8192)}
#: Channel widths of the timed convolution (1: the blog's network's conv2).
CONV_WIDTHS = {"cpu": (1, 2), "accelerator": (1, 4, 8)}
CONV_BATCH = 128
WARMUP = 3
MIN_SECONDS = 0.3  # s of timed calls per kernel and precision
#: ``source`` of every record: where its figures come from.
SOURCE = "measured: each kernel timed here after warm-up (mnistbench.measure.peak)"
DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
          "fp16": torch.float16}


def _timed(fn, sync) -> tuple[int, float]:
    """(calls, seconds) of ``fn`` called until :data:`MIN_SECONDS` have passed."""
    for _ in range(WARMUP):
        fn()
    sync()
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        if calls % 4 == 0 or calls == 1:
            sync()
            elapsed = time.perf_counter() - start
            if elapsed >= MIN_SECONDS:
                return calls, elapsed


def _kernels(device: torch.device, dtype: torch.dtype) -> list[tuple[str, Any, int, str]]:
    """(kernel, callable, FLOPs per call, shape text) for every kernel and shape timed."""
    kind = "cpu" if device.type == "cpu" else "accelerator"
    out = []
    for n in MATMUL_N[kind]:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        out.append(("matmul", lambda a=a, b=b: torch.mm(a, b), 2 * n ** 3,
                    f"{n}x{n} @ {n}x{n}"))
    for width in CONV_WIDTHS[kind]:
        s = network.shapes(width)
        x = torch.randn(CONV_BATCH, s.conv2[0], s.conv1_side, s.conv1_side, device=device,
                        dtype=dtype)
        w = torch.randn(s.conv2[1], s.conv2[0], network.KERNEL, network.KERNEL, device=device,
                        dtype=dtype)
        if device.type == "cpu":
            x, w = (t.contiguous(memory_format=torch.channels_last) for t in (x, w))
        flops = 2 * CONV_BATCH * s.conv2_side ** 2 * s.conv2[1] * s.conv2[0] * network.KERNEL ** 2
        out.append(("conv2", lambda x=x, w=w: F.conv2d(x, w), flops,
                    f"batch {CONV_BATCH}, {s.conv2[0]}->{s.conv2[1]} ch, "
                    f"{network.KERNEL}x{network.KERNEL} on {s.conv1_side}x{s.conv1_side}"))
    return out


def measure(device: str = "cpu", precisions: tuple[str, ...] = ("fp32",),
            threads: int | None = None) -> dict[str, Any]:
    """The measured limit of ``device`` for each of ``precisions`` (rows of kernel,
    precision, GFLOP/s, calls, seconds, shape), with the threads and torch version: a record
    of :data:`mnistbench.core.schema.PEAK_FIELDS` with status ok."""
    if threads:
        torch.set_num_threads(threads)
    torch_device = backends.pick_device(device)
    sync = backends.backend(device).synchronize if device != "cpu" else (lambda: None)
    rows = []
    for precision in precisions:
        dtype = DTYPES[precision]
        tf32 = precision == "tf32"
        if device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32
            torch.backends.cudnn.benchmark = True  # as the cells run (their default)
        for kernel, fn, flops, shape in _kernels(torch_device, dtype):
            with torch.no_grad():
                calls, seconds = _timed(fn, sync)
            rows.append({"kernel": kernel, "precision": precision, "shape": shape,
                         "gflops": flops * calls / seconds / 1e9, "calls": calls,
                         "seconds": seconds})
    return {"status": "ok", "reason": "", "device": device, "threads": torch.get_num_threads(),
            "torch": torch.__version__, "source": SOURCE, "rows": rows}


def limit(record: dict[str, Any], precision: str) -> float | None:
    """The highest GFLOP/s of ``record`` for ``precision`` (None when not measured): the rule
    of :func:`mnistbench.core.schema.best_peak_row`, which the aggregate applies too."""
    row = schema.best_peak_row(record.get("rows", []), precision)
    return None if row is None else row["gflops"]
