"""The device-generic path of a cell, end to end, on a machine without an accelerator: a fake
backend module (tests/fake_accelerator.py) stands in for torch.xpu and keeps the tensors on
the CPU, so pick_device, the capability query, the timers, peak memory and the random-state
snapshot of the trainer all run for real; and the real xpu and mps backends, absent here,
give unavailable cells with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mnistbench.core import schema
from mnistbench.measure import train
from mnistbench.measure.cellconfig import TrainConfig
from tests.fake_accelerator import install

TINY = {"max_steps": 3, "test_limit": 64, "warmup_steps": 1, "batch_size": 32,
        "sample_interval": 0.05, "quiet": True, "epochs": 2}


def run(tmp_path: Path, data: Path, **overrides) -> tuple[int, dict]:
    """Run one cell in-process; its exit code and summary."""
    out = tmp_path / "cell"
    code = train.run_cell(TrainConfig(out=out, data=data, **{**TINY, **overrides}))
    return code, json.loads((out / schema.SUMMARY_FILE).read_text())


def test_fake_accelerator_cell_runs_the_device_generic_path(tmp_path, tiny_mnist,
                                                            monkeypatch):
    """An xpu cell on the fake backend ends ok, timed with the backend's events (recorded at
    every mark, the device synchronised once per epoch plus set-up and warm-up), its peak
    memory read through the backend, its random state snapshotted and restored."""
    fake = install(monkeypatch, "xpu", peak_bytes=7 * 2**20)
    code, summary = run(tmp_path, tiny_mnist, device="xpu")
    assert code == 0, summary["reason"]
    assert summary["params"]["device"] == "xpu"
    assert summary["timing"]["timing_method"] == "device-events"
    # start + 4 marks per step + eval, per epoch; the pool is reused across epochs
    assert fake.calls["record"] == 2 * (1 + 4 * 3 + 1)
    assert fake.calls["Event"] == 1 + 4 * 3 + 1
    assert 2 <= fake.calls["synchronize"] <= 2 + 6  # one per epoch, a few outside the loop
    assert fake.calls["reset_peak_memory_stats"] == 1
    assert summary["results"]["peak_device_mem_mb"] == 7.0
    assert summary["results"]["peak_cuda_mem_mb"] is None
    assert fake.restored == [fake.rng_state]  # warm-up undone on the device's stream too
    assert summary["params"]["bf16_path"] == ""
    epochs = summary["results"]
    assert epochs["steps_per_epoch"] == 3 and epochs["epoch_s_median"] > 0


def test_backend_without_events_is_timed_with_sync_and_host_clock(tmp_path, tiny_mnist,
                                                                  monkeypatch):
    """On a backend without timing events each mark synchronises the device, and the summary
    says sync+host-clock."""
    fake = install(monkeypatch, "xpu", events=False)
    code, summary = run(tmp_path, tiny_mnist, device="xpu")
    assert code == 0, summary["reason"]
    assert summary["timing"]["timing_method"] == "sync+host-clock"
    assert fake.calls["synchronize"] >= 2 * (1 + 4 * 3 + 1)


@pytest.mark.slow
@pytest.mark.parametrize("native", [True, False])
def test_bf16_cell_records_the_path_the_query_gives(tmp_path, tiny_mnist, monkeypatch, native):
    """A bf16 cell records native or emulated as the backend's bf16 query says."""
    install(monkeypatch, "xpu", bf16_native=native)
    code, summary = run(tmp_path, tiny_mnist, device="xpu", precision="bf16")
    assert code == 0, summary["reason"]
    assert summary["params"]["bf16_path"] == ("native" if native else "emulated")


@pytest.mark.slow
def test_fp16_cell_runs_with_a_grad_scaler(tmp_path, tiny_mnist, monkeypatch):
    """fp16 on an accelerator runs (autocast plus GradScaler) and records no bf16 path."""
    install(monkeypatch, "xpu")
    # One timed step: on a CPU (the fake xpu's tensors live there) an fp16 backward pass
    # takes about 2 s, so each step more costs the suite that much.
    code, summary = run(tmp_path, tiny_mnist, device="xpu", precision="fp16", epochs=1,
                        max_steps=1)
    assert code == 0, summary["reason"]
    assert summary["params"]["bf16_path"] == ""


@pytest.mark.parametrize(("options", "precision", "reason"), [
    ({"bf16": False}, "bf16", "cannot run bf16 (torch.xpu.is_bf16_supported() is False)"),
    ({"fp16": False}, "fp16", "cannot run fp16"),
    ({"available": False}, "fp32", "no Intel XPU device is visible to torch"),
])
def test_refused_or_absent_device_is_an_unavailable_cell(tmp_path, tiny_mnist, monkeypatch,
                                                         options, precision, reason):
    """A precision the device's capability query refuses, or a device torch does not see,
    gives status unavailable (exit 10) with the reason, and no timings."""
    install(monkeypatch, "xpu", **options)
    code, summary = run(tmp_path, tiny_mnist, device="xpu", precision=precision)
    assert code == schema.EXIT_CODES["unavailable"] == 10
    assert summary["status"] == "unavailable"
    assert reason in summary["reason"]
    assert summary["results"]["epoch_s_median"] is None
    assert summary["timing"]["timing_method"] is None


@pytest.mark.parametrize(("device", "reason"), [
    ("xpu", "no Intel XPU device is visible to torch (this torch build has no XPU support"),
    ("mps", "MPS is not available"),
])
def test_real_absent_backends_are_unavailable(tmp_path, tiny_mnist, device, reason):
    """Here (a CUDA build of torch, no Intel or Apple GPU) xpu and mps cells are unavailable
    with the reason."""
    if getattr(torch, device).is_available():
        pytest.skip(f"this machine has an {device} device")
    code, summary = run(tmp_path, tiny_mnist, device=device)
    assert code == 10
    assert reason in summary["reason"]


def test_tf32_on_xpu_is_a_usage_error(tmp_path, tiny_mnist, capsys):
    """tf32 has a policy on CUDA only: on xpu it is a usage error (exit 2) naming the
    allowed precisions, and nothing is written."""
    out = tmp_path / "cell"
    code = train.run_cell(TrainConfig(out=out, data=tiny_mnist, device="xpu",
                                      precision="tf32", **{**TINY}))
    assert code == 2
    assert "allowed on xpu: fp32, bf16, fp16" in capsys.readouterr().err
    assert not out.exists()
