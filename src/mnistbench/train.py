"""One cell of the study: train the CNN on one device x precision x batch size x loader, time
every phase of every epoch, and write ``summary.json``, ``epochs.csv`` and ``resources.csv``.

Measurement policy (see the README's methodology):

- Warm-up: before the first timed epoch, ``warmup_steps`` full training steps, one step at the
  epoch's last (partial) batch size and one evaluation batch of each shape run untimed, so
  one-time costs (cuDNN autotuning, ``torch.compile``, first-touch allocation) stay out of the
  timed epochs; their duration is reported as ``warmup_s``. The model, the optimizer and every
  random generator are then restored, so the trajectory the seed determines is unchanged.
- Timed epochs: phases are split by consecutive marks (``timing.py``): CUDA events on CUDA,
  with no synchronisation inside the loop (losses accumulate on the device, read once per
  epoch); ``time.perf_counter`` on CPU. Each epoch is data -> forward -> backward -> optimizer
  per step, then evaluation on the test set.
- A cell that cannot run is a result: ``unavailable`` (no such device), ``oom`` (out of memory
  at this batch size) or ``failed`` (any other error, with its message; also a cell whose
  warm-up and timed epochs outrun ``time_limit`` seconds), each with its own exit code and a
  ``summary.json``.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import os
import resource
import signal
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from . import atomic, data, devices, model, schema, sysinfo
from .forkserver import START_ENV
from .monitor import ResourceMonitor
from .optim import FusedAdam
from .timing import phase_timer, process_start_unix, synchronize

#: MNIST normalisation of the classic pipeline (torchvision's Normalize((0.1307,), (0.3081,))).
MNIST_MEAN = 0.1307
MNIST_STD = 0.3081
COMPILE_MODES = ("", "default", "reduce-overhead", "max-autotune")


@dataclass
class TrainConfig:
    """Every setting of a cell; field docs are in :data:`mnistbench.schema.PARAM_FIELDS`."""

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
    workers: int = 0
    pin_memory: bool = False
    compile: str = ""  # one of COMPILE_MODES; "" is eager
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

    def params(self) -> dict:
        """The resolved parameters, keyed as :data:`schema.PARAM_FIELDS`."""
        values = asdict(self)
        values.update(self.resolved)
        values["env"] = self.env or sysinfo.default_env_name()
        values["cell"] = self.cell or Path(self.out).name
        values["cuda_graphs"] = self.compile == "reduce-overhead" and self.device == "cuda"
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


class MnistDataset(torch.utils.data.Dataset):
    """The classic per-sample pipeline, as torchvision's MNIST + ToTensor + Normalize does it:
    each item becomes a PIL image, then a float tensor in [0, 1], then normalised."""

    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        from PIL import Image  # Pillow, as torchvision's MNIST uses

        self._image = Image
        self.images = images
        self.labels = labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        img = self._image.fromarray(self.images[index])  # mode L, as torchvision's MNIST
        x = torch.from_numpy(np.array(img, dtype=np.uint8, copy=True)).view(1, 28, 28)
        x = x.float().div(255)  # ToTensor
        x = x.sub_(MNIST_MEAN).div_(MNIST_STD)  # Normalize
        return x, int(self.labels[index])


class ResidentLoader:
    """The whole normalised split as one tensor on the training device; batches are shuffled
    index selections. The permutation comes from a CPU generator, so CPU and GPU cells with
    the same seed see the same batches."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, batch_size: int, *,
                 shuffle: bool, generator: torch.Generator | None) -> None:
        self.images, self.labels = images, labels
        self.batch_size, self.shuffle, self.generator = batch_size, shuffle, generator

    def __len__(self) -> int:
        return -(-len(self.labels) // self.batch_size)

    def __iter__(self):
        n = len(self.labels)
        if self.shuffle:
            order = torch.randperm(n, generator=self.generator).to(self.images.device)
            for i in range(0, n, self.batch_size):
                idx = order[i : i + self.batch_size]
                yield self.images.index_select(0, idx), self.labels.index_select(0, idx)
        else:
            for i in range(0, n, self.batch_size):
                yield self.images[i : i + self.batch_size], self.labels[i : i + self.batch_size]


def normalised_tensor(images: np.ndarray, device: torch.device) -> torch.Tensor:
    """uint8 (N, 28, 28) -> float32 (N, 1, 28, 28) normalised like the classic pipeline."""
    x = torch.from_numpy(images).to(device).unsqueeze(1).float()
    return x.div_(255).sub_(MNIST_MEAN).div_(MNIST_STD)


@dataclass
class Loaders:
    """The training and test loaders of a cell, and a way to get warm-up batches from them
    without touching the shuffling generator."""

    train: object
    test: object
    train_size: int
    test_size: int
    sample_batch: object  # (split, size) -> (x, y) on the device, not shuffled


def build_loaders(cfg: TrainConfig, device: torch.device, shuffle_gen: torch.Generator):
    """Read the verified IDX files and build both loaders of ``cfg.loader``."""
    train_x, train_y = data.load_split(cfg.data, "train")
    test_x, test_y = data.load_split(cfg.data, "test")
    if cfg.train_limit:
        train_x, train_y = train_x[: cfg.train_limit], train_y[: cfg.train_limit]
    if cfg.test_limit:
        test_x, test_y = test_x[: cfg.test_limit], test_y[: cfg.test_limit]
    splits = {"train": (train_x, train_y), "test": (test_x, test_y)}

    if cfg.loader == "resident":
        tensors = {
            name: (normalised_tensor(x, device), torch.from_numpy(y.astype(np.int64)).to(device))
            for name, (x, y) in splits.items()
        }
        train = ResidentLoader(*tensors["train"], cfg.batch_size, shuffle=True,
                               generator=shuffle_gen)
        test = ResidentLoader(*tensors["test"], cfg.eval_batch_size, shuffle=False,
                              generator=None)

        def sample_batch(split: str, size: int):
            x, y = tensors[split]
            return x[:size], y[:size]
    else:
        datasets = {name: MnistDataset(x, y) for name, (x, y) in splits.items()}
        non_blocking = cfg.pin_memory and device.type == "cuda"

        def make(ds, batch_size, shuffle):
            # A fresh keyword set per loader: settings never leak between them.
            return torch.utils.data.DataLoader(
                ds, batch_size=batch_size, shuffle=shuffle, num_workers=cfg.workers,
                pin_memory=cfg.pin_memory, generator=shuffle_gen if shuffle else None)

        train = make(datasets["train"], cfg.batch_size, True)
        test = make(datasets["test"], cfg.eval_batch_size, False)
        collate = torch.utils.data.default_collate

        def sample_batch(split: str, size: int):
            ds = datasets[split]
            x, y = collate([ds[i] for i in range(min(size, len(ds)))])
            return x.to(device, non_blocking=non_blocking), y.to(device, non_blocking=non_blocking)

        train = _DeviceLoader(train, device, non_blocking)
        test = _DeviceLoader(test, device, non_blocking)
    return Loaders(train, test, len(train_y), len(test_y), sample_batch)


class _DeviceLoader:
    """Moves a DataLoader's batches to the device (the copy is part of the data phase)."""

    def __init__(self, loader, device: torch.device, non_blocking: bool) -> None:
        self.loader, self.device, self.non_blocking = loader, device, non_blocking

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        for x, y in self.loader:
            yield (x.to(self.device, non_blocking=self.non_blocking),
                   y.to(self.device, non_blocking=self.non_blocking))


class _NullTimer:
    def mark(self, phase: str) -> None:
        pass


class Trainer:
    """The model, optimizer and precision policy of a cell, and its training and eval steps."""

    def __init__(self, cfg: TrainConfig, device: torch.device, init_seed: int) -> None:
        self.cfg, self.device = cfg, device
        self.policy = devices.precision_policy(cfg.precision)
        self.policy.apply_backend_flags()
        self.base = model.build_model(init_seed).to(device, memory_format=torch.channels_last)
        self.net = self.base
        if cfg.compile:
            self.net = torch.compile(self.base, mode=cfg.compile)
        # Fused Adam: one kernel (CUDA) or one pass (CPU) over all parameters; the same
        # update as torch.optim.Adam(fused=True) without its start-up cost (optim.py).
        self.optimizer = FusedAdam(self.base.parameters(), lr=cfg.lr)
        self.scaler = torch.amp.GradScaler(device.type) if self.policy.grad_scaler else None
        self.loss_sum = torch.zeros((), device=device)

    def step(self, x: torch.Tensor, y: torch.Tensor, timer) -> None:
        """One training step; marks forward, backward and optimizer on ``timer``."""
        with self.policy.autocast(self.device.type):
            loss = F.cross_entropy(self.net(x), y)
        timer.mark("forward")
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            timer.mark("backward")
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            timer.mark("backward")
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        timer.mark("optimizer")
        self.loss_sum += loss.detach().float() * len(y)

    @torch.no_grad()
    def evaluate(self, batches) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Summed test loss and correct count (device tensors, not yet read) and sample count."""
        self.net.eval()
        loss = torch.zeros((), device=self.device)
        correct = torch.zeros((), dtype=torch.int64, device=self.device)
        count = 0
        for x, y in batches:
            with self.policy.autocast(self.device.type):
                logits = self.net(x)
            loss += F.cross_entropy(logits.float(), y, reduction="sum")
            correct += (logits.argmax(1) == y).sum()
            count += len(y)
        self.net.train()
        return loss, correct, count

    def snapshot(self) -> dict:
        """Model, optimizer and RNG states, to undo the warm-up."""
        state = {
            "model": copy.deepcopy(self.base.state_dict()),
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),
            "cpu_rng": torch.get_rng_state(),
        }
        if self.device.type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        return state

    def restore(self, state: dict) -> None:
        """Put back what :meth:`snapshot` saved; the loss accumulator and scaler start anew."""
        self.base.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["cpu_rng"])
        if "cuda_rng" in state:
            torch.cuda.set_rng_state(state["cuda_rng"], self.device)
        if self.scaler is not None:
            self.scaler = torch.amp.GradScaler(self.device.type)
        self.loss_sum.zero_()


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


def warm_up(trainer: Trainer, loaders: Loaders, cfg: TrainConfig) -> float:
    """Run the untimed warm-up (see module docstring) and restore the trajectory; seconds."""
    if cfg.warmup_steps == 0:
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
    eval_shapes = {min(cfg.eval_batch_size, loaders.test_size)}
    if loaders.test_size % cfg.eval_batch_size:
        eval_shapes.add(loaders.test_size % cfg.eval_batch_size)
    trainer.evaluate(loaders.sample_batch("test", s) for s in sorted(eval_shapes))
    synchronize(trainer.device.type)
    trainer.restore(state)
    synchronize(trainer.device.type)
    return time.perf_counter() - start


class Progress:
    """A one-line progress bar on stderr, redrawn at most every 0.25 s; silent when off."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._last = 0.0

    def update(self, epoch: int, epochs: int, step: int, steps: int, start: float,
               force: bool = False) -> None:
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


def train_epochs(trainer: Trainer, loaders: Loaders, cfg: TrainConfig, monitor,
                 progress: Progress, rows: list[dict]) -> dict:
    """The timed epochs: appends one row of ``epochs.csv`` to ``rows`` per finished epoch;
    returns the energy used over them."""
    dev = trainer.device.type
    timer = phase_timer(dev)
    steps_per_epoch = len(loaders.train)
    if cfg.max_steps:
        steps_per_epoch = min(steps_per_epoch, cfg.max_steps)
    monitor.set_stage("train")
    energy_start = monitor.energy()
    for epoch in range(1, cfg.epochs + 1):
        synchronize(dev)
        wall_start = time.perf_counter()
        timer.start()
        steps = samples = 0
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
        train_loss = trainer.loss_sum.item() / max(samples, 1)
        trainer.loss_sum.zero_()
        progress.update(epoch, cfg.epochs, steps, steps_per_epoch, wall_start, force=True)
        train_s = sum(phases.get(p, 0.0) for p in schema.PHASES if p != "eval")
        rows.append({
            "epoch": epoch,
            "steps": steps,
            "samples": samples,
            **{f"{p}_s": phases.get(p, 0.0) for p in schema.PHASES},
            "train_s": train_s,
            "epoch_s": wall,
            "train_loss": train_loss,
            "test_loss": loss.item() / max(count, 1),
            "test_acc": 100.0 * correct.item() / max(count, 1),
            "samples_per_s": samples / train_s if train_s > 0 else None,
        })
    energy_end = monitor.energy()
    energy = {
        k: (energy_end[k] - energy_start[k])
        if energy_end.get(k) is not None and energy_start.get(k) is not None else None
        for k in ("gpu_j", "cpu_j")
    }
    return energy


def headline(rows: list[dict]) -> dict:
    """The summary's results from the epoch rows (None where there are none)."""
    if not rows:
        return {}
    epoch_s = [r["epoch_s"] for r in rows]
    best = max(rows, key=lambda r: r["test_acc"])
    rates = [r["samples_per_s"] for r in rows if r["samples_per_s"]]
    return {
        "epoch_s_median": statistics.median(epoch_s),
        "epoch_s_mean": statistics.fmean(epoch_s),
        "train_s_median": statistics.median(r["train_s"] for r in rows),
        "total_s": sum(epoch_s),
        **{f"{p}_s": sum(r[f"{p}_s"] for r in rows) for p in schema.PHASES},
        "samples_per_s": statistics.median(rates) if rates else None,
        "steps_per_epoch": rows[0]["steps"],
        "final_test_acc": rows[-1]["test_acc"],
        "best_test_acc": best["test_acc"],
        "best_epoch": best["epoch"],
        "final_test_loss": rows[-1]["test_loss"],
        "final_train_loss": rows[-1]["train_loss"],
    }


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return True
    text = str(exc)
    return "out of memory" in text.lower() or "can't allocate memory" in text


def _process_start_unix() -> float:
    """When this cell's process started (Unix time, s): for a cell forked by the fork server,
    when its client started (forkserver.START_ENV), so startup_s counts the whole start."""
    with contextlib.suppress(KeyError, ValueError):
        return float(os.environ[START_ENV])
    return process_start_unix()


def run_cell(cfg: TrainConfig) -> int:
    """Run one cell and write its outputs; the exit code of its status."""
    started_unix = time.time()  # wall-clock stamp for the record, not used for durations
    process_start = _process_start_unix()
    try:
        cfg.validate()
    except devices.UnsupportedCombination as exc:
        print(f"mnistbench train: error: {exc}", file=sys.stderr)
        return 2
    cfg.eval_batch_size = cfg.eval_batch_size or cfg.batch_size
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in (schema.SUMMARY_FILE, schema.EPOCHS_FILE, schema.RESOURCES_FILE):
        with contextlib.suppress(FileNotFoundError):
            (out / name).unlink()  # never pair a new run with an old run's files

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    cfg.resolved["threads"] = torch.get_num_threads()
    env_info = sysinfo.capture()
    status, reason = "ok", ""
    rows: list[dict] = []
    energy: dict = {}
    timing = {"startup_s": time.time() - process_start}
    gpu_index = gpu_uuid = None
    if cfg.device == "cuda" and torch.cuda.is_available():
        gpu_index = 0
        gpu_uuid = str(getattr(torch.cuda.get_device_properties(0), "uuid", "")) or None
    monitor = ResourceMonitor(interval=cfg.sample_interval, gpu_index=gpu_index,
                              gpu_uuid=gpu_uuid)
    monitor.start()
    monitor.set_stage("setup")
    trainer = None
    try:
        device = devices.pick_device(cfg.device)
        seeds = stream_seeds(cfg.seed)
        torch.manual_seed(seeds["dropout"])  # the global RNG: dropout masks
        if device.type == "cuda":
            torch.backends.cudnn.benchmark = True  # autotuned during warm-up
            torch.cuda.reset_peak_memory_stats(device)
        shuffle_gen = torch.Generator().manual_seed(seeds["shuffle"])
        t0 = time.perf_counter()
        loaders = build_loaders(cfg, device, shuffle_gen)
        synchronize(device.type)
        timing["data_load_s"] = time.perf_counter() - t0
        trainer = Trainer(cfg, device, seeds["init"])
        progress = Progress(enabled=not cfg.quiet and sys.stderr.isatty())
        warmup_start = time.perf_counter()
        with time_limit(cfg.time_limit):
            monitor.set_stage("warmup")
            timing["warmup_s"] = warm_up(trainer, loaders, cfg)
            energy = train_epochs(trainer, loaders, cfg, monitor, progress, rows)
    except TimeLimitReached:
        where = ("in the warm-up" if "warmup_s" not in timing
                 else f"in timed epoch {len(rows) + 1} of {cfg.epochs}")
        status, reason = "failed", (
            f"time limit of {cfg.time_limit:g} s reached {where}; raise the limit (config "
            f"experiments.{cfg.experiment}.time_limit, or --time-limit) or time fewer epochs")
        timing.setdefault("warmup_s", time.perf_counter() - warmup_start)
        rows = []  # only complete cells have epoch rows
    except devices.DeviceUnavailable as exc:
        status, reason = "unavailable", f"{cfg.device} unavailable: {exc}"
    except data.DataError as exc:
        status, reason = "failed", str(exc)
    except Exception as exc:
        if _is_oom(exc):
            status = "oom"
            reason = (f"out of memory on {cfg.device} at batch size {cfg.batch_size} "
                      f"({cfg.precision}, {cfg.loader}): {_first_line(exc)}")
        else:
            status, reason = "failed", f"{type(exc).__name__}: {_first_line(exc)}"
            traceback.print_exc(file=sys.stderr)
    monitor.set_stage("done")
    monitor.stop()

    results = {k: None for k in schema.RESULT_FIELDS}
    if status == "ok":
        results.update(headline(rows))
    results.update(monitor.summary(stage="train"))
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB
    results["peak_rss_mb"] = max(peak_rss, results.get("peak_rss_mb") or 0.0)
    if trainer is not None and trainer.device.type == "cuda":
        results["peak_cuda_mem_mb"] = torch.cuda.max_memory_allocated(trainer.device) / 2**20
    results["gpu_energy_j"] = energy.get("gpu_j")
    results["cpu_energy_j"] = energy.get("cpu_j")

    atomic.write_csv(out / schema.EPOCHS_FILE, list(schema.EPOCH_COLUMNS), rows)
    monitor.write_csv(out / schema.RESOURCES_FILE)
    ended_unix = time.time()
    timed = sum(r["epoch_s"] for r in rows)
    timing.update({
        "started_at": _iso(started_unix),
        "ended_at": _iso(ended_unix),
        "start_unix": started_unix,
        "end_unix": ended_unix,
        "timed_s": timed,
        "overhead_s": (ended_unix - process_start) - timed - timing.get("warmup_s", 0.0),
    })
    summary = {
        "schema_version": schema.SCHEMA_VERSION,
        "status": status,
        "reason": reason,
        "params": cfg.params(),
        "env": env_info,
        "timing": {k: timing.get(k) for k in schema.TIMING_FIELDS},
        "results": {k: results.get(k) for k in schema.RESULT_FIELDS},
        "sources": {
            "gpu_energy": getattr(monitor, "gpu_energy_source", None),
            "cpu_energy": getattr(monitor, "cpu_energy_source", None),
        },
    }
    atomic.write_json(out / schema.SUMMARY_FILE, summary)  # last: its presence means complete
    if status != "ok":
        print(f"mnistbench train: {status}: {reason}", file=sys.stderr)
    return schema.EXIT_CODES[status]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _iso(unix: float) -> str:
    return dt.datetime.fromtimestamp(unix, tz=dt.UTC).isoformat(timespec="milliseconds")

