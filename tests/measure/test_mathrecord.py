"""Tests for mnistbench.measure.mathrecord: the math settings a cell ran with, read back from
torch (not what was asked), the convolution and matmul kernels named from a profile, and a
cell's summary recording them after its warm-up."""

from __future__ import annotations

import pytest
import torch

from mnistbench.measure import mathrecord, train, warmup
from tests.measure.cells import run


@pytest.fixture
def math_switches():
    """Put torch's math switches back as they were after the test."""
    precision = mathrecord.matmul_precision()
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             "highest" if precision.startswith("mixed") else precision,
             torch.backends.cudnn.benchmark)
    yield
    torch.set_float32_matmul_precision(saved[2])
    (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) = saved[:2]
    torch.backends.cudnn.benchmark = saved[3]


def test_settings_read_the_switches_as_they_are(math_switches) -> None:
    torch.set_float32_matmul_precision("high")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    got = mathrecord.settings()
    assert got["math_tf32_matmul"] is True and got["math_tf32_cudnn"] is False
    assert got["math_cudnn_benchmark"] is True and got["math_matmul_precision"] == "high"
    assert got["math_deterministic"] == "det=off cudnn=off"
    torch.backends.cuda.matmul.allow_tf32 = False
    assert mathrecord.settings()["math_tf32_matmul"] is False


def test_mixed_precision_switches_are_recorded_per_backend(math_switches) -> None:
    """A precision set through set_float32_matmul_precision, then TF32 turned off through
    allow_tf32, makes torch refuse the global answer: each matmul backend's is recorded."""
    torch.set_float32_matmul_precision("high")
    torch.backends.cuda.matmul.allow_tf32 = False
    with pytest.raises(RuntimeError):
        torch.get_float32_matmul_precision()
    got = mathrecord.settings()["math_matmul_precision"]
    assert got.startswith("mixed: cuda.matmul ieee, mkldnn.matmul ")


def test_only_convolution_and_matmul_kernels_are_named_once_each_and_cut() -> None:
    names = ["sm90_xmma_fprop_implicit_gemm_tf32f32", "elementwise_kernel", "winograd_nonfused",
             "sm90_xmma_fprop_implicit_gemm_tf32f32", "reduce_kernel", "cutlass_80_wgrad"]
    assert mathrecord.conv_kernel_names(names) == (
        "cutlass_80_wgrad; sm90_xmma_fprop_implicit_gemm_tf32f32; winograd_nonfused")
    long = [f"sgemm_{i:04d}_" + "x" * 100 for i in range(100)]
    text = mathrecord.conv_kernel_names(long)
    assert len(text) == mathrecord.MAX_KERNELS_TEXT and text.endswith("...")


def test_a_profiler_that_fails_is_said_in_the_field_not_a_failed_cell(monkeypatch) -> None:
    def broken(step):
        raise RuntimeError("CUPTI unavailable\nmore")

    monkeypatch.setattr(mathrecord, "profile_kernels", broken)
    assert warmup._profiled_kernels(lambda: None) == (
        "not recorded: the profiler failed: RuntimeError: CUPTI unavailable")


def test_a_cell_records_the_math_that_ran_after_its_warm_up(tmp_path, tiny_mnist,
                                                             monkeypatch, math_switches):
    """The summary's math_* params are read after the warm-up, as the timed epochs run with
    them: a switch the warm-up changed is recorded as it was then, not as asked."""
    torch.backends.cuda.matmul.allow_tf32 = False
    real = train.warm_up

    def warm_up_that_turns_tf32_on(*args):
        torch.backends.cuda.matmul.allow_tf32 = True
        return real(*args)

    monkeypatch.setattr(train, "warm_up", warm_up_that_turns_tf32_on)
    code, summary, _ = run(tmp_path, tiny_mnist, max_steps=2, quiet=True)
    assert code == 0
    params = summary["params"]
    assert params["math_tf32_matmul"] is True
    assert params["math_matmul_precision"] == torch.get_float32_matmul_precision()
    assert params["math_cudnn_benchmark"] is False  # a CPU cell leaves it as it was
    assert params["math_conv_kernels"] in (None, "")  # profiled on CUDA only
