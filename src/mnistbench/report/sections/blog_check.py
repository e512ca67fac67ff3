"""Section 3, the blog checked: every table of the blog beside this study's numbers
(:data:`BLOG_TABLES`, a specification of rows read by :func:`side_by_side`), then each of
its claims checked by code, with a verdict and the numbers. When this study's cells at the
blog's settings are a subset, every comparison says so ("subset: N samples, not
comparable") and is not checkable.

The verdicts are decided by :mod:`mnistbench.report.blog`; this module words them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mnistbench.report import blog
from mnistbench.report.formatting import (
    as_printed,
    count,
    interval,
    money,
    num,
    plural,
    points,
    points_interval,
    ratio_phrase,
    seconds,
    usd,
)
from mnistbench.report.selections import (
    TIP_COLUMN,
    Inputs,
    col,
    distinct,
    envs_with_gpu,
    hardware,
    median,
    per_epoch,
    phases,
    seed_spread,
    speedup,
    tips_cells,
)
from mnistbench.results import stats

#: The blog's reference figures (another machine), its number of trainings in the cost
#: table and its epochs per training.
REF = blog.BLOG
RUNS = REF["cost_runs"]
EPOCHS = blog.BLOG_SETTINGS["epochs"]
ANOTHER_MACHINE = "another machine"


# ---------------------------------------------------------------------------- the side table

def _accuracy_pct(value) -> str:
    return num(value, 4, "%")


def _percent(value) -> str:
    return num(value, 3, "%")


def _mebibytes(value) -> str:
    return num(value, 3, "MiB")


def _loss(value) -> str:
    return num(value, 3)


@dataclass(frozen=True)
class Median:
    """This study's figure: the median of ``column`` on ``device`` (per epoch: divided by each
    cell's epochs) for each environment and loader, written with ``fmt``."""

    device: str
    column: str
    fmt: Callable[[object], str]
    per_epoch: bool = False

    def __call__(self, inputs: Inputs) -> str:
        cells = inputs.cells[inputs.cells["device"] == self.device]
        if cells.empty:
            return f"no ok {self.device} cell" if self.device == "cpu" else "no GPU in this study"
        parts = []
        for (env, loader), group in cells.groupby(["env", "loader"]):
            values = per_epoch(group, self.column) if self.per_epoch else col(group, self.column)
            parts.append(f"{env + ' ' if inputs.multi_env else ''}{loader}: "
                         f"{self.fmt(median(values))}")
        return "; ".join(parts)


@dataclass(frozen=True)
class Hardware:
    """This study's figure: the ``column`` (CPU model, GPU name) of every environment, or
    ``none`` where it has none."""

    column: str
    none: str

    def __call__(self, inputs: Inputs) -> str:
        summary = inputs.summary
        return "; ".join((f"{env}: " if inputs.multi_env else "")
                         + (", ".join(distinct(summary[summary["env"] == env], self.column))
                            or self.none)
                         for env in inputs.envs)


@dataclass(frozen=True)
class CostOfRuns:
    """This study's figure: the blog's number of trainings on ``device`` at this study's cost
    (electricity, and in all), and their electricity at the blog's power and price."""

    device: str

    def __call__(self, inputs: Inputs) -> str:
        power = REF["cpu_power_w" if self.device == "cpu" else "gpu_power_w"]
        price, currency = REF["price_per_kwh"], inputs.model.currency
        parts = []
        for r in inputs.cost_report.rows:
            if r.device != self.device:
                continue
            at_blog = blog.energy_cost(power, RUNS * r.run_s.value, price)
            parts.append(f"{r.env + ' ' if inputs.multi_env else ''}{r.loader}: electricity "
                         f"{money(RUNS * r.electricity.value, currency)}, in all "
                         f"{money(RUNS * r.total.value, currency)}; at the blog's "
                         f"{as_printed(power, 'W')} and {usd(price)}/kWh: {usd(at_blog)}")
        return "; ".join(parts) or f"no ok {self.device} convergence cell"


def _speedups(inputs: Inputs) -> str:
    """This study's GPU/CPU speed-up of every environment with a GPU and loader."""
    cells, speeds = inputs.cells, []
    for env in envs_with_gpu(cells):
        for loader in sorted(set(cells.loc[cells["env"] == env, "loader"])):
            est = speedup(cells, env, loader)
            if est is not None:
                speeds.append(f"{env + ' ' if inputs.multi_env else ''}{loader}: "
                              f"{ratio_phrase(est)}")
    return "; ".join(speeds) or "no GPU in this study"


def _accuracies(inputs: Inputs) -> str:
    """This study's final test accuracy on each device, and the seed-to-seed spread."""
    text = "CPU " + Median("cpu", "final_test_acc", _accuracy_pct)(inputs)
    if not inputs.cells[inputs.cells["device"] == "cuda"].empty:
        text += "; GPU " + Median("cuda", "final_test_acc", _accuracy_pct)(inputs)
    spread = seed_spread(inputs.cells)
    if spread is not None:
        text += f"; seed-to-seed spread {points(spread, False)}"
    return text


def _implied_total(key: str) -> Callable[[], str]:
    """The blog's total time of a training: its epoch ``key`` times its epochs."""
    return lambda: f"{num(EPOCHS * REF[key], 3, 's')} (implied: {EPOCHS} × the epoch)"


def _printed_cost(key: str) -> Callable[[], str]:
    return lambda: f"{usd(REF[key])} (printed)"


def _blog_accuracies() -> str:
    return (f"CPU {as_printed(REF['cpu_accuracy_pct'])}; GPU "
            f"{as_printed(REF['gpu_accuracy_pct'])}; gap "
            f"{as_printed(REF['accuracy_gap_points'], 'points')}")


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


#: The blog's tables, in its order: (title, rows).
BLOG_TABLES: tuple[tuple[str, tuple[Row, ...]], ...] = (
    ("Hardware", (
        Row("CPU", "cpu", Hardware("cpu_model", none="–"), note=ANOTHER_MACHINE),
        Row("GPU", "gpu", Hardware("gpu_name", none="none"), note=ANOTHER_MACHINE),
    )),
    ("Time per epoch and total", (
        Row("CPU, per epoch", "cpu_epoch_s", Median("cpu", "epoch_s_median", seconds), "s"),
        Row("GPU, per epoch", "gpu_epoch_s", Median("cuda", "epoch_s_median", seconds), "s"),
        Row(f"CPU, total ({plural(EPOCHS, 'epoch')})", _implied_total("cpu_epoch_s"),
            Median("cpu", "total_s", seconds)),
        Row(f"GPU, total ({plural(EPOCHS, 'epoch')})", _implied_total("gpu_epoch_s"),
            Median("cuda", "total_s", seconds)),
        Row("GPU/CPU speed-up", "speedup", _speedups, "×"),
    )),
    ("Data loading and backprop, per epoch", (
        Row("CPU, data loading", "cpu_data_s", Median("cpu", "data_s", seconds, True), "s"),
        Row("CPU, backprop", "cpu_backward_s", Median("cpu", "backward_s", seconds, True), "s"),
        Row("GPU, data loading", "gpu_data_s", Median("cuda", "data_s", seconds, True), "s"),
        Row("GPU, backprop", "gpu_backward_s", Median("cuda", "backward_s", seconds, True),
            "s"),
    )),
    ("Resources", (
        Row("CPU use (100 % = one core)", "cpu_util_pct",
            Median("cpu", "cpu_pct_mean", _percent)),
        Row("peak memory", "memory_mb", Median("cpu", "peak_rss_mb", _mebibytes)),
        Row("GPU utilisation", "gpu_util_pct", Median("cuda", "gpu_util_mean", _percent)),
    )),
    ("Accuracy, best epoch, final loss", (
        Row("final test accuracy", _blog_accuracies, _accuracies),
        Row("best epoch", "best_epoch", Median("cpu", "best_epoch", count)),
        Row("final test loss", "final_loss", Median("cpu", "final_test_loss", _loss)),
    )),
    (f"Cost of {RUNS} trainings", (
        Row("CPU", _printed_cost("cpu_cost"), CostOfRuns("cpu")),
        Row("GPU", _printed_cost("gpu_cost"), CostOfRuns("cuda")),
    )),
)


def side_by_side(inputs: Inputs, note: str) -> list[dict]:
    """The blog's tables, row by row, beside this study's numbers."""
    return [{"table": title,
             "rows": [{"what": row.label, "blog": row.blog_figure(), "ours": row.ours(inputs),
                       "note": note if row.note is None else row.note} for row in rows]}
            for title, rows in BLOG_TABLES]


# ---------------------------------------------------------------------------- the checks

def _verdict(title, claim, verdict, numbers) -> dict:
    assert verdict in blog.VERDICTS, verdict
    return {"title": title, "claim": claim, "verdict": verdict,
            "verdict_class": verdict.replace(" ", "-"), "numbers": numbers}


def _check_model() -> dict:
    one_pool, two_pools = blog.flattened_features(False), blog.flattened_features(True)
    return _verdict(
        "The model",
        f"The printed forward() (a max-pool after each convolution) feeds fc1 = "
        f"Linear({REF['fc1_in_features']}, 128).",
        blog.CONFIRMED if two_pools == REF["fc1_in_features"] else blog.CONTRADICTED,
        f"Two 3x3 convolutions and one 2x2 pool leave 28 → 26 → 24 → 12: 12 × 12 × 64 = "
        f"{one_pool:,} features; a pool after each convolution leaves 28 → 26 → 13 → 11 → 5: "
        f"5 × 5 × 64 = {two_pools:,}, which fc1 cannot take, so the printed code fails. This "
        f"study trains the network the layer sizes describe ({one_pool:,} features).")


def _check_electricity() -> list[dict]:
    checks = []
    for key, name in (("cpu", "CPU"), ("gpu", "GPU")):
        secs = blog.training_seconds(REF[f"{key}_epoch_s"])
        power = REF[f"{key}_power_w"]
        right = blog.energy_cost(power, secs, REF["price_per_kwh"])
        printed = REF[f"{key}_cost"]
        factor = printed / right
        implied = (f" ({blog.IMPLIED[f'{key}_power_w']})" if f"{key}_power_w" in blog.IMPLIED
                   else "")
        hours = (f"; the blog's {as_printed(REF['cpu_hours'], 'h')} is {RUNS} runs × {EPOCHS} "
                 f"epochs × {as_printed(REF['cpu_epoch_s'], 's')} = {num(secs, 4, 's')}"
                 if key == "cpu" else
                 f"; {num(secs / 3600, 3, 'h')} is {RUNS} runs × {EPOCHS} epochs × "
                 f"{as_printed(REF['gpu_epoch_s'], 's')} = {num(secs, 3, 's')}")
        checks.append(_verdict(
            f"Electricity of {RUNS} {name} trainings",
            f"{RUNS} trainings on the {name} cost {usd(printed)} in electricity.",
            blog.CONFIRMED if abs(factor - 1) < 0.05 else blog.CONTRADICTED,
            f"{as_printed(power, 'W')}{implied} × {num(secs / 3600, 3, 'h')} × "
            f"{usd(REF['price_per_kwh'])}/kWh = {usd(right)}, not {usd(printed)} "
            f"({num(factor, 3, '×')} too high){hours}."))
    return checks


def _check_unexplained(cells, note) -> dict:
    unexplained, epoch = REF["cpu_unexplained_s"], REF["cpu_epoch_s"]
    numbers = (f"The blog's data-loading and backprop times leave about "
               f"{as_printed(unexplained, 's')} ({num(100 * unexplained / epoch, 2)} "
               f"%) of its {as_printed(epoch, 's')} CPU epoch unexplained.")
    here = phases(cells[(cells["device"] == "cpu") & (cells["loader"] == blog.BLOG_LOADER)])
    if here is not None:
        rest = here["epoch"] - here["data"] - here["backward"]
        numbers += (f" Here (CPU, {blog.BLOG_LOADER} loader) data loading "
                    f"{seconds(here['data'])} and backprop {seconds(here['backward'])} "
                    f"leave {seconds(rest)} ({num(100 * rest / here['epoch'], 2)} %) of the "
                    f"{seconds(here['epoch'])} epoch: the forward pass "
                    f"{seconds(here['forward'])}, the optimizer {seconds(here['optimizer'])}"
                    f", the test-set evaluation {seconds(here['eval'])} and the loop "
                    f"{seconds(here['other'])}, which the blog's table leaves out"
                    + (f" ({note})." if note else "."))
    else:
        numbers += f" This study has no ok CPU cell with the {blog.BLOG_LOADER} loader."
    return _verdict(
        "What the CPU epoch's phases leave unexplained",
        f"Data loading and backprop account for the {as_printed(epoch, 's')} CPU "
        "epoch.", blog.CONTRADICTED, numbers)


def _check_speedups(inputs: Inputs, note) -> list[dict]:
    summary, cells = inputs.summary, inputs.cells
    title = as_printed(REF["speedup"], "×")
    claim = f"A GPU trains this model {title} faster than a CPU."
    tips = tips_cells(summary)
    tuned = tips[(tips["status"] == "ok") & (tips[TIP_COLUMN] == "tuned")]
    variants = [("as written (its loader, fp32, eager)", cells, blog.BLOG_LOADER),
                ("with resident data", cells, "resident"),
                ("with tuned code", tuned.assign(loader="tuned"), "tuned")]
    checks = []
    for label, frame, loader in variants:
        envs = [e for e in envs_with_gpu(frame)
                if not frame[(frame["env"] == e) & (frame["device"] == "cpu")
                             & (frame["loader"] == loader)].empty]
        if not envs:
            why = (f"No GPU and CPU cells with the {loader} loader in this study"
                   + (" (no GPU: the findings say how to add one)."
                      if cells[cells["device"] == "cuda"].empty else "."))
            if loader == "tuned":
                why = ("Not measured in this study: the tips experiment has no ok 'tuned' "
                       "cells on both devices.")
            checks.append(_verdict(f"{title}, {label}", claim, blog.NOT_CHECKABLE, why))
            continue
        env = envs[0]
        est = speedup(frame, env, loader)
        verdict, why = blog.verdict_in_interval(REF["speedup"], est)
        numbers = (f"Here{' on ' + env if inputs.multi_env else ''}: {ratio_phrase(est)} "
                   f"({hardware(summary, env, 'cuda')} against "
                   f"{hardware(summary, env, 'cpu')}); {title} is {why}")
        if note and loader != "tuned":
            verdict, numbers = blog.NOT_CHECKABLE, f"{numbers}; {note}"
        checks.append(_verdict(f"{title}, {label}", claim, verdict, numbers + "."))
    return checks


def _check_epochs(cells, note) -> list[dict]:
    checks = []
    for device, key, column, marker in (("cpu", "cpu_epoch_s", "cpu_model", "12700K"),
                                        ("cuda", "gpu_epoch_s", "gpu_name", "4090")):
        name = REF["cpu" if device == "cpu" else "gpu"]
        kind = "CPU" if device == "cpu" else "GPU"
        title = f"The {kind} epoch on the blog's hardware"
        claim = f"An epoch takes {as_printed(REF[key], 's')} on the {name}."
        mine = cells[(cells["device"] == device) & (cells["loader"] == blog.BLOG_LOADER)]
        same = (mine[mine[column].map(lambda v, m=marker: m in str(v))]
                if column in mine.columns else mine.iloc[0:0])
        if same.empty:
            here = (", ".join(distinct(cells[cells["device"] == device], column))
                    if column in cells.columns else "")
            checks.append(_verdict(
                title, claim, blog.NOT_CHECKABLE,
                f"This study has no ok {device} cell on the blog's {name} with its loader"
                + (f" (here: {here}): another machine's epoch says nothing about it."
                   if here else ".")))
            continue
        est = stats.median_ci(col(same, "epoch_s_median"))
        verdict, why = blog.verdict_in_interval(REF[key], est)
        numbers = (f"Here, on the same {kind} model: "
                   f"{seconds(est.value)} ({interval(est, 's')}); {as_printed(REF[key], 's')} "
                   f"is {why}")
        if note:
            verdict, numbers = blog.NOT_CHECKABLE, f"{numbers}; {note}"
        checks.append(_verdict(title, claim, verdict, numbers + "."))
    return checks


def _check_accuracy(cells, note) -> dict:
    gap = REF["accuracy_gap_points"]
    spread = seed_spread(cells)
    diff = None
    for env in envs_with_gpu(cells):
        same = (cells["env"] == env) & (cells["loader"] == blog.BLOG_LOADER)
        cpu = cells[same & (cells["device"] == "cpu")]
        gpu = cells[same & (cells["device"] == "cuda")]
        if not cpu.empty and not gpu.empty:
            diff = stats.diff_ci(col(gpu, "final_test_acc"), col(cpu, "final_test_acc"))
            break
    verdict, why = blog.verdict_accuracy_gap(gap, spread, diff)
    numbers = (f"The blog's devices differ by {as_printed(gap, 'points')}. Here the "
               + (f"seed-to-seed spread (max − min over repeats) is {points(spread, False)}"
                  if spread is not None else "cells have one repeat each")
               + ("" if diff is None else
                  f", and the GPU minus the CPU is {points(diff.value)} "
                  f"({points_interval(diff)})")
               + f": {why}")
    if note and verdict != blog.NOT_CHECKABLE:
        verdict, numbers = blog.NOT_CHECKABLE, f"{numbers}; {note}"
    return _verdict("The accuracy gap", f"The devices differ in accuracy by "
                    f"{as_printed(gap, 'points')}.", verdict, numbers + ".")


def context(inputs: Inputs) -> dict:
    cells = inputs.cells
    note = blog.subset(cells) or ""
    return {
        "blog_subset": note,
        "blog_subset_detail": blog.subset_detail(cells) or "",
        "blog_side": side_by_side(inputs, note),
        "blog_checks": [_check_model(), *_check_electricity(), _check_unexplained(cells, note),
                        *_check_speedups(inputs, note), *_check_epochs(cells, note),
                        _check_accuracy(cells, note)],
    }
