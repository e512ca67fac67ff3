"""Tests for scripts/gpu-check: its logic, run on the CPU with tiny settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_runs_cells_in_the_workflow_layout(tmp_path, real_mnist_mirror) -> None:
    """On the CPU, the script skips CUDA-only precisions and packs ok cells as runs/{env}/..."""
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "DEVICE": "cpu",
           "MIRROR": str(real_mnist_mirror), "DATA": str(tmp_path / "mnist"),
           "CELL_ARGS": "--train-limit 256 --test-limit 128 --max-steps 2 --warmup-steps 0",
           "BATCHES": "32", "CONV_EPOCHS": "2", "MNISTBENCH_ENV": "gpu-check-test"}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "skip fp16: not supported on cpu" in proc.stdout
    with tarfile.open(out / "runs.tar.gz") as tar:
        # The "data" filter exists from Python 3.11.4 on (Debian 12 has 3.11.2); the archive
        # is the script's own, made just above.
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(tmp_path / "x", **safe)
    cells = sorted((tmp_path / "x" / "runs" / "gpu-check-test").glob("*/*/summary.json"))
    names = {f"{p.parent.parent.name}/{p.parent.name}" for p in cells}
    assert names == {
        "sweep/cpu-fp32-resident-b32-r0", "sweep/cpu-fp32-dataloader-b32-r0",
        "sweep/cpu-bf16-resident-b32-r0", "sweep/cpu-bf16-dataloader-b32-r0",
        "convergence/cpu-fp32-resident-b128-r0", "convergence/cpu-fp32-dataloader-b128-r0",
    }
    for path in cells:
        summary = json.loads(path.read_text())
        assert summary["status"] == "ok", summary["reason"]
        assert summary["params"]["env"] == "gpu-check-test"
    assert json.loads((out / "env.json").read_text())["torch"]
