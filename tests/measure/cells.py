"""Helpers of the cell tests (test_train, test_cellconfig, test_limits, test_warmup,
test_epochs, test_outputs): a tiny cell run in-process, and its files read back."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from mnistbench.core import schema
from mnistbench.measure import train
from mnistbench.measure.cellconfig import TrainConfig

#: A cell of a few steps on the tiny synthetic digits (about a second on a CPU).
TINY = {"max_steps": 4, "test_limit": 128, "warmup_steps": 1, "batch_size": 32,
        "sample_interval": 0.05, "quiet": True}


def run(tmp_path: Path, data: Path, name: str = "cell", **overrides) -> tuple[int, dict, Path]:
    """Run one cell in-process; its exit code, summary and folder."""
    settings = {**TINY, **overrides}
    out = tmp_path / name
    code = train.run_cell(TrainConfig(out=out, data=data, **settings))
    summary = json.loads((out / schema.SUMMARY_FILE).read_text())
    return code, summary, out


def read_csv(path: Path) -> list[dict]:
    """Rows of a CSV file as dicts."""
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def strict_json(path: Path) -> dict:
    """Parse ``path`` as strict JSON: NaN and Infinity raise ValueError."""
    def refuse(name: str):
        raise ValueError(f"{path} holds {name}, which is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)
