"""Tests for scripts/gpu-check and scripts/gpu-study: their logic, run on the CPU with tiny
settings (the GPU machine runs the same code with DEVICE=cuda)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from mnistbench.launch import plan

ROOT = Path(__file__).resolve().parents[1]
TINY = "--train-limit 1024 --test-limit 128 --max-steps 2 --warmup-steps 0 --epochs 1"
#: A plan of three cells (the blog's code, this project's best, one scale cell): enough to see
#: every step of the run (peak, fork server, the allocator a cell asks for) in seconds.
SMALL = """\
experiments:
  convergence: {repeats: 1, loaders: [dataloader, resident]}
  sweep: {enabled: false}
  tips: {enabled: false}
  scale: {repeats: 1, widths: [2], precisions: [fp32]}
"""


def make_plan(tmp_path: Path, *configs: str | Path) -> Path:
    out = tmp_path / "plan.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu-study"), "plan",
                    *(arg for c in configs for arg in ("--configfile", str(ROOT / c))),
                    "--out", str(out)], check=True, capture_output=True, text=True)
    return out


def gpu_check(tmp_path: Path, plan_file: Path, mirror: Path, budget: int) -> Path:
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "DEVICE": "cpu",
           "PLAN": str(plan_file), "MIRROR": str(mirror), "DATA": str(tmp_path / "mnist"),
           "CELL_ARGS": TINY, "BUDGET": str(budget), "MNISTBENCH_ENV": "gpu-check-test"}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def unpacked(out: Path, tmp_path: Path) -> Path:
    with tarfile.open(out / "runs.tar.gz") as tar:
        # The "data" filter exists from Python 3.11.4 on (Debian 12 has 3.11.2); the archive
        # is the script's own, made just above.
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(tmp_path / "x", **safe)
    return tmp_path / "x"


def test_plan_is_the_validated_config_with_defaults(tmp_path) -> None:
    config = json.loads(make_plan(tmp_path, "config/config.yaml", "config/gpu.yaml").read_text())
    assert config["devices"] == ["cuda"]
    assert config["experiments"]["sweep"]["batch_sizes"][-1] == 4096
    assert config["experiments"]["sweep"]["precisions"] == ["fp32", "tf32", "bf16", "fp16"]
    assert config["experiments"]["convergence"]["repeats"] == 2
    # The matrix the GPU machine builds from it: the workflow's own (every experiment).
    matrix = plan.Matrix.of_config(config, "h200", ["cuda"], 16)
    assert {c.experiment for c in matrix.cells} == {"convergence", "sweep", "tips", "scale"}
    assert len([c for c in matrix.cells if c.experiment == "sweep"]) == 4 * 2 * 8 * 2


def test_plan_refuses_a_bad_config_naming_the_key(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("experiments:\n  sweep:\n    batch_sizes: [0]\n")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu-study"), "plan",
                           "--configfile", str(bad), "--out", str(tmp_path / "p.json")],
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert "batch_sizes" in proc.stderr
    assert not (tmp_path / "p.json").exists()


@pytest.mark.slow
def test_gpu_check_runs_the_plans_cells_in_the_workflow_layout(tmp_path,
                                                               real_mnist_mirror) -> None:
    """On the CPU: the peak job and every cell of the plan's matrix for the device, ok, packed
    as runs/{env}/{experiment}/{cell}/ beside logs/; nothing listed as not run. Cells start
    from the fork server unless they ask for another allocator than it has (the blog's code:
    glibc's), as in the workflow."""
    (tmp_path / "small.yaml").write_text(SMALL)
    plan_file = make_plan(tmp_path, "config/config.yaml", "config/quick.yaml",
                          tmp_path / "small.yaml")
    out = gpu_check(tmp_path, plan_file, real_mnist_mirror, budget=400)
    x = unpacked(out, tmp_path)
    config = json.loads(plan_file.read_text())
    expected = {f"{c.experiment}/{c.id}"
                for c in plan.Matrix.of_config(config, "gpu-check-test", ["cpu"], 1).cells}
    cells = sorted((x / "runs" / "gpu-check-test").glob("*/*/summary.json"))
    assert {f"{p.parent.parent.name}/{p.parent.name}" for p in cells} == expected
    assert len(cells) == 3
    launches = set()
    for path in cells:
        summary = json.loads(path.read_text())
        assert summary["status"] == "ok", summary["reason"]
        assert summary["params"]["env"] == "gpu-check-test"
        assert summary["env"]["workflow_digest"] == plan.workflow_digest(ROOT)
        launches.add((summary["params"]["loader"], summary["env"]["launch"]))
    assert ("resident", "fork-server") in launches
    peak = json.loads((x / "runs" / "gpu-check-test" / "peak" / "cpu.json").read_text())
    assert peak["status"] == "ok"
    assert (x / "logs" / "cells.log").is_file()
    assert (out / "not_run.txt").read_text() == ""
    assert json.loads((out / "env.json").read_text())["torch"]
    assert len(list(out.iterdir())) <= 8  # what the device tool returns


@pytest.mark.slow
def test_gpu_check_lists_the_cells_the_budget_leaves_out(tmp_path, real_mnist_mirror) -> None:
    """A budget too short for any cell: no cell starts, and each is named in not_run.txt."""
    (tmp_path / "small.yaml").write_text(SMALL)
    plan_file = make_plan(tmp_path, "config/config.yaml", "config/quick.yaml",
                          tmp_path / "small.yaml")
    out = gpu_check(tmp_path, plan_file, real_mnist_mirror, budget=1)
    lines = (out / "not_run.txt").read_text().splitlines()
    config = json.loads(plan_file.read_text())
    assert len(lines) == len(plan.Matrix.of_config(config, "gpu-check-test", ["cpu"], 1))
    assert all("not started" in line for line in lines)
    assert not list(unpacked(out, tmp_path).glob("runs/*/*/*/summary.json"))
