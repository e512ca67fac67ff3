"""The math settings a cell ran with, read back from torch (what ran, not what was asked): the
TF32 switches, the float32 matmul precision, cuDNN autotuning and determinism, and on CUDA the
kernels one warm-up step launched for its convolutions and matmuls (their names show cuDNN's
algorithm and math mode: implicit GEMM, Winograd, FFT, TF32 or not). The params of
:data:`mnistbench.core.schema.PARAM_FIELDS` named ``math_*``.

Why: a "fp32" cell that runs past the fp32 limit (the published width-8 cells on an H200:
63.2 TFLOP/s against 51.1) is only explained by what its kernels did, and nothing recorded it.
The aggregate reads them back to say why a cell ran past its limit
(:func:`mnistbench.results.aggregate.past_limit_reason`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import torch

#: Device kernel names that belong to convolutions and matmuls (cuDNN, cuBLAS, CUTLASS).
CONV_KERNEL = re.compile(r"conv|gemm|winograd|fft|xmma|cudnn|cutlass|dgrad|wgrad|fprop|"
                         r"implicit|sgemm|hgemm|bf16gemm", re.IGNORECASE)
#: Longest math_conv_kernels text, in characters (a summary field, not a profile).
MAX_KERNELS_TEXT = 2000


def settings() -> dict[str, object]:
    """The process-wide math switches as they are now (``math_*`` params but the kernels)."""
    det = "on" if torch.are_deterministic_algorithms_enabled() else "off"
    cudnn_det = "on" if torch.backends.cudnn.deterministic else "off"
    return {
        "math_tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "math_tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
        "math_matmul_precision": matmul_precision(),
        "math_cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "math_deterministic": f"det={det} cudnn={cudnn_det}",
    }


def matmul_precision() -> str:
    """torch's float32 matmul precision (highest, high, medium). Where the legacy switches
    (``allow_tf32``, ``set_float32_matmul_precision``) and the per-backend ones were mixed,
    torch refuses the global answer (RuntimeError); then each matmul backend's own, e.g.
    ``mixed: cuda.matmul ieee, mkldnn.matmul tf32``: a recorder never fails a cell."""
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:
        backends = (("cuda.matmul", torch.backends.cuda.matmul),
                    ("mkldnn.matmul", getattr(torch.backends.mkldnn, "matmul", None)))
        return "mixed: " + ", ".join(
            f"{name} {getattr(backend, 'fp32_precision', 'unknown')}"
            for name, backend in backends if backend is not None)


def conv_kernel_names(names: Iterable[str]) -> str:
    """The convolution and matmul kernels among ``names`` (device kernel names), distinct,
    sorted, joined by ``; `` and cut to :data:`MAX_KERNELS_TEXT` characters."""
    text = "; ".join(sorted({n for n in names if CONV_KERNEL.search(n)}))
    return text if len(text) <= MAX_KERNELS_TEXT else text[: MAX_KERNELS_TEXT - 3] + "..."


def profile_kernels(step: Callable[[], None]) -> str:
    """Run ``step`` once under torch.profiler with CUDA activity and return the names of the
    convolution and matmul kernels it launched (:func:`conv_kernel_names`). CUDA only: on a
    CPU the profiler's start-up costs seconds and names only oneDNN's ops."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events()
             if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA]
    return conv_kernel_names(names)
