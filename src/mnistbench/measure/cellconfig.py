"""A cell's settings: :class:`TrainConfig` (every ``mnistbench train`` flag, checked up front,
then what the machine resolved), the parameters a summary records, and the seeds of its random
streams."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from mnistbench.core import devices, options, schema, study
from mnistbench.core.devices import Loader

#: Allowed values of ``compile``: "" (eager) and torch.compile's modes (options.COMPILE_MODES).
COMPILE_MODES = ("", *options.COMPILE_MODES)


class InvalidSetting(ValueError):
    """A setting of :class:`TrainConfig` outside its allowed range (e.g. a NaN or infinite
    learning rate)."""


@dataclass
class TrainConfig:
    """Every setting of a cell; field docs are in :data:`mnistbench.core.schema.PARAM_FIELDS`."""

    out: Path
    data: Path = Path("resources/mnist")
    device: str = "cpu"
    precision: str = "fp32"
    batch_size: int = 128
    loader: str = Loader.RESIDENT
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
    max_batch: bool = False  # find the largest batch size that fits (limits.find_max_batch)
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
                (self.loader != Loader.RESIDENT, "--loader resident (the graph gathers its "
                 "batches from the resident split)"),
                (self.precision == "fp16", "--precision fp32, tf32 or bf16 (the GradScaler's "
                 "bookkeeping is not captured)"),
                (bool(self.compile), "no --compile (the graph is the compilation)"),
                (self.max_batch, "no --max-batch (the graphs are captured at one size)")):
            if problem:
                raise devices.UnsupportedCombination(
                    f"--implementation {name} needs {fix}")

    def fill_eval_batch_size(self) -> None:
        """Resolve an ``eval_batch_size`` of 0: the training batch size, but the whole test
        split for a whole-step capture cell (it evaluates in large batches)."""
        graphed = self.implementation == options.GRAPH_IMPLEMENTATION
        self.eval_batch_size = self.eval_batch_size or (
            options.MNIST_TEST_SAMPLES if graphed else self.batch_size)

    def params(self) -> dict:
        """The resolved parameters, keyed as :data:`schema.PARAM_FIELDS`."""
        values = asdict(self)
        values.update(self.resolved)
        values["threads_asked"] = self.threads  # values["threads"]: what the cell got
        values["loader_threads"] = (0 if self.loader != Loader.DATALOADER else self.workers or 1)
        values["env"] = self.env or study.environment_name()
        values["cell"] = self.cell or Path(self.out).name
        values["cuda_graphs"] = self.device == "cuda" and (
            self.compile == "reduce-overhead"
            or self.implementation == options.GRAPH_IMPLEMENTATION)
        values.setdefault("bf16_path", "")  # resolved once the device is up (bf16 cells)
        if self.loader != Loader.DATALOADER:  # no DataLoader: its flags do not apply (null)
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
