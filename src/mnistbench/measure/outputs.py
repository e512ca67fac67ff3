"""A cell's outputs: :class:`CellRun` (what a run gathers as it goes), the summary's statistics
over the epoch rows (:func:`headline`), and ``summary.json``, ``epochs.csv`` and
``resources.csv`` written together.

Outputs appear together or not at all: the three files are staged in the cell folder and
renamed into place with ``summary.json`` last; if any cannot be written (full disk,
permissions), none is left and :class:`OutputError` says why and how to fix it.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mnistbench.core import atomic, network, schema
from mnistbench.measure import disturbance, hardware
from mnistbench.measure.cellconfig import TrainConfig
from mnistbench.measure.monitor import ResourceMonitor
from mnistbench.measure.trainer import Trainer

OUTPUT_FILES = (schema.EPOCHS_FILE, schema.RESOURCES_FILE, schema.SUMMARY_FILE)


class OutputError(Exception):
    """The cell's ``--out`` folder cannot hold its outputs (a file in the way, no permission,
    a full disk). The message is one paragraph naming the folder and the fix; the folder then
    holds none of the cell's files."""


@dataclass
class CellRun:
    """One cell's run as it goes: set up by :func:`mnistbench.measure.train.set_up`, filled by
    :func:`mnistbench.measure.train.execute`, written by :func:`write_outputs`."""

    cfg: TrainConfig
    out: Path
    created: list[Path]  # folders prepare_out made (removed again if nothing can be written)
    started_unix: float  # wall-clock stamp for the record, not used for durations
    process_start: float  # Unix s when the cell's process (or its fork-server client) began
    env_info: dict
    monitor: ResourceMonitor
    timing: dict
    status: str = "ok"
    reason: str = ""
    rows: list[dict] = field(default_factory=list)  # epochs.csv rows: complete cells only
    energy: dict = field(default_factory=dict)
    trainer: Trainer | None = None


# ---------------------------------------------------------------------------------------------
# The summary's figures
def headline(rows: list[dict], width: int = 1) -> dict:
    """The summary's results from the epoch rows (None where there are none). Medians and
    the throughput come from the epochs not disturbed; the total counts each disturbed epoch
    as the median of the others, so it stays a total of all the epochs asked for."""
    if not rows:
        return {}
    flags = [r.get("disturbed") or "" for r in rows]
    quiet = disturbance.quiet(rows, flags)
    epoch_s = [r["epoch_s"] for r in quiet]
    median = statistics.median(epoch_s)
    best = max(rows, key=lambda r: r["test_acc"])
    rates = [r["samples_per_s"] for r in quiet if r["samples_per_s"]]
    rate = statistics.median(rates) if rates else None
    per_sample = network.train_flops(width)
    return {
        "epoch_s_median": median,
        "epoch_s_mean": statistics.fmean(epoch_s),
        "train_s_median": statistics.median(r["train_s"] for r in quiet),
        "total_s": sum(r["epoch_s"] if not why else median
                       for r, why in zip(rows, flags, strict=True)),
        "disturbed_epochs": sum(1 for why in flags if why),
        **{f"{p}_s": _total(r[f"{p}_s"] for r in rows) for p in schema.PHASES},
        "samples_per_s": rate,
        "train_flops_per_sample": per_sample,
        "achieved_gflops": per_sample * rate / 1e9 if rate else None,
        "steps_per_epoch": rows[0]["steps"],
        "final_test_acc": rows[-1]["test_acc"],
        "best_test_acc": best["test_acc"],
        "best_epoch": best["epoch"],
        "final_test_loss": rows[-1]["test_loss"],
        "final_train_loss": rows[-1]["train_loss"],
    }


def _total(values) -> float | None:
    """The sum of ``values``; None when any is None (a phase not measured apart)."""
    values = list(values)
    return None if any(v is None for v in values) else sum(values)


def results_of(run: CellRun) -> dict:
    """The summary's results: headline figures of an ok cell, resource use, peak memory,
    energy."""
    results: dict[str, Any] = {k: None for k in schema.RESULT_FIELDS}
    if run.status == "ok":
        results.update(headline(run.rows, run.cfg.width))
    results.update(run.monitor.summary(stage="train"))
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB
    results["peak_rss_mb"] = max(peak_rss, results.get("peak_rss_mb") or 0.0)
    trainer = run.trainer
    if trainer is not None and trainer.device.type == "cuda":
        results["peak_cuda_mem_mb"] = torch.cuda.max_memory_allocated(trainer.device) / 2**20
    if trainer is not None and trainer.backend.is_accelerator:
        results["peak_device_mem_mb"] = trainer.backend.peak_memory_mb(trainer.device)
    results.update(run.monitor.gpu_states())  # clocks, power limit, throttle: start and end
    results["gpu_energy_j"] = run.energy.get("gpu_j")
    results["cpu_energy_j"] = run.energy.get("cpu_j")
    return results


# ---------------------------------------------------------------------------------------------
# The files, together or not at all
def prepare_out(out: Path) -> list[Path]:
    """Create ``out``, remove an earlier run's outputs (never pair a new run with an old
    run's files) and check that a file can be created there; return the folders created.
    Raises :class:`OutputError` (leaving no folder it created) when ``out`` is unusable."""
    created: list[Path] = []
    try:
        created = atomic.make_dirs(out)
        for name in OUTPUT_FILES:
            (out / name).unlink(missing_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-test.", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        atomic.remove_dirs(created)
        raise OutputError(atomic.folder_error(out, exc, "the cell's outputs", "--out")
                          + " Nothing was run or written.") from None
    return created


def write_outputs(run: CellRun) -> None:
    """Write epochs.csv, resources.csv and summary.json together (summary.json last: its
    presence means the cell is complete). Raises :class:`OutputError` when they cannot be
    written: the folder then holds none of them."""
    cfg, timing, monitor = run.cfg, run.timing, run.monitor
    results = results_of(run)

    def write_summary(path: Path) -> None:
        # Built after the CSVs are staged, so ended_at covers writing them.
        ended_unix = time.time()
        timed = sum(r["epoch_s"] for r in run.rows)
        timing.update({
            "started_at": _iso(run.started_unix),
            "ended_at": _iso(ended_unix),
            "start_unix": run.started_unix,
            "end_unix": ended_unix,
            "timed_s": timed,
            "overhead_s": (ended_unix - run.process_start) - timed - timing.get("warmup_s", 0.0),
        })
        adam = getattr(run.trainer, "adam", None)
        summary = {
            "schema_version": schema.SCHEMA_VERSION,
            "status": run.status,
            "reason": run.reason,
            "params": cfg.params(),
            "env": run.env_info,
            # A NaN or infinite measurement is no measurement: null in strict JSON.
            "timing": {k: _finite(timing.get(k)) for k in schema.TIMING_FIELDS},
            "results": {k: _finite(results.get(k)) for k in schema.RESULT_FIELDS},
            "sources": {
                "gpu_energy": getattr(monitor, "gpu_energy_source", None),
                "cpu_energy": getattr(monitor, "cpu_energy_source", None),
                # Which Adam ran (optim.py): torch._fused_adam_, or torch.optim.Adam(fused=True)
                # with the reason the private kernel failed its start-up check.
                "adam": getattr(adam, "name", None),
                "adam_fallback": getattr(adam, "fallback_reason", None),
            },
        }
        atomic.write_json(path, summary)

    try:
        atomic.write_together([
            (run.out / schema.EPOCHS_FILE,
             lambda path: atomic.write_csv(path, list(schema.EPOCH_COLUMNS), run.rows)),
            (run.out / schema.RESOURCES_FILE, monitor.write_csv),
            (run.out / schema.SUMMARY_FILE, write_summary),
        ])
    except OSError as exc:
        atomic.remove_dirs(run.created)
        raise OutputError(
            atomic.folder_error(run.out, exc, "the cell's outputs", "--out")
            + f" The folder holds none of {', '.join(OUTPUT_FILES)} (a cell's outputs appear "
            f"together or not at all), so this run's result ({run.status}) is lost: run the "
            "cell again once it can be written.") from None


def save_collect_env(run: CellRun) -> Path | None:
    """Once per environment, torch's collect_env report beside its runs
    (``RUNS/{env}/collect_env.txt``), written after the cell's outputs (so outside its
    timing) when the cell lives at ``RUNS/{env}/{experiment}/{cell}`` and the file is not
    there yet; the path written, or None. Never fails the cell: a report that cannot be made
    or written is a warning on stderr."""
    params = run.cfg.params()
    out = Path(run.out)
    if (out.name, out.parent.name, out.parent.parent.name) != (
            params["cell"], params["experiment"], params["env"]):
        return None
    path = out.parent.parent / hardware.COLLECT_ENV_FILE
    if path.exists():
        return None
    try:
        return hardware.save_collect_env(path)
    except Exception as exc:  # collect_env runs tools (pip, nvidia-smi): never fail a cell
        print(f"mnistbench train: warning: could not save {path}: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return None


def _finite(value):
    """``value``, or None for a NaN or infinite float (strict JSON has neither)."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _iso(unix: float) -> str:
    return dt.datetime.fromtimestamp(unix, tz=dt.UTC).isoformat(timespec="milliseconds")
