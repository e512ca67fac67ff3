"""How long a study takes, estimated before it starts and refitted while it runs.

A timed cell's wall time is modelled as ``overhead[code] + x * k[code]``: ``x`` is the cell's
work at the device's measured limit (its training and evaluation FLOPs, from the plan's steps,
samples and :mod:`mnistbench.core.network`'s FLOPs per sample, over the peak step's GFLOP/s at
the cell's precision: the seconds the cell would take at the limit), ``k`` the inverse of the
efficiency of its code, told apart by its loader (``dataloader``: torchvision's per-sample
pipeline, the blog's code; ``resident``: the data on the device, this project's) and
``overhead`` what every cell of the code costs besides (process start, data
loading, the job's own start and the machine lock). Standard library only: the workflow
imports this module when it builds the DAG and its watcher runs inside the Snakemake process.

Where the numbers come from, in order:
- the prior: :data:`DEFAULT_EFFICIENCY` and :data:`DEFAULT_OVERHEAD_S`, rounded (towards the
  slower) from the fit to the default study's 108 cells on a 2-core AVX-512 EPYC
  (2026-12-07: the DataLoader cells 4.7 s + 37 %, the resident ones 2.2 s + 66 %); without a
  measured limit yet, :data:`DEFAULT_PEAK_GFLOPS` per core (CPU) or per device;
- this machine's earlier results: every ``ok`` summary.json of the study's environments under
  ``results/runs`` refits the prior (:func:`fit`) before the study starts;
- the cells done: after each, the same fit over every finished cell of this execution, each
  counted with the wall time the study spent on it (from the previous cell's end).

The fit is least squares with the prior as one pseudo-observation per parameter, so one cell
moves the estimate and many cells outweigh the prior. The range: ``total / f`` to
``total x f`` with ``f`` :data:`SPREAD_DEFAULT` on the prior alone, :data:`SPREAD_EARLIER` with
earlier results, and after cells ``1 + max(``:data:`SPREAD_FLOOR` ``, the cells' rms relative
error)`` plus what is left of the prior's ``(f - 1) / (1 + cells)``. Cells are assumed to run
one at a time (the local executor's timed_cell limit); under SLURM, where cells run side by
side, the first estimate is the sum of the cells' times, an upper bound, and the refit, which
counts each cell from the previous one's end, learns how many run at once. The study's other jobs
(fetch, aggregate, report) are :data:`TAIL_S`.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mnistbench.core import network, options, schema, study, untrusted
from mnistbench.core.devices import Loader

#: Share of the measured limit (the peak step's best GFLOP/s at the cell's precision) a cell's
#: whole wall time reaches, by code (its loader, mnistbench.core.devices.Loader), when
#: nothing better is known.
DEFAULT_EFFICIENCY: dict[str, float] = {Loader.DATALOADER: 0.33, Loader.RESIDENT: 0.6}
OTHER_EFFICIENCY = 0.1  # a loader not listed above
CODE_LABELS: dict[str, str] = {Loader.DATALOADER: "DataLoader", Loader.RESIDENT: "resident data"}
#: s every cell costs besides its FLOPs, by code: the job's start, the lock, the process, data
#: loading (torchvision's pipeline and its workers cost the DataLoader cells more).
DEFAULT_OVERHEAD_S: dict[str, float] = {Loader.DATALOADER: 6.0, Loader.RESIDENT: 3.0}
OTHER_OVERHEAD_S = 8.0
#: GFLOP/s assumed before the peak step has measured the device: per core on a CPU, per
#: device otherwise. Only `mnistbench estimate` on a fresh folder uses them; a study prints its
#: first estimate after the peak step.
DEFAULT_PEAK_GFLOPS = {"cpu": 40.0, "cuda": 20000.0, "xpu": 10000.0, "mps": 3000.0}
PER_CORE = ("cpu",)
#: s of a peak job (a few seconds of matmuls), and of the jobs after the cells.
PEAK_JOB_S = 15.0
#: s a job spends before its cell's process starts (Snakemake, `mnistbench run-cell`, the
#: lock): added to an earlier cell's recorded process span.
DEFAULT_JOB_START_S = 1.0
TAIL_S = 30.0
SPREAD_DEFAULT = 2.0
SPREAD_EARLIER = 1.5
SPREAD_FLOOR = 0.1
#: s between two lines while a cell runs and nothing else is printed (off a terminal too).
HEARTBEAT_S = 60.0
PLAN_FILE = "plan.json"  # under results/logs/estimate/


# ---------------------------------------------------------------------------------------------
# One cell's work
@dataclass(frozen=True)
class Work:
    """What one timed cell computes, as the plan says."""

    key: tuple[str, str, str]  # (env, experiment, cell id): study.Cell.key
    device: str
    precision: str
    code: str  # the cell's loader: its code for the estimate
    gflop: float  # training, warm-up and evaluation FLOPs / 1e9

    @property
    def name(self) -> str:
        """experiment/cell, as the lines print it."""
        return f"{self.key[1]}/{self.key[2]}"


#: The most GFLOPs a planned cell may hold (a full study's largest is far below).
MAX_CELL_GFLOP = 1e9


def _keys(data: dict, where: str, keys: tuple[str, ...]) -> None:
    missing, extra = [k for k in keys if k not in data], sorted(set(data) - set(keys))
    if missing or extra:
        raise ValueError(f"{where} " + "; ".join(
            ([f"lacks {', '.join(missing)}"] if missing else [])
            + ([f"has {', '.join(map(str, extra))}, which no plan has"] if extra else [])))


def _list(data: dict, key: str) -> list:
    if not isinstance(data[key], list):
        raise ValueError(f"{key} is a {type(data[key]).__name__}, expected a list")
    return data[key]


def _strings(values: object, where: str, count: int | None = None) -> list[str]:
    if (not isinstance(values, list) or not all(isinstance(v, str) for v in values)
            or (count is not None and len(values) != count)):
        expected = f"{count} strings" if count else "a list of strings"
        raise ValueError(f"{where} is {str(values)[:80]!r}, expected {expected}")
    return list(values)


def _string(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where} is {str(value)[:80]!r}, expected a string")
    return value


def _work(data: object, where: str) -> Work:
    """One cell of a plan's JSON, checked (:meth:`Plan.from_json`)."""
    if not isinstance(data, dict):
        raise ValueError(f"{where} is not a JSON object")
    _keys(data, where, ("key", "device", "precision", "code", "gflop"))
    gflop = data["gflop"]
    if (not isinstance(gflop, int | float) or isinstance(gflop, bool) or not math.isfinite(gflop)
            or not 0 <= gflop <= MAX_CELL_GFLOP):
        raise ValueError(f"{where}.gflop is {gflop!r}, expected a finite number 0 to "
                         f"{MAX_CELL_GFLOP:g}")
    key = _strings(data["key"], f"{where}.key", 3)
    device, precision, code = (_string(data[k], f"{where}.{k}")
                               for k in ("device", "precision", "code"))
    return Work(key=(key[0], key[1], key[2]), device=device, precision=precision, code=code,
                gflop=float(gflop))


def cell_gflop(cell: study.Cell) -> float:
    """The GFLOPs ``cell`` computes: per epoch its training samples (train_limit or all of
    MNIST, at most max_steps batches) and its test samples, plus the warm-up steps."""
    train = cell.train_limit or options.MNIST_TRAIN_SAMPLES
    if cell.max_steps:
        train = min(train, cell.max_steps * cell.batch_size)
    test = cell.test_limit or options.MNIST_TEST_SAMPLES
    per_epoch = train * network.train_flops(cell.width) + test * network.eval_flops(cell.width)
    warmup = cell.warmup_steps * cell.batch_size * network.train_flops(cell.width)
    return (cell.epochs * per_epoch + warmup) / 1e9


def cell_work(cell: study.Cell) -> Work:
    """The :class:`Work` of a cell of the matrix."""
    return Work(key=cell.key, device=cell.device, precision=cell.precision, code=cell.loader,
                gflop=cell_gflop(cell))


# ---------------------------------------------------------------------------------------------
# The measured limit
def peak_gflops(runs: str | os.PathLike[str], env: str, device: str, precision: str,
                cores: int) -> tuple[float, bool]:
    """(GFLOP/s, measured) of ``device`` at ``precision`` in ``env``: the peak step's record
    (runs/ENV/peak/DEVICE.json, :func:`mnistbench.core.schema.best_peak_row`), else its fp32
    row, else :data:`DEFAULT_PEAK_GFLOPS` (False)."""
    folder = Path(runs, env)
    try:  # read bounded, following no link; a limit that cannot be true is no limit
        record: Any = untrusted.loads_strict(untrusted.read_text_under(
            folder, f"{schema.PEAK_DIR}/{schema.peak_file(device)}",
            max_bytes=untrusted.MAX_CONFIG_BYTES))
        rows = [row for row in record.get("rows") or [] if isinstance(row, dict)
                and isinstance(row.get("precision"), str) and _believable(row.get("gflops"))]
    except (OSError, ValueError, AttributeError, TypeError):
        rows = []
    for wanted in (precision, "fp32"):
        row = schema.best_peak_row(rows, wanted)
        if row is not None and row.get("gflops"):
            return float(row["gflops"]), True
    default = DEFAULT_PEAK_GFLOPS.get(device, DEFAULT_PEAK_GFLOPS["cpu"])
    return default * (max(1, cores) if device in PER_CORE else 1), False


def _believable(gflops: object) -> bool:
    """Whether a peak row's GFLOP/s can be a device's (above 0, at most
    :data:`mnistbench.core.schema.MAX_GFLOPS`: the readers of results refuse the rest)."""
    return (isinstance(gflops, int | float) and not isinstance(gflops, bool)
            and 0 < gflops <= schema.MAX_GFLOPS)


# ---------------------------------------------------------------------------------------------
# The model and its fit
@dataclass
class Model:
    """A cell's predicted wall time: ``overhead[code] + x * k[code]`` (x: s at the limit)."""

    overhead: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_OVERHEAD_S))
    k: dict[str, float] = field(
        default_factory=lambda: {c: 1 / e for c, e in DEFAULT_EFFICIENCY.items()})
    spread: float = SPREAD_DEFAULT
    source: str = "documented defaults"
    cells: int = 0  # cells the fit saw

    def efficiency(self, code: str) -> float:
        return 1 / self.k_of(code)

    def k_of(self, code: str) -> float:
        return self.k.get(code, 1 / DEFAULT_EFFICIENCY.get(code, OTHER_EFFICIENCY))

    def overhead_of(self, code: str) -> float:
        return self.overhead.get(code, DEFAULT_OVERHEAD_S.get(code, OTHER_OVERHEAD_S))

    def seconds(self, x: float, code: str) -> float:
        return self.overhead_of(code) + x * self.k_of(code)


@dataclass(frozen=True)
class Observation:
    """A finished ok cell: its work at the limit (s) and the wall time it took (s)."""

    code: str
    x: float
    wall_s: float


def fit(observations: Sequence[Observation], prior: Model | None = None,
        typical_x: Mapping[str, float] | None = None) -> Model:
    """``prior`` refitted to ``observations`` by least squares, code by code: its overhead and
    its k, each held by one pseudo-observation at its prior value (``typical_x[code]``: the x
    of a typical cell of the code, default the observations' mean). Efficiencies stay at most
    1 and overheads at least 0. The spread: ``1 + max(SPREAD_FLOOR, rms relative error)``, plus
    the prior's share ``(prior.spread - 1) / (1 + cells)``."""
    prior = prior or Model()
    if not observations:
        return prior
    model = Model(overhead=dict(prior.overhead), k=dict(prior.k), cells=len(observations))
    for code in sorted({o.code for o in observations}):
        seen = [o for o in observations if o.code == code]
        scale = (typical_x or {}).get(code) or sum(o.x for o in seen) / len(seen)
        # Normal equations of [1, x] . (c, k) = wall, plus (1, 0) . (c, k) = c0 and
        # (0, scale) . (c, k) = scale * k0.
        a = [[1.0, 0.0], [0.0, scale * scale]]
        b = [prior.overhead_of(code), scale * scale * prior.k_of(code)]
        for o in seen:
            a[0][0] += 1.0
            a[0][1] += o.x
            a[1][0] += o.x
            a[1][1] += o.x * o.x
            b[0] += o.wall_s
            b[1] += o.x * o.wall_s
        overhead, k = _solve(a, b)
        if k < 1.0 or overhead < 0.0:  # clamp one, refit the other
            k = max(1.0, k)
            overhead = max(0.0, (b[0] - a[0][1] * k) / a[0][0])
        model.overhead[code], model.k[code] = overhead, k
    errors = [(o.wall_s - model.seconds(o.x, o.code)) / model.seconds(o.x, o.code)
              for o in observations]
    rms = math.sqrt(sum(e * e for e in errors) / len(errors))
    # The prior's uncertainty fades as cells come in: one cell fits itself almost exactly.
    model.spread = 1 + max(SPREAD_FLOOR, rms) + (prior.spread - 1) / (1 + len(observations))
    return model


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """x of a x = b (Gaussian elimination with partial pivoting; a is positive definite)."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            for c in range(col, n + 1):
                m[r][c] -= f * m[col][c]
    x = [0.0] * n
    for r in reversed(range(n)):
        x[r] = (m[r][n] - sum(m[r][c] * x[c] for c in range(r + 1, n))) / m[r][r]
    return x


# ---------------------------------------------------------------------------------------------
# The plan of one execution
@dataclass
class Plan:
    """The cells an execution will run (in run order), the peak jobs it will run first, and
    where: what the estimate needs, written to results/logs/estimate/plan.json at its start."""

    cells: list[Work]
    peaks: list[tuple[str, str]] = field(default_factory=list)  # (env, device) to measure
    runs: str = "results/runs"
    cores: int = 1
    envs: list[str] = field(default_factory=list)  # whose earlier results calibrate
    # Measured limits read so far, by (env, device, precision): a record, once written, stays.
    _limits: dict[tuple[str, str, str], float] = field(
        default_factory=dict, compare=False, repr=False)

    def to_json(self) -> str:
        return json.dumps({"cells": [asdict(w) for w in self.cells], "peaks": self.peaks,
                           "runs": self.runs, "cores": self.cores, "envs": self.envs},
                          indent=1)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        """The plan that :meth:`to_json` wrote; ValueError naming the key and what it should
        hold for anything else (nesting too deep, a key missing or extra, a word where a
        number goes, NaN or a negative GFLOP count, no cores), never a traceback later."""
        untrusted.check_json_depth(text)
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        _keys(data, "the plan", ("cells", "peaks", "runs", "cores", "envs"))
        cells = [_work(w, f"cells[{i}]") for i, w in enumerate(_list(data, "cells"))]
        peaks = [(p[0], p[1]) for p in (_strings(p, f"peaks[{i}]", 2)
                                        for i, p in enumerate(_list(data, "peaks")))]
        cores = data["cores"]
        if not isinstance(cores, int) or isinstance(cores, bool) or not 1 <= cores <= 1 << 20:
            raise ValueError(f"cores is {cores!r}, expected a whole number 1 or more")
        return cls(cells=cells, peaks=peaks, runs=_string(data["runs"], "runs"),
                   cores=cores, envs=_strings(data["envs"], "envs"))

    @classmethod
    def of_cells(cls, cells: Iterable[study.Cell], peaks: Iterable[tuple[str, str]],
                 runs: str, cores: int, envs: Iterable[str]) -> Plan:
        return cls(cells=[cell_work(c) for c in cells], peaks=list(peaks), runs=runs,
                   cores=cores, envs=list(envs))

    def x(self, work: Work) -> tuple[float, bool]:
        """(s at the limit, measured) of one cell."""
        where = (work.key[0], work.device, work.precision)
        if where in self._limits:
            return work.gflop / self._limits[where], True
        gflops, measured = peak_gflops(self.runs, *where, self.cores)
        if measured:
            self._limits[where] = gflops
        return work.gflop / gflops, measured

    def typical_x(self) -> dict[str, float]:
        by_code: dict[str, list[float]] = {}
        for work in self.cells:
            by_code.setdefault(work.code, []).append(self.x(work)[0])
        return {code: sum(xs) / len(xs) for code, xs in by_code.items()}


def summary_observation(path: Path, plan: Plan, wall_s: float | None = None
                        ) -> Observation | None:
    """The observation of a finished ok cell's summary.json (None for another status or an
    unreadable one): its work from its recorded params, its wall time ``wall_s`` (the study's
    time on it) or else its process's (timed, warm-up and overhead s)."""
    try:  # read bounded (depth, size), following no link at its name
        summary: Any = untrusted.loads_strict(untrusted.read_text_under(
            path.parent, path.name, max_bytes=untrusted.MAX_CONFIG_BYTES))
        if summary.get("status") != "ok":
            return None
        p, t = summary["params"], summary["timing"]
        cell = study.Cell(env=p["env"], partition=None, experiment=p["experiment"],
                          repeat=0, seed=0, device=p["device"], precision=p["precision"],
                          loader=p["loader"], batch_size=int(p["batch_size"]),
                          epochs=int(p["epochs"]), lr=0.0,
                          warmup_steps=int(p.get("warmup_steps") or 0),
                          max_steps=int(p.get("max_steps") or 0),
                          train_limit=int(p.get("train_limit") or 0),
                          test_limit=int(p.get("test_limit") or 0), time_limit=0.0,
                          width=int(p.get("width") or 1))
        if wall_s is None:
            wall_s = float(t["timed_s"]) + float(t["warmup_s"] or 0) + float(t["overhead_s"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    work = cell_work(cell)
    return Observation(code=work.code, x=plan.x(work)[0], wall_s=wall_s)


def earlier_model(plan: Plan, exclude: Iterable[tuple[str, str, str]] = ()) -> Model:
    """The prior refitted to this machine's earlier ok cells of the plan's environments
    (``exclude``: cells not to count); the prior itself when there are none."""
    skip = set(exclude)
    observations = []
    for env in plan.envs:
        for path in sorted(Path(plan.runs, env).glob(f"*/*/{schema.SUMMARY_FILE}")):
            if (env, path.parent.parent.name, path.parent.name) in skip:
                continue
            found = summary_observation(path, plan)
            if found is not None:  # the process's span plus the job's start
                observations.append(Observation(found.code, found.x,
                                                found.wall_s + DEFAULT_JOB_START_S))
    if not observations:
        return Model()
    model = fit(observations, Model(), plan.typical_x())
    model.spread = max(model.spread, SPREAD_EARLIER)
    model.source = f"{len(observations)} earlier cells of this machine"
    return model


# ---------------------------------------------------------------------------------------------
# Estimates and their lines
@dataclass(frozen=True)
class Estimate:
    """Seconds left (best guess and range) after ``done`` of ``total`` cells."""

    total: int
    done: int
    left_s: float
    low_s: float
    high_s: float
    spent_s: float
    measured_peak: bool
    model: Model


def estimate(plan: Plan, model: Model, done: Iterable[tuple[str, str, str]] = (),
             spent_s: float = 0.0, peaks_left: int | None = None) -> Estimate:
    """The time left for the plan's cells not in ``done``, its peak jobs (``peaks_left``,
    default all) and the jobs after the cells."""
    finished = set(done)
    left = TAIL_S + PEAK_JOB_S * (len(plan.peaks) if peaks_left is None else peaks_left)
    measured = True
    for work in plan.cells:
        if work.key in finished:
            continue
        x, was_measured = plan.x(work)
        measured = measured and was_measured
        left += model.seconds(x, work.code)
    n_done = sum(1 for w in plan.cells if w.key in finished)
    return Estimate(total=len(plan.cells), done=n_done, left_s=left, low_s=left / model.spread,
                    high_s=left * model.spread, spent_s=spent_s, measured_peak=measured,
                    model=model)


def duration(seconds: float) -> str:
    """``1 h 05 min``, ``4 min 10 s``, ``12 s``."""
    s = max(0, round(seconds))
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    if s >= 60:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s} s"


def clock(unix: float) -> str:
    """A wall-clock time in UTC, ``23:14 UTC``."""
    return time.strftime("%H:%M UTC", time.gmtime(unix))


def _efficiencies(model: Model) -> str:
    return ", ".join(f"{CODE_LABELS.get(c, c)} {model.overhead_of(c):.0f} s + "
                     f"{model.efficiency(c) * 100:.0f} %" for c in sorted(model.k, reverse=True))


def first_line(est: Estimate, now: float, if_started: bool = False) -> str:
    """The line a study prints before its first cell (``if_started``: a plan not running)."""
    peak = "the measured limit" if est.measured_peak else "a default limit (not measured yet)"
    when = " if started now" if if_started else ""
    return (f"estimate: {est.total} cells, about {duration(est.left_s)} "
            f"({duration(est.low_s)} to {duration(est.high_s)}) on this machine, ending about "
            f"{clock(now + est.left_s)}{when}; from the plan's FLOPs, {peak}, "
            f"overheads and efficiencies ({est.model.source}): "
            f"{_efficiencies(est.model)}")


def progress_line(est: Estimate, now: float, cell: str = "") -> str:
    """The line after each finished cell."""
    what = f" ({cell})" if cell else ""
    return (f"estimate: {est.done}/{est.total} cells done{what}; {duration(est.spent_s)} "
            f"spent, about {duration(est.left_s)} left ({duration(est.low_s)} to "
            f"{duration(est.high_s)}), ending about {clock(now + est.left_s)}")


def running_line(est: Estimate, cell: str, running_s: float, cell_s: float = 0.0) -> str:
    """The line a minute while a cell runs (a person watching a log sees the study move):
    the time left counts down through the running cell (its estimate ``cell_s``), never
    below the cells after it."""
    left = est.left_s - min(running_s, cell_s)
    return (f"progress: cell {est.done + 1}/{est.total} ({cell}) running for "
            f"{duration(running_s)}; {duration(est.spent_s)} spent, about "
            f"{duration(left)} left")


def waiting_line(spent_s: float, peaks_left: int) -> str:
    """The line a minute before the first cell (MNIST, images, the measured limits)."""
    return (f"progress: {duration(spent_s)} spent; the cells start once the jobs before "
            f"them are done ({peaks_left} measured limit{'s' if peaks_left != 1 else ''} to "
            "go, after MNIST and any image)")


# ---------------------------------------------------------------------------------------------
# The watcher: inside the Snakemake process, over the files the jobs write
class Watcher:
    """Follows one execution from the files its jobs write (the peak records, each cell's
    summary.json): prints an estimate from a default limit at once when peak jobs are
    pending (before any job runs), the first estimate once they are done, a progress line
    after each finished cell, and a line a minute while a cell runs. ``say`` prints a line;
    ``now`` is the clock (tests give fakes and call :meth:`poll` themselves)."""

    def __init__(self, plan: Plan, say: Callable[[str], None],
                 now: Callable[[], float] = time.time, heartbeat_s: float = HEARTBEAT_S):
        self.plan, self.say, self.now, self.heartbeat_s = plan, say, now, heartbeat_s
        self.started = now()
        self.model = earlier_model(plan, exclude=[w.key for w in plan.cells])
        self.prior = self.model
        self.typical = plan.typical_x()
        self.done: dict[tuple[str, str, str], Observation | None] = {}
        self.announced = False
        self.preliminary: Estimate | None = None
        self.first: Estimate | None = None
        self.last: Estimate | None = None
        self.cell_start: float | None = None
        self.last_line = self.started
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _peaks_left(self) -> int:
        return sum(1 for env, device in self.plan.peaks
                   if not Path(self.plan.runs, env, schema.PEAK_DIR,
                               schema.peak_file(device)).exists())

    def _summary(self, work: Work) -> Path:
        env, experiment, cell = work.key
        return Path(self.plan.runs, env, experiment, cell, schema.SUMMARY_FILE)

    def _emit(self, line: str, now: float) -> None:
        self.last_line = now
        self.say(line)

    def poll(self) -> None:
        """Look at the files once and print what is new."""
        now = self.now()
        peaks_left = self._peaks_left()
        if not self.announced:
            if peaks_left and self.plan.cells:
                if self.preliminary is None:  # at once, from a default limit: a person sees
                    # the study's size before any job; the measured one follows the peaks
                    self.preliminary = estimate(self.plan, self.model, spent_s=0.0,
                                                peaks_left=peaks_left)
                    self._emit(first_line(self.preliminary, now), now)
                elif now - self.last_line >= self.heartbeat_s:
                    self._emit(waiting_line(now - self.started, peaks_left), now)
                return
            self.announced = True
            self.cell_start = now
            self.first = estimate(self.plan, self.model, spent_s=now - self.started,
                                  peaks_left=peaks_left)
            self._emit(first_line(self.first, now), now)
        for work in self.plan.cells:
            if work.key in self.done or not self._summary(work).exists():
                continue
            wall = now - (self.cell_start if self.cell_start is not None else self.started)
            self.done[work.key] = summary_observation(self._summary(work), self.plan, wall)
            self.cell_start = now
            observations = [o for o in self.done.values() if o is not None]
            if observations:
                self.model = fit(observations, self.prior, self.typical)
                self.model.source = f"refitted to {len(observations)} cells done"
            self.last = estimate(self.plan, self.model, self.done, now - self.started, 0)
            self._emit(progress_line(self.last, now, work.name), now)
        if now - self.last_line >= self.heartbeat_s and self.cell_start is not None:
            running = next((w for w in self.plan.cells if w.key not in self.done), None)
            if running is not None:
                est = estimate(self.plan, self.model, self.done, now - self.started, 0)
                cell_s = self.model.seconds(self.plan.x(running)[0], running.code)
                self._emit(running_line(est, running.name, now - self.cell_start, cell_s), now)

    def start(self, interval_s: float = 1.0) -> None:
        """Poll every ``interval_s`` in a daemon thread until :meth:`stop`."""

        def loop() -> None:
            while not self._stop.wait(interval_s):
                try:
                    self.poll()
                except Exception as exc:  # never let the estimate stop a study
                    self.say(f"estimate: stopped ({type(exc).__name__}: {exc})")
                    return

        self._thread = threading.Thread(target=loop, name="mnistbench-estimate", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def write_plan(plan: Plan, folder: str | os.PathLike[str]) -> Path:
    """Write the plan to FOLDER/plan.json (for `mnistbench estimate --plan`)."""
    path = Path(folder, PLAN_FILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(plan.to_json(), encoding="utf-8")
    os.replace(tmp, path)
    return path


def plan_summary(plan: Plan, now: float | None = None) -> str:
    """The first line for a plan not run yet (a dry run, `mnistbench estimate`)."""
    now = time.time() if now is None else now
    model = earlier_model(plan, exclude=[w.key for w in plan.cells])
    return first_line(estimate(plan, model), now, if_started=True)


def progress_summary(plan: Plan, now: float | None = None) -> str:
    """Where a running or finished execution of ``plan`` stands, from its files alone: the
    cells whose summary.json exists are done (counted with their process's wall time)."""
    now = time.time() if now is None else now
    done = [w for w in plan.cells if Path(plan.runs, *w.key, schema.SUMMARY_FILE).exists()]
    if not done:
        return plan_summary(plan, now)
    prior = earlier_model(plan, exclude=[w.key for w in plan.cells])
    observations = [o for o in (summary_observation(Path(plan.runs, *w.key,
                                                         schema.SUMMARY_FILE), plan)
                                for w in done) if o is not None]
    model = fit(observations, prior, plan.typical_x()) if observations else prior
    model.source = f"refitted to {len(observations)} cells done"
    est = estimate(plan, model, [w.key for w in done], 0.0, 0)
    return progress_line(est, now).replace("; 0 s spent", "")
