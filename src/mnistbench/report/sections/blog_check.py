"""Section 3, the blog checked: every table of the blog beside this study's numbers
(:data:`BLOG_TABLES`, a specification of rows read by :func:`side_by_side`), then each of
its claims checked by code (:mod:`mnistbench.report.sections.claims`), with a verdict and
the numbers. When this study's cells at the blog's settings are a subset, every comparison
says so ("subset: N samples, not comparable") and is not checkable.

This study's figures name the environment (with several) and the kind of code of the cells
they come from (the blog's code as written, this project's best, other settings).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mnistbench.report import blog, comparison
from mnistbench.report.formatting import (
    as_printed,
    count,
    money,
    num,
    points,
    ratio_phrase,
    seconds,
    usd,
)
from mnistbench.report.sections import claims
from mnistbench.report.selections import (
    CODE,
    RUN,
    Inputs,
    code_short,
    col,
    distinct,
    envs_with_gpu,
    loader_name,
    median,
    per_epoch,
    seed_spread,
)

#: The blog's reference figures (another machine), its number of trainings in the cost
#: table and its epochs per training.
REF = blog.BLOG
RUNS = REF["cost_runs"]
EPOCHS = blog.BLOG_SETTINGS["epochs"]
ANOTHER_MACHINE = "another machine"
#: MiB in a GB (the blog's unit): 10**9 / 2**20.
MIB_PER_GB = 1e9 / 2 ** 20


# ---------------------------------------------------------------------------- the side table

def _accuracy_pct(value) -> str:
    return num(value, 4, "%")


def _percent(value) -> str:
    return num(value, 3, "%")


def _gigabytes(mib) -> str:
    return "–" if mib is None else f"{num(mib / MIB_PER_GB, 2, 'GB')} ({num(mib, 3, 'MiB')})"


def _loss(value) -> str:
    return num(value, 3)


def _group_name(inputs: Inputs, env, group) -> str:
    """Where a figure comes from: the environment (with several), the kind of code and the
    loader of its cells."""
    loader = loader_name(distinct(group, "loader")[0]) if distinct(group, "loader") else "–"
    kind = code_short(group)
    where = f"{env}, " if inputs.multi_env else ""
    return f"{where}{kind}" + ("" if loader.lower() in kind.lower() else f" ({loader})")


@dataclass(frozen=True)
class Median:
    """This study's figure: the median of ``column`` on ``device`` (per epoch: divided by each
    cell's epochs) for each environment, kind of code and loader, written with ``fmt``."""

    device: str
    column: str
    fmt: Callable[[object], str]
    per_epoch: bool = False

    def __call__(self, inputs: Inputs) -> str:
        cells = inputs.cells[inputs.cells["device"] == self.device]
        if cells.empty:
            return comparison.device_absence(inputs.summary, self.device)
        parts = []
        for (env, _, _, _), group in cells.groupby(list(RUN)):
            values = per_epoch(group, self.column) if self.per_epoch else col(group, self.column)
            parts.append(f"{_group_name(inputs, env, group)}: {self.fmt(median(values))}")
        return "; ".join(parts)


@dataclass(frozen=True)
class EnvField:
    """This study's figure: the ``column`` of every environment (CPU model, GPU name, torch
    version), written with ``fmt``, or ``none`` where it has none."""

    column: str
    none: str = "–"
    fmt: Callable[[str], str] = str

    def __call__(self, inputs: Inputs) -> str:
        summary = inputs.summary
        values = {env: ", ".join(self.fmt(v) for v in distinct(summary[summary["env"] == env],
                                                                self.column)) or self.none
                  for env in inputs.envs}
        if self.none != "–" and any(v != self.none for v in values.values()):
            # a device one environment has is not "none" for the study: name those with it
            values = {env: v for env, v in values.items() if v != self.none}
        if len(set(values.values())) == 1:
            return next(iter(values.values()))
        return "; ".join(f"{env}: {v}" for env, v in values.items())


@dataclass(frozen=True)
class Setting:
    """This study's figure: the distinct values of a setting of the cells at the blog's
    settings."""

    column: str
    fmt: Callable[[str], str] = str

    def __call__(self, inputs: Inputs) -> str:
        return ", ".join(self.fmt(v) for v in distinct(inputs.cells, self.column)) or "–"


@dataclass(frozen=True)
class CostOfRuns:
    """This study's figure: the blog's number of trainings on ``device`` at this study's
    measured time and energy (``what``: time, electricity or total), with the kind of code."""

    device: str
    what: str

    def __call__(self, inputs: Inputs) -> str:
        currency, parts = inputs.model.currency, []
        kinds = _row_kinds(inputs)
        for r in inputs.cost_report.rows:
            if r.device != self.device:
                continue
            value = {"time": lambda r=r: seconds(RUNS * r.run_s.value),
                     "electricity": lambda r=r: (
                         f"{money(RUNS * r.electricity.value, currency)} "
                         f"({num(RUNS * r.energy_wh.value / 1000, 3, 'kWh')})"),
                     "total": lambda r=r: (
                         f"{money(RUNS * r.total.value, currency)} (write-off and waiting "
                         "included)")}[self.what]()
            where = f"{r.env}, " if inputs.multi_env else ""
            parts.append(f"{where}{kinds.get((r.env, r.device, r.loader), loader_name(r.loader))}"
                         f": {value}")
        return "; ".join(parts) or f"no ok {self.device} convergence cell"


def _row_kinds(inputs: Inputs) -> dict:
    """(env, device, loader) -> the short name of the kind of code of those cells."""
    return {key: code_short(group) for key, group in
            inputs.cells.groupby(["env", "device", "loader"])}


def _speedups(inputs: Inputs, *, column: str = "epoch_s_median", per_epoch: bool = False) -> str:
    """This study's GPU/CPU speed-up of every environment with a GPU, loader and kind of
    code: on one machine where it measured both devices, else across machines, labelled
    (:mod:`mnistbench.report.comparison`)."""
    cells, speeds = inputs.cells, []
    if per_epoch:
        cells = cells.assign(**{column: cells[column] / cells["epochs"]})
    for env in envs_with_gpu(cells):
        part = cells[(cells["env"] == env) & (cells["device"] == "cuda")]
        for (loader, kind), group in part.groupby(["loader", CODE]):
            found = next((p for p in comparison.pairs(inputs.summary, cells, code=kind,
                                                      loader=loader) if p.gpu_env == env),
                         None)
            if found is None:
                continue
            est = comparison.ratio(cells, found, loader, code=kind, column=column)
            if est is not None:
                where = "" if found.one_machine else f" ({found.label()})"
                speeds.append(f"{_group_name(inputs, env, group)}{where}: {ratio_phrase(est)}")
    return "; ".join(speeds) or (
        "no CPU and GPU cells of the same code ("
        + "; ".join(comparison.device_absence(inputs.summary, d) for d in ("cpu", "cuda")
                    if cells[cells["device"] == d].empty) + ")")


def _accuracies(inputs: Inputs) -> str:
    """This study's final test accuracy on each device, and the seed-to-seed spread."""
    text = "CPU " + Median("cpu", "final_test_acc", _accuracy_pct)(inputs)
    if not inputs.cells[inputs.cells["device"] == "cuda"].empty:
        text += "; GPU " + Median("cuda", "final_test_acc", _accuracy_pct)(inputs)
    spread = seed_spread(inputs.cells)
    if spread is not None:
        text += f"; seed-to-seed spread {points(spread, False)}"
    return text


def _printed(key: str, unit: str = "", fmt=None) -> Callable[[], str]:
    """The blog's figure ``key`` as printed (with ``fmt``, e.g. dollars)."""
    return lambda: fmt(REF[key]) if fmt else as_printed(REF[key], unit)


def _pair(cpu_key: str, gpu_key: str, unit: str = "", gap_key: str | None = None,
          gap_unit: str | None = None):
    """The blog's CPU and GPU figures (and their printed difference)."""
    def words() -> str:
        text = (f"CPU {as_printed(REF[cpu_key], unit)}; GPU {as_printed(REF[gpu_key], unit)}")
        if gap_key:
            gap = unit if gap_unit is None else gap_unit
            text += f"; difference {as_printed(REF[gap_key], gap)}"
        return text
    return words


def _same(what: str) -> Callable[[Inputs], str]:
    return lambda inputs: what


def _cpu_clock(_: Inputs) -> str:
    return "not recorded (the CPU's clock varies with turbo; cpu_turbo records whether it is on)"


def _gpu_clock(inputs: Inputs) -> str:
    clocks = distinct(inputs.summary, "gpu_sm_clock_start_mhz")
    return (f"SM clock at the start of the cells: {', '.join(clocks)} MHz" if clocks
            else comparison.device_absence(inputs.summary, "cuda"))


@dataclass(frozen=True)
class Row:
    """One figure of the blog's tables: its label, the blog's figure (a key of
    :data:`mnistbench.report.blog.BLOG` printed as the blog prints it, with ``unit``; or a
    function that words it), how this study's figure is computed from the
    :class:`~mnistbench.report.selections.Inputs`, and the row's note (None: the subset note,
    if any)."""

    label: str
    blog: str | Callable[[], str]
    ours: Callable[[Inputs], str]
    unit: str = ""
    note: str | None = None

    def blog_figure(self) -> str:
        return self.blog() if callable(self.blog) else as_printed(REF[self.blog], self.unit)


def _gb(value: str) -> str:
    return f"{num(float(value), 3, 'GB')}"


#: The blog's tables, in its order: (title, rows).
BLOG_TABLES: tuple[tuple[str, tuple[Row, ...]], ...] = (
    ("Test environment", (
        Row("CPU", "cpu", EnvField("cpu_model"), note=ANOTHER_MACHINE),
        Row("GPU", "gpu", EnvField("gpu_name", none="none"), note=ANOTHER_MACHINE),
        Row("memory", "cpu_memory", EnvField("memory_gb", fmt=_gb), note=ANOTHER_MACHINE),
        Row("GPU memory", "gpu_memory", EnvField("gpu_memory_gb", none="no GPU", fmt=_gb),
            note=ANOTHER_MACHINE),
        Row("CUDA cores", "gpu_cuda_cores", EnvField("gpu_name", none="no GPU",
                                                     fmt=lambda v: "not recorded"),
            note=ANOTHER_MACHINE),
        Row("CPU clock, base / boost", lambda: f"{REF['cpu_base_ghz']:g} / "
            f"{REF['cpu_boost_ghz']:g} GHz", _cpu_clock, note=ANOTHER_MACHINE),
        Row("GPU clock, base / boost", lambda: f"{REF['gpu_base_ghz']:g} / "
            f"{REF['gpu_boost_ghz']:g} GHz", _gpu_clock, note=ANOTHER_MACHINE),
        Row("PyTorch", "pytorch", EnvField("torch"), note=ANOTHER_MACHINE),
        Row("CUDA", "cuda", EnvField("cuda", none="none"), note=ANOTHER_MACHINE),
        Row("Python", "python", EnvField("python"), note=ANOTHER_MACHINE),
        Row("operating system", "os", EnvField("os"), note=ANOTHER_MACHINE),
    )),
    ("Settings", (
        Row("batch size", "batch_size", Setting("batch_size")),
        Row("epochs", "epochs", Setting("epochs")),
        Row("optimizer, learning rate", lambda: f"{REF['optimizer']}, {REF['lr']:g}",
            lambda inputs: f"Adam, {Setting('lr', lambda v: f'{float(v):g}')(inputs)}"),
        Row("loss", "loss", _same("CrossEntropyLoss")),
    )),
    ("Time per epoch and total", (
        Row("CPU, per epoch", "cpu_epoch_s", Median("cpu", "epoch_s_median", seconds), "s"),
        Row("GPU, per epoch", "gpu_epoch_s", Median("cuda", "epoch_s_median", seconds), "s"),
        Row("GPU/CPU speed-up, per epoch", "speedup", _speedups, "×"),
        Row("CPU, total", "cpu_total_s", Median("cpu", "total_s", seconds), "s"),
        Row("GPU, total", "gpu_total_s", Median("cuda", "total_s", seconds), "s"),
        Row("GPU/CPU speed-up, total", "total_speedup",
            lambda inputs: _speedups(inputs, column="total_s"), "×"),
    )),
    ("Data loading and backprop, per epoch", (
        Row("CPU, data loading", "cpu_data_s", Median("cpu", "data_s", seconds, True), "s"),
        Row("GPU, data loading", "gpu_data_s", Median("cuda", "data_s", seconds, True), "s"),
        Row("GPU/CPU speed-up, data loading", "data_speedup",
            lambda inputs: _speedups(inputs, column="data_s", per_epoch=True), "×"),
        Row("CPU, backprop", "cpu_backward_s", Median("cpu", "backward_s", seconds, True), "s"),
        Row("GPU, backprop", "gpu_backward_s", Median("cuda", "backward_s", seconds, True),
            "s"),
        Row("GPU/CPU speed-up, backprop", "backward_speedup",
            lambda inputs: _speedups(inputs, column="backward_s", per_epoch=True), "×"),
    )),
    ("Resources", (
        Row("CPU use (100 % = one core)", lambda: "single core close to 100 %",
            Median("cpu", "cpu_pct_mean", _percent)),
        Row("memory", "memory_gb", Median("cpu", "peak_rss_mb", _gigabytes), "GB"),
        Row("GPU utilisation, peak", "gpu_util_peak_pct",
            Median("cuda", "gpu_util_peak", _percent), "%"),
        Row("GPU memory", "gpu_memory_gb", Median("cuda", "peak_cuda_mem_mb", _gigabytes),
            "GB"),
    )),
    ("Accuracy, best epoch, final loss", (
        Row("final test accuracy", _pair("cpu_accuracy_pct", "gpu_accuracy_pct", "%",
                                         "accuracy_gap_points", "points"), _accuracies),
        Row("best epoch", _pair("cpu_best_epoch", "gpu_best_epoch", "", "best_epoch_gap"),
            lambda inputs: "CPU " + Median("cpu", "best_epoch", count)(inputs)),
        Row("final test loss", _pair("cpu_final_loss", "gpu_final_loss", "", "final_loss_gap"),
            lambda inputs: "CPU " + Median("cpu", "final_test_loss", _loss)(inputs)),
    )),
    (f"Cost of {RUNS} trainings", (
        Row("CPU, time", lambda: f"{REF['cpu_time_s']:,.0f} s ({REF['cpu_hours']:g} h)",
            CostOfRuns("cpu", "time")),
        Row("GPU, time", lambda: f"{REF['gpu_time_s']:,.0f} s ({REF['gpu_hours']:g} h)",
            CostOfRuns("cuda", "time")),
        Row("CPU, electricity", _printed("cpu_cost", fmt=usd), CostOfRuns("cpu", "electricity")),
        Row("GPU, electricity", _printed("gpu_cost", fmt=usd), CostOfRuns("cuda", "electricity")),
        Row("CPU, total with the hardware", _printed("cpu_total_usd",
                                                     fmt=lambda v: f"${v:,.2f}"),
            CostOfRuns("cpu", "total")),
        Row("GPU, total with the hardware", _printed("gpu_total_usd",
                                                     fmt=lambda v: f"${v:,.2f}"),
            CostOfRuns("cuda", "total")),
    )),
)


def side_by_side(inputs: Inputs, note: str) -> list[dict]:
    """The blog's tables, row by row, beside this study's numbers."""
    return [{"table": title,
             "rows": [{"what": row.label, "blog": row.blog_figure(), "ours": row.ours(inputs),
                       "note": note if row.note is None else row.note} for row in rows]}
            for title, rows in BLOG_TABLES]


def context(inputs: Inputs) -> dict:
    cells = inputs.cells
    note = blog.subset(cells) or ""
    return {
        "blog_subset": note,
        "blog_subset_detail": blog.subset_detail(cells) or "",
        "blog_side": side_by_side(inputs, note),
        "blog_checks": claims.checks(inputs),
    }
