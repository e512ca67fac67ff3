"""One cell of the study: train the CNN on one device x precision x batch size x loader, time
every phase of every epoch, and write ``summary.json``, ``epochs.csv`` and ``resources.csv``.

This module runs a cell from its settings to its outputs (:func:`run_cell`: :func:`set_up`,
:func:`execute`, then the outputs); each job has its module beside it:

- the settings, checked up front (``cellconfig``);
- the time limit, the memory limit and ``--max-batch``'s search (``limits``);
- the untimed warm-up before the first timed epoch, reported as ``warmup_s`` and undone
  (``warmup``);
- the timed epochs, phase by phase, with device events where the device has them and no
  synchronisation inside the loop (``epochs``), with a progress line (``progress``);
- the summary's statistics and the three files, written together or not at all (``outputs``).

The device (``devices.py``): a precision the device's capability query refuses (e.g. bf16 on
an XPU without it) makes the cell ``unavailable`` with the query's answer; a bf16 cell records
whether bf16 ran natively or emulated (``params.bf16_path``).

A cell that cannot run is a result: ``unavailable`` (no such device), ``oom`` (out of memory
at this batch size) or ``failed`` (any other error, with its message; also a cell whose warm-up
and timed epochs outrun ``time_limit`` seconds, or whose training or test loss turns NaN or
infinite), each with its own exit code and a ``summary.json``. Settings refused before anything
runs are a usage error (:class:`CellRefused`, exit 2), and an ``--out`` that cannot hold the
outputs is :class:`OutputError` (exit 1): neither writes a summary.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from pathlib import Path

import torch

from mnistbench.core import cpuruntime, devices, options, schema
from mnistbench.core.clock import process_start_unix
from mnistbench.core.envvars import PROCESS_START_VAR
from mnistbench.data import mnist as data
from mnistbench.measure import backends, capture, mathrecord, sysinfo
from mnistbench.measure.cellconfig import InvalidSetting, TrainConfig, stream_seeds
from mnistbench.measure.epochs import NonFiniteLoss, steps_per_epoch_of, train_epochs
from mnistbench.measure.limits import (
    TimeLimitReached,
    check_batch_fits,
    find_max_batch,
    first_line,
    is_oom,
    time_limit,
)
from mnistbench.measure.loaders import build_loaders
from mnistbench.measure.monitor import ResourceMonitor
from mnistbench.measure.outputs import (
    CellRun,
    OutputError,
    prepare_out,
    save_collect_env,
    write_outputs,
)
from mnistbench.measure.progress import Progress
from mnistbench.measure.timing import synchronize, timing_method
from mnistbench.measure.trainer import Trainer
from mnistbench.measure.warmup import warm_up

#: The cell's interface; OutputError (mnistbench.measure.outputs) is what run_cell raises.
__all__ = ["USAGE_ERROR", "CellRefused", "OutputError", "execute", "run_cell", "set_up"]

#: The exit code of a usage error (as argparse's): the cell was refused before it ran.
USAGE_ERROR = 2


class CellRefused(Exception):
    """A cell refused before anything ran (:func:`set_up`): its settings are a usage error or
    its allocator cannot be had. ``code`` is its exit code, the message one paragraph; nothing
    is written."""

    def __init__(self, message: str, code: int = USAGE_ERROR) -> None:
        super().__init__(message)
        self.code = code


def run_cell(cfg: TrainConfig) -> int:
    """Run one cell and write its outputs; the exit code of its status (:data:`USAGE_ERROR`,
    with the reason on stderr, for a cell refused up front). Raises :class:`OutputError` when
    ``cfg.out`` cannot hold them (checked before the run, and when writing: the folder then
    holds none of the three files)."""
    try:
        run = set_up(cfg)
    except CellRefused as exc:
        print(f"mnistbench train: error: {exc}", file=sys.stderr)
        return exc.code
    execute(run)
    write_outputs(run)
    save_collect_env(run)
    if run.status != "ok":
        print(f"mnistbench train: {run.status}: {run.reason}", file=sys.stderr)
    return schema.EXIT_CODES[run.status]


def set_up(cfg: TrainConfig) -> CellRun:
    """Validate the settings, prepare ``--out``, set threads, capture the environment and
    start the resource sampler. Raises :class:`CellRefused` (nothing created) for a usage
    error, :class:`OutputError` for an ``--out`` that cannot be used."""
    started_unix = time.time()
    process_start = _process_start_unix()
    try:
        cfg.validate()
    except (devices.UnsupportedCombination, InvalidSetting) as exc:
        raise CellRefused(str(exc)) from exc
    try:
        cpuruntime.prepare(cfg.allocator)  # glibc-tuned: mallopt before the first tensor
    except cpuruntime.AllocatorError as exc:
        raise CellRefused(str(exc)) from exc
    cfg.fill_eval_batch_size()  # a whole-step capture cell's: the whole test split
    out = Path(cfg.out)
    created = prepare_out(out)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    cfg.resolved["threads"] = torch.get_num_threads()
    env_info = sysinfo.capture()
    timing = {"startup_s": time.time() - process_start}
    gpu_index = gpu_uuid = None
    if cfg.device == "cuda" and torch.cuda.is_available():
        gpu_index = 0
        gpu_uuid = str(getattr(torch.cuda.get_device_properties(0), "uuid", "")) or None
    monitor = ResourceMonitor(interval=cfg.sample_interval, gpu_index=gpu_index,
                              gpu_uuid=gpu_uuid,
                              gpu_vendor="amd" if torch.version.hip else "nvidia")
    monitor.start()
    monitor.set_stage("setup")
    return CellRun(cfg, out, created, started_unix, process_start, env_info, monitor, timing)


def execute(run: CellRun) -> None:
    """Load the data, warm up and time the epochs; every way it can end becomes the run's
    status and reason (ok, unavailable, oom, failed), never an exception."""
    cfg, monitor, timing = run.cfg, run.monitor, run.timing
    warmup_start = time.perf_counter()
    try:
        device = backends.pick_device(cfg.device)
        backends.check_precision(cfg.device, cfg.precision)  # the device's capability query
        backend = backends.backend(cfg.device)
        if cfg.precision == "bf16":
            cfg.resolved["bf16_path"] = backend.bf16_path()
        timing["timing_method"] = timing_method(cfg.device)
        seeds = stream_seeds(cfg.seed)
        torch.manual_seed(seeds["dropout"])  # the global RNG: dropout masks
        if device.type == "cuda":
            # Autotuned during warm-up when on (the default; the tips experiment turns it off).
            torch.backends.cudnn.benchmark = cfg.cudnn_benchmark
            torch.cuda.reset_peak_memory_stats(device)
        else:
            backend.reset_peak_memory(device)
        shuffle_gen = torch.Generator().manual_seed(seeds["shuffle"])
        t0 = time.perf_counter()
        loaders = build_loaders(cfg, device, shuffle_gen)
        synchronize(cfg.device)
        timing["data_load_s"] = time.perf_counter() - t0
        check_batch_fits(cfg, loaders.train_size, loaders.test_size)
        if cfg.max_batch:
            start = cfg.batch_size
            if find_max_batch(cfg, device, loaders.train_size) != start:
                loaders = build_loaders(cfg, device, shuffle_gen)  # at the size found
        run.trainer = Trainer(cfg, device, seeds["init"])
        if cfg.implementation == options.GRAPH_IMPLEMENTATION:
            run.trainer.graphs = capture.StepGraphs(
                run.trainer, loaders.train.images, loaders.train.labels, cfg.batch_size,
                steps_per_epoch_of(loaders, cfg), capture=device.type == "cuda")
        timing["phase_split"] = (schema.PHASE_SPLIT_STEPS if run.trainer.graphs is None
                                 else schema.PHASE_SPLIT_GRAPH)
        progress = Progress.for_cell(cfg.quiet)
        warmup_start = time.perf_counter()
        with time_limit(cfg.time_limit):
            monitor.set_stage("warmup")
            timing["warmup_s"] = warm_up(run.trainer, loaders, cfg)
            cfg.resolved.update(mathrecord.settings())  # what the timed epochs run with
            run.energy = train_epochs(run.trainer, loaders, cfg, monitor, progress, run.rows)
    except TimeLimitReached:
        where = ("in the warm-up" if "warmup_s" not in timing
                 else f"in timed epoch {len(run.rows) + 1} of {cfg.epochs}")
        run.status, run.reason = "failed", (
            f"time limit of {cfg.time_limit:g} s reached {where}; raise the limit (config "
            f"experiments.{cfg.experiment}.time_limit, or --time-limit) or time fewer epochs")
        timing.setdefault("warmup_s", time.perf_counter() - warmup_start)
        run.rows = []  # only complete cells have epoch rows
    except backends.DeviceUnavailable as exc:
        run.status, run.reason = "unavailable", f"{cfg.device} unavailable: {exc}"
    except (data.DataError, NonFiniteLoss, InvalidSetting) as exc:
        run.status, run.reason = "failed", str(exc)
    except Exception as exc:
        if is_oom(exc):
            run.status = "oom"
            run.reason = (f"out of memory on {cfg.device} at batch size {cfg.batch_size} "
                          f"({cfg.precision}, {cfg.loader}): {first_line(exc)}")
        else:
            run.status, run.reason = "failed", f"{type(exc).__name__}: {first_line(exc)}"
            traceback.print_exc(file=sys.stderr)
    monitor.set_stage("done")
    monitor.stop()


def _process_start_unix() -> float:
    """When this cell's process started (Unix time, s): for a cell forked by the fork server,
    when its client started (envvars.PROCESS_START_VAR), so startup_s counts the whole start."""
    with contextlib.suppress(KeyError, ValueError):
        return float(os.environ[PROCESS_START_VAR])
    return process_start_unix()
