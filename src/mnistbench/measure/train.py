"""One cell of the study: train the CNN on one device x precision x batch size x loader, time
every phase of every epoch, and write ``summary.json``, ``epochs.csv`` and ``resources.csv``.

Measurement policy (see the README's methodology):

- Warm-up: before the first timed epoch, ``warmup_steps`` full training steps, one step at the
  epoch's last (partial) batch size and one evaluation batch of each shape run untimed, so
  one-time costs (cuDNN autotuning, ``torch.compile``, first-touch allocation) stay out of the
  timed epochs; their duration is reported as ``warmup_s``. The model, the optimizer and every
  random generator are then restored, so the trajectory the seed determines is unchanged.
- Timed epochs: phases are split by consecutive marks (``timing.py``): CUDA events on CUDA,
  with no synchronisation inside the loop (each step's loss is kept on the device, all read
  once per epoch), the backend's own events on xpu and mps, synchronise + host clock on a
  backend without events; ``time.perf_counter`` on CPU (``timing.timing_method`` says which).
  Each epoch is data -> forward -> backward -> optimizer per step, then evaluation on the
  test set.
- The device (``devices.py``): a precision the device's capability query refuses (e.g. bf16
  on an XPU without it) makes the cell ``unavailable`` with the query's answer; a bf16 cell
  records whether bf16 ran natively or emulated (``params.bf16_path``).
- A cell that cannot run is a result: ``unavailable`` (no such device), ``oom`` (out of memory
  at this batch size) or ``failed`` (any other error, with its message; also a cell whose
  warm-up and timed epochs outrun ``time_limit`` seconds), each with its own exit code and a
  ``summary.json``. A cell whose training or test loss turns NaN or infinite (diverged) is
  ``failed``, its reason naming the epoch and step (checked when the epoch's losses are read,
  so the loop gains no synchronisation).
- Outputs appear together or not at all: the three files are staged in the cell folder and
  renamed into place with ``summary.json`` last; if any cannot be written (full disk,
  permissions), none is left and :class:`OutputError` says why and how to fix it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
import resource
import signal
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mnistbench.core import atomic, cpuruntime, devices, network, options, schema, study
from mnistbench.core.clock import process_start_unix
from mnistbench.core.envvars import PROCESS_START_VAR
from mnistbench.data import mnist as data
from mnistbench.measure import backends, capture, disturbance, hardware, mathrecord, sysinfo
from mnistbench.measure.loaders import Loaders, build_loaders
from mnistbench.measure.monitor import ResourceMonitor
from mnistbench.measure.timing import phase_timer, synchronize, timing_method
from mnistbench.measure.trainer import Trainer, _NullTimer

COMPILE_MODES = ("", "default", "reduce-overhead", "max-autotune")
#: The phases of a step a whole-step graph does not split (measure.capture): empty columns.
GRAPH_UNSPLIT = ("forward", "backward", "optimizer")
OUTPUT_FILES = (schema.EPOCHS_FILE, schema.RESOURCES_FILE, schema.SUMMARY_FILE)


class InvalidSetting(ValueError):
    """A setting of :class:`TrainConfig` outside its allowed range (e.g. a NaN or infinite
    learning rate)."""


class OutputError(Exception):
    """The cell's ``--out`` folder cannot hold its outputs (a file in the way, no permission,
    a full disk). The message is one paragraph naming the folder and the fix; the folder then
    holds none of the cell's files."""


class NonFiniteLoss(Exception):
    """A training or test loss turned NaN or infinite: training diverged."""


@dataclass
class TrainConfig:
    """Every setting of a cell; field docs are in :data:`mnistbench.core.schema.PARAM_FIELDS`."""

    out: Path
    data: Path = Path("resources/mnist")
    device: str = "cpu"
    precision: str = "fp32"
    batch_size: int = 128
    loader: str = "resident"
    epochs: int = 1
    lr: float = 1e-3
    seed: int = 0
    threads: int = 0  # 0: torch's default
    allocator: str = "auto"  # cpuruntime.ALLOCATORS; what ran is env.allocator_loaded
    workers: int = 0
    pin_memory: bool = False
    compile: str = ""  # one of COMPILE_MODES; "" is eager
    implementation: str = "tuned"  # options.IMPLEMENTATIONS (stock: the blog's code as written)
    width: int = 1  # channel width multiplier of the convolutions (core.network)
    cudnn_benchmark: bool = True  # torch.backends.cudnn.benchmark on CUDA
    max_batch: bool = False  # find the largest batch size that fits (find_max_batch)
    tip: str = ""  # the tips experiment's lever (recorded)
    warmup_steps: int = 3
    max_steps: int = 0  # 0: full epochs
    train_limit: int = 0  # 0: all 60000
    test_limit: int = 0  # 0: all 10000
    eval_batch_size: int = 0  # 0: the training batch size
    sample_interval: float = 0.5
    time_limit: float = 0.0  # s of warm-up + timed epochs; 0: no limit
    env: str | None = None
    experiment: str = "adhoc"
    cell: str | None = None
    repeat: int = 0
    quiet: bool = False
    # Filled in while running: values resolved from the machine.
    resolved: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_namespace(cls, args) -> TrainConfig:
        """Build from the ``mnistbench train`` arguments."""
        names = {f for f in cls.__dataclass_fields__ if f != "resolved"}
        return cls(**{k: v for k, v in vars(args).items() if k in names})

    def validate(self) -> None:
        """Reject unsupported combinations up front, naming the allowed values."""
        devices.check_combination(self.device, self.precision, self.loader)
        if self.compile not in COMPILE_MODES:
            raise devices.UnsupportedCombination(
                f"unknown compile mode {self.compile!r}; allowed: "
                f"{', '.join(m or '(empty: eager)' for m in COMPILE_MODES)}")
        for name, zero_ok in (("lr", False), ("sample_interval", False), ("time_limit", True)):
            value = getattr(self, name)
            if not (math.isfinite(value) and (value > 0 or (zero_ok and value == 0))):
                raise InvalidSetting(
                    f"{name} must be a finite number {'0 or more' if zero_ok else 'above 0'}, "
                    f"got {value!r}; pass --{name.replace('_', '-')} such a number")
        for name, total, what in (("train_limit", options.MNIST_TRAIN_SAMPLES, "training"),
                                  ("test_limit", options.MNIST_TEST_SAMPLES, "test")):
            value = getattr(self, name)
            if not 0 <= value <= total:
                raise InvalidSetting(
                    f"--{name.replace('_', '-')} {value}: MNIST has {total} {what} samples; "
                    f"pass 0 (all) to {total}")
        problem = options.batch_problem(self.batch_size, self.train_limit, self.max_batch)
        if problem:
            raise InvalidSetting(problem)
        if self.implementation == options.GRAPH_IMPLEMENTATION:
            self._check_graph()

    def _check_graph(self) -> None:
        """What the whole-step capture cannot run with (mnistbench.measure.capture)."""
        name = options.GRAPH_IMPLEMENTATION
        for problem, fix in (
                (self.loader != "resident", "--loader resident (the graph gathers its batches "
                 "from the resident split)"),
                (self.precision == "fp16", "--precision fp32, tf32 or bf16 (the GradScaler's "
                 "bookkeeping is not captured)"),
                (bool(self.compile), "no --compile (the graph is the compilation)"),
                (self.max_batch, "no --max-batch (the graphs are captured at one size)")):
            if problem:
                raise devices.UnsupportedCombination(
                    f"--implementation {name} needs {fix}")

    def params(self) -> dict:
        """The resolved parameters, keyed as :data:`schema.PARAM_FIELDS`."""
        values = asdict(self)
        values.update(self.resolved)
        values["threads_asked"] = self.threads  # values["threads"]: what the cell got
        values["loader_threads"] = (0 if self.loader != "dataloader" else self.workers or 1)
        values["env"] = self.env or study.environment_name()
        values["cell"] = self.cell or Path(self.out).name
        values["cuda_graphs"] = self.device == "cuda" and (
            self.compile == "reduce-overhead"
            or self.implementation == options.GRAPH_IMPLEMENTATION)
        values.setdefault("bf16_path", "")  # resolved once the device is up (bf16 cells)
        if self.loader != "dataloader":  # no DataLoader: its flags do not apply (null)
            values.update(dict.fromkeys(options.DATALOADER_ONLY))
        return {k: _jsonable(values.get(k)) for k in schema.PARAM_FIELDS}


def stream_seeds(seed: int) -> dict[str, int]:
    """Independent seeds for initialisation, shuffling and dropout, derived from one ``seed``
    (numpy's SeedSequence), so that no random stream is a replay of another (seeding all
    three with ``seed`` would draw the first dropout masks from the very numbers that drew the
    initial weights)."""
    children = np.random.SeedSequence(seed).spawn(3)
    values = [int(c.generate_state(1, np.uint64)[0] >> 1) for c in children]
    return dict(zip(("init", "shuffle", "dropout"), values, strict=True))


def _jsonable(value):
    return str(value) if isinstance(value, Path) else value


class TimeLimitReached(BaseException):
    """The cell's ``time_limit`` passed during its warm-up or timed epochs. A BaseException
    (like KeyboardInterrupt), so that no ``except Exception`` on the way (e.g. the resource
    sampler's) can swallow it."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise :class:`TimeLimitReached` in the main thread once ``seconds`` have passed inside
    the block (0: no limit). A real-time interval timer (SIGALRM) costs nothing per step; the
    exception lands at the next Python bytecode, i.e. after the running kernel returns."""
    if not seconds:
        yield
        return

    def on_alarm(signum, frame):
        raise TimeLimitReached

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


#: Share of the memory available at the start that a CPU search may plan to use.
CPU_MEMORY_SHARE = 0.5


def find_max_batch(cfg: TrainConfig, device: torch.device, train_size: int) -> int:
    """The largest batch size that fits (--max-batch), found by trying: doubling from
    ``cfg.batch_size``, one training step each on random data, until the device runs out of
    memory (an accelerator), the memory a CPU step would need passes
    :data:`CPU_MEMORY_SHARE` of what was available, or a cap (options.CPU_MAX_BATCH_CAP on a
    CPU, options.MAX_BATCH_CAP elsewhere, and ``train_size``). Sets ``cfg.batch_size`` to it
    and scales ``cfg.max_steps`` so the cell times the same number of samples; records the
    search in ``cfg.resolved`` and returns the size."""
    import psutil

    from mnistbench.core.options import CPU_MAX_BATCH_CAP, MAX_BATCH_CAP

    start = cfg.batch_size
    cap = min(CPU_MAX_BATCH_CAP if device.type == "cpu" else MAX_BATCH_CAP, train_size)
    budget = CPU_MEMORY_SHARE * psutil.virtual_memory().available
    process = psutil.Process()
    best, size, per_sample, stop = start, start, None, "the cap"
    while size <= cap:
        if device.type == "cpu" and per_sample is not None and per_sample * size > budget:
            stop = "the CPU memory budget"
            break
        probe = Trainer(cfg, device, init_seed=0)
        x = torch.randn(size, 1, 28, 28, device=device)
        y = torch.randint(0, 10, (size,), device=device)
        before = process.memory_info().rss
        try:
            probe.step(x, y, _NullTimer())
            synchronize(cfg.device)
        except Exception as exc:
            if not _is_oom(exc):
                raise
            stop = "out of memory"
            break
        finally:
            del probe, x, y
            if device.type == "cuda":
                torch.cuda.empty_cache()
        used = max(process.memory_info().rss, resource.getrusage(
            resource.RUSAGE_SELF).ru_maxrss * 1024) - before
        per_sample = max(used, 1) / size
        best, size = size, size * 2
    if cfg.max_steps:
        cfg.max_steps = max(1, math.ceil(cfg.max_steps * start / best))
    cfg.batch_size = best
    cfg.resolved["batch_size"] = best
    cfg.resolved["max_batch_stop"] = stop
    return best


def warm_up(trainer: Trainer, loaders: Loaders, cfg: TrainConfig) -> float:
    """Run the untimed warm-up (see module docstring) and restore the trajectory; seconds.
    A whole-step capture cell (``trainer.graphs``) also runs its step eagerly for each shape
    and, after the restore, captures its graphs: both count as warm-up, whatever
    ``warmup_steps`` says (a graph cannot run uncaptured)."""
    graphs = trainer.graphs
    if cfg.warmup_steps == 0 and graphs is None:
        return 0.0
    start = time.perf_counter()
    state = trainer.snapshot()
    null = _NullTimer()
    full = min(cfg.batch_size, loaders.train_size)
    shapes = [full] * cfg.warmup_steps
    tail = loaders.train_size % cfg.batch_size
    if tail and not cfg.max_steps:
        shapes.append(tail)
    for size in shapes:
        trainer.step(*loaders.sample_batch("train", size), null)
    if trainer.device.type == "cuda" and shapes:
        cfg.resolved["math_conv_kernels"] = _profiled_kernels(
            lambda: trainer.step(*loaders.sample_batch("train", full), null))
    eval_shapes = {min(cfg.eval_batch_size, loaders.test_size)}
    if loaders.test_size % cfg.eval_batch_size:
        eval_shapes.add(loaders.test_size % cfg.eval_batch_size)
    trainer.evaluate(loaders.sample_batch("test", s) for s in sorted(eval_shapes))
    if graphs is not None:
        graphs.warm_up()
    synchronize(cfg.device)
    trainer.restore(state)
    if graphs is not None:
        graphs.capture_graphs()
    synchronize(cfg.device)
    return time.perf_counter() - start


def _profiled_kernels(step) -> str:
    """The convolution and matmul kernels of one warm-up ``step`` (mathrecord); a profiler
    that fails is said in the field, never a failed cell."""
    try:
        return mathrecord.profile_kernels(step)
    except Exception as exc:  # the profiler is a recorder here, not the measurement
        return f"not recorded: the profiler failed: {type(exc).__name__}: {_first_line(exc)}"


PROGRESS_LOG_EVERY_S = 60.0  # s between two progress lines off a terminal


class Progress:
    """A one-line progress bar on stderr, redrawn at most every 0.25 s; silent when off. Off a
    terminal (``log_every_s``: the workflow's cell log, a container's or a SLURM job's output)
    a plain line at most every ``log_every_s`` instead, so a long cell shows it is moving."""

    def __init__(self, enabled: bool, log_every_s: float = 0.0) -> None:
        self.enabled = enabled
        self.log_every_s = log_every_s
        self._last = 0.0
        self._logged = time.perf_counter()

    def update(self, epoch: int, epochs: int, step: int, steps: int, start: float,
               force: bool = False) -> None:
        if self.log_every_s and not self.enabled:
            now = time.perf_counter()
            if now - self._logged >= self.log_every_s:
                self._logged = now
                sys.stderr.write(f"progress: epoch {epoch}/{epochs}, {step}/{steps} steps, "
                                 f"{now - start:.0f} s into the epoch\n")
                sys.stderr.flush()
            return
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and now - self._last < 0.25:
            return
        self._last = now
        width = 30
        filled = int(width * step / max(steps, 1))
        bar = "#" * filled + "." * (width - filled)
        sys.stderr.write(f"\repoch {epoch}/{epochs} [{bar}] {step}/{steps} steps "
                         f"{now - start:6.1f} s")
        if force:
            sys.stderr.write("\n")
        sys.stderr.flush()


def steps_per_epoch_of(loaders: Loaders, cfg: TrainConfig) -> int:
    """Training steps in one timed epoch: the loader's, capped by ``max_steps``."""
    steps = len(loaders.train)
    return min(steps, cfg.max_steps) if cfg.max_steps else steps


def train_epochs(trainer: Trainer, loaders: Loaders, cfg: TrainConfig, monitor,
                 progress: Progress, rows: list[dict]) -> dict:
    """The timed epochs: appends one row of ``epochs.csv`` to ``rows`` per finished epoch;
    returns the energy used over them. A whole-step capture cell (``trainer.graphs``) times
    its epoch as three phases: data (the epoch's shuffle order drawn and copied to the
    device), the steps (one replay each: forward, backward and optimizer inside, not split)
    and eval; its forward, backward and optimizer columns stay empty."""
    dev = cfg.device
    timer = phase_timer(dev)
    steps_per_epoch = steps_per_epoch_of(loaders, cfg)
    graphs = trainer.graphs
    monitor.set_stage("train")
    energy_start = monitor.energy()
    monitor.record_gpu_state("start")
    for epoch in range(1, cfg.epochs + 1):
        trainer.begin_epoch(steps_per_epoch)
        synchronize(dev)
        wall_start = time.perf_counter()
        timer.start()
        steps = samples = 0
        if graphs is not None:
            graphs.begin_epoch(loaders.train.epoch_order())
            timer.mark("data")
            for step in range(steps_per_epoch):
                graphs.replay(step)
            timer.mark(capture.PHASE_SPLIT_GRAPH)
            steps = steps_per_epoch
            samples = sum(graphs.size_of(i) for i in range(steps))
        else:
            for x, y in loaders.train:
                timer.mark("data")
                trainer.step(x, y, timer)
                steps += 1
                samples += len(y)
                progress.update(epoch, cfg.epochs, steps, steps_per_epoch, wall_start)
                if steps == steps_per_epoch:
                    break
        loss, correct, count = trainer.evaluate(loaders.test)
        timer.mark("eval")
        phases, _span = timer.totals()  # synchronises once on CUDA
        wall = time.perf_counter() - wall_start
        if graphs is not None:
            losses, sizes = graphs.take_losses(steps)
        else:
            losses, sizes = trainer.take_losses()
        test_loss = loss.item() / max(count, 1)
        check_losses(losses, test_loss, epoch, cfg)
        train_loss = math.fsum(v * n for v, n in zip(losses, sizes, strict=True)) / max(samples, 1)
        progress.update(epoch, cfg.epochs, steps, steps_per_epoch, wall_start, force=True)
        train_s = sum(v for p, v in phases.items() if p != "eval")
        # Phases a graph holds together are not measured apart: empty, never invented.
        unsplit: set[str] = set(GRAPH_UNSPLIT) if graphs is not None else set()
        # What else used the machine during this epoch (read outside the timed span).
        others = monitor.others_load_between(wall_start, wall_start + wall)
        rows.append({
            "epoch": epoch,
            "steps": steps,
            "samples": samples,
            **{f"{p}_s": None if p in unsplit else phases.get(p, 0.0) for p in schema.PHASES},
            "train_s": train_s,
            "epoch_s": wall,
            "train_loss": train_loss,
            "test_loss": test_loss,
            "test_acc": 100.0 * correct.item() / max(count, 1),
            "samples_per_s": samples / train_s if train_s > 0 else None,
            "others_load_pct": None if others is None else round(others, 1),
            "disturbed": "",
        })
    for row, why in zip(rows, disturbance.flags([r["epoch_s"] for r in rows],
                                                [r["others_load_pct"] for r in rows]),
                        strict=True):
        row["disturbed"] = why
    energy_end = monitor.energy()
    monitor.record_gpu_state("end")
    energy = {
        k: (energy_end[k] - energy_start[k])
        if energy_end.get(k) is not None and energy_start.get(k) is not None else None
        for k in ("gpu_j", "cpu_j")
    }
    return energy


def check_batch_fits(cfg: TrainConfig, train_size: int, test_size: int) -> None:
    """Against the data as loaded (a data folder may hold fewer samples than MNIST): raise
    :class:`InvalidSetting` when a step could not hold ``cfg.batch_size`` samples (the cell
    would record a batch size no step had); record the evaluation's batch size as what a
    batch holds at most (``eval_batch_size`` above the test samples is the test set)."""
    if cfg.batch_size > train_size and not cfg.max_batch:
        raise InvalidSetting(
            f"batch size {cfg.batch_size} is larger than the {train_size} training samples in "
            f"{cfg.data}: each step would hold {train_size} samples while the cell recorded "
            f"{cfg.batch_size}; pass --batch-size {train_size} or less")
    cfg.eval_batch_size = min(cfg.eval_batch_size, max(test_size, 1))


def check_losses(losses: list[float], test_loss: float, epoch: int, cfg: TrainConfig) -> None:
    """Raise :class:`NonFiniteLoss` naming the epoch and the first step whose training loss is
    NaN or infinite (or the epoch's evaluation, for the test loss)."""
    bad = next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)
    if bad is not None:
        where = f"the training loss became {losses[bad]} in epoch {epoch} at step {bad + 1}"
    elif not math.isfinite(test_loss):
        where = (f"the test loss became {test_loss} in the evaluation of epoch {epoch} "
                 f"(after step {len(losses)})")
    else:
        return
    raise NonFiniteLoss(
        f"{where} (lr {cfg.lr:g}, {cfg.precision}, batch size {cfg.batch_size}): training "
        f"diverged. Lower the learning rate (--lr, or config experiments.{cfg.experiment}.lr) "
        "or use another precision")


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


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return True
    text = str(exc)
    return "out of memory" in text.lower() or "can't allocate memory" in text


def _process_start_unix() -> float:
    """When this cell's process started (Unix time, s): for a cell forked by the fork server,
    when its client started (envvars.PROCESS_START_VAR), so startup_s counts the whole start."""
    with contextlib.suppress(KeyError, ValueError):
        return float(os.environ[PROCESS_START_VAR])
    return process_start_unix()


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


@dataclass
class CellRun:
    """One cell's run as it goes: set up by :func:`set_up`, filled by :func:`execute`, written
    by :func:`write_outputs`."""

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


def set_up(cfg: TrainConfig) -> CellRun | int:
    """Validate the settings (exit code 2 on a usage error), prepare ``--out``, set threads,
    capture the environment and start the resource sampler."""
    started_unix = time.time()
    process_start = _process_start_unix()
    try:
        cfg.validate()
    except (devices.UnsupportedCombination, InvalidSetting) as exc:
        print(f"mnistbench train: error: {exc}", file=sys.stderr)
        return 2
    try:
        cpuruntime.prepare(cfg.allocator)  # glibc-tuned: mallopt before the first tensor
    except cpuruntime.AllocatorError as exc:
        print(f"mnistbench train: error: {exc}", file=sys.stderr)
        return 2
    # The whole-step capture evaluates in large batches: the whole test split at once.
    graphed = cfg.implementation == options.GRAPH_IMPLEMENTATION
    cfg.eval_batch_size = cfg.eval_batch_size or (
        options.MNIST_TEST_SAMPLES if graphed else cfg.batch_size)
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
        timing["phase_split"] = (capture.PHASE_SPLIT_STEPS if run.trainer.graphs is None
                                 else capture.PHASE_SPLIT_GRAPH)
        terminal = sys.stderr.isatty()  # off one, a line a minute even with --quiet
        progress = Progress(enabled=not cfg.quiet and terminal,
                            log_every_s=0.0 if terminal else PROGRESS_LOG_EVERY_S)
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
        if _is_oom(exc):
            run.status = "oom"
            run.reason = (f"out of memory on {cfg.device} at batch size {cfg.batch_size} "
                          f"({cfg.precision}, {cfg.loader}): {_first_line(exc)}")
        else:
            run.status, run.reason = "failed", f"{type(exc).__name__}: {_first_line(exc)}"
            traceback.print_exc(file=sys.stderr)
    monitor.set_stage("done")
    monitor.stop()


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


def run_cell(cfg: TrainConfig) -> int:
    """Run one cell and write its outputs; the exit code of its status. Raises
    :class:`OutputError` when ``cfg.out`` cannot hold them (checked before the run, and when
    writing: the folder then holds none of the three files)."""
    run = set_up(cfg)
    if isinstance(run, int):
        return run
    execute(run)
    write_outputs(run)
    save_collect_env(run)
    if run.status != "ok":
        print(f"mnistbench train: {run.status}: {run.reason}", file=sys.stderr)
    return schema.EXIT_CODES[run.status]


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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _iso(unix: float) -> str:
    return dt.datetime.fromtimestamp(unix, tz=dt.UTC).isoformat(timespec="milliseconds")

