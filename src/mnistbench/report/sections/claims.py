"""The blog's claims, each checked by code (part of section 3, read by the verdict box too):
every claim of the post (../shared/blog/README.md) ends *confirmed*, *contradicted* or *not
checkable*, with the numbers, decided by the rules of :mod:`mnistbench.report.blog`. A claim
this study's data cannot test says why in a few words.

Each check is a :class:`Check`: the claim, its :class:`~mnistbench.report.blog.Verdict`, the
numbers and the rule that decided it, a few words for the verdict box and a rank (lower: a
stronger finding, named first in the verdict box). Comparisons of times and accuracy use the
blog's code as written where this study ran it (:func:`mnistbench.report.selections.blog_code`)
and say which code they use; a subset of the blog's settings makes them not checkable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mnistbench.report import blog, comparison
from mnistbench.report.blog import Verdict
from mnistbench.report.formatting import (
    as_printed,
    count,
    interval,
    num,
    points,
    points_interval,
    ratio_phrase,
    runs,
    seconds,
    usd,
)
from mnistbench.report.sections import threads
from mnistbench.report.selections import (
    CODE,
    Inputs,
    blog_code,
    code_label,
    col,
    device_name,
    distinct,
    hardware,
    loader_name,
    median,
    ok,
    phases,
    primary_env,
    seed_spread,
    sweep_medians,
)
from mnistbench.results import stats

REF = blog.FIGURES
RUNS = REF["cost_runs"]
EPOCHS = blog.BLOG_SETTINGS["epochs"]
#: MiB in a GB (the blog's unit).
MIB_PER_GB = 1e9 / 2 ** 20
#: Rank of a claim the data cannot test (never named in the verdict box).
UNTESTED = 99


def _pct(share: float) -> str:
    return f"{100 * share:g} %"


#: The one rule of each claim (by the start of its title), applied alike and written beside
#: it on the page. A figure that depends on the machine is checked only on the blog's
#: hardware; one of the code (memory) on any machine; the blog's arithmetic on its own
#: figures; a measured ratio by its interval, "not distinguishable" when that holds 1.
RULES: tuple[tuple[str, str], ...] = (
    ("The title's", "confirmed when the tables' figure, rounded to one significant figure, "
                    "is the title's"),
    ("The model", "confirmed when the printed layers compose (the blog's code, checked by "
                  "arithmetic)"),
    (as_printed(REF["speedup"], "×"),
     "confirmed when this study's interval of the GPU/CPU speed-up holds the blog's figure, "
     "contradicted when not; not checkable without an interval or on a data subset; a "
     "speed-up across machines is said to be one"),
    ("The CPU epoch", "a figure of the machine: checked only on the blog's CPU model, by the "
                      "interval of the epoch time"),
    ("The GPU epoch", "a figure of the machine: checked only on the blog's GPU model, by the "
                      "interval of the epoch time"),
    ("The speed-up column", "the blog's arithmetic: confirmed when each printed ratio is its "
                            f"own figures divided, within {_pct(blog.ARITHMETIC_TOLERANCE)}"),
    ("What the CPU epoch", "the blog's arithmetic: contradicted when its phases leave part of "
                           "its epoch unexplained"),
    ("Data loading is not", "contradicted when data loading is the longest phase of a "
                            "training step on any device measured, confirmed when on none"),
    ("The GPU's advantage", "confirmed when backprop has the largest CPU/GPU ratio of the "
                            "phases (across machines: said so)"),
    ("Single core", f"confirmed when the training process averages at most "
                    f"{blog.SINGLE_CORE_MAX_PCT:g} % of a core on a machine of 2 cores or more"),
    ("Memory about", "a figure of the code, not the machine: confirmed within "
                     f"{_pct(blog.SAME_CODE_TOLERANCE)}"),
    ("GPU utilisation", "a figure of the machine: checked only on the blog's GPU model, "
                        "within 10 %"),
    ("GPU memory", f"a figure of the code: confirmed within {_pct(blog.SAME_CODE_TOLERANCE)}"),
    ("Small batches", "confirmed when the GPU's throughput over the CPU's grows from the "
                      "smallest batch measured to the largest"),
    ("FP16", "confirmed when the interval of the speed-up lies above 1, contradicted below, "
             "not distinguishable when it holds 1"),
    ("Final accuracy", "confirmed when the blog's figure lies within this study's repeats "
                       "widened by their spread, contradicted outside"),
    ("Best epoch", "confirmed when the blog's figure lies within this study's repeats "
                   "widened by their spread, contradicted outside"),
    ("Final loss", "confirmed when the blog's figure lies within this study's repeats "
                   "widened by their spread, contradicted outside"),
    ("The accuracy gap", "a gap within the seed-to-seed spread is no device effect; a larger "
                         "one is confirmed when this study's device difference excludes 0"),
    ("The blog's GPU tips", "each tip confirmed when it pays off per sample, contradicted "
                            "when slower or costing accuracy, not distinguishable within "
                            "noise; the claim takes the verdict most of its tips share"),
    ("Electricity of", "the blog's arithmetic: confirmed when its printed figure is power × "
                       f"time × price within {_pct(blog.ARITHMETIC_TOLERANCE)}"),
    ("The electricity saving", "the blog's arithmetic, within "
                               f"{_pct(blog.ARITHMETIC_TOLERANCE)}"),
    ("The total cost", "contradicted: a machine's price is written off over its life of use, "
                       "not charged to the runs"),
    ("The GPU pays for itself", "confirmed when its break-even takes at most "
                                f"{_pct(blog.QUICK_SHARE_OF_LIFE)} of the machines' life of "
                                "use"),
)


def rule_of(title: str) -> str:
    """The rule of the claim titled ``title`` (a claim this study cannot test: none)."""
    return next((rule for start, rule in RULES if title.startswith(start)),
                "none: this study does not measure it")


@dataclass(frozen=True)
class Check:
    """One claim of the blog, checked: its title and words (``claim``), the verdict, the
    numbers that decided it (a sentence) and the rule (:func:`rule_of`); ``short``: a few
    words for the verdict box ("" for a claim never named there), ``rank``: lower is a
    stronger finding, named first in the verdict box."""

    title: str
    claim: str
    verdict: Verdict
    numbers: str
    rule: str
    short: str = ""
    rank: int = UNTESTED

    def __post_init__(self) -> None:
        if not isinstance(self.verdict, Verdict):
            raise TypeError(f"the check {self.title!r} has no Verdict: {self.verdict!r}")

    @property
    def verdict_class(self) -> str:
        """The verdict's CSS class: its words joined by hyphens ("not-checkable")."""
        return self.verdict.value.replace(" ", "-")


def _check(title: str, claim: str, verdict: Verdict, numbers: str, *, short: str = "",
           rank: int = UNTESTED) -> Check:
    numbers = numbers.strip()
    return Check(title, claim, verdict, numbers if numbers.endswith(".") else numbers + ".",
                 rule_of(title), short, rank)


def _worst(verdicts: list[Verdict]) -> Verdict:
    """One verdict of several parts: contradicted if any part is, confirmed if every part
    that could be checked is, not checkable if none could."""
    checked = [v for v in verdicts if v != Verdict.NOT_CHECKABLE]
    if not checked:
        return Verdict.NOT_CHECKABLE
    return Verdict.holds(Verdict.CONTRADICTED not in checked)


def _where(inputs: Inputs, env) -> str:
    return f" on {env}" if inputs.multi_env else ""


# ---------------------------------------------------------------------------- the blog alone

def _model() -> Check:
    one_pool, two_pools = blog.flattened_features(False), blog.flattened_features(True)
    verdict = Verdict.holds(two_pools == REF["fc1_in_features"])
    return _check(
        "The model",
        f"The printed forward() (a max-pool after each convolution) feeds fc1 = "
        f"Linear({REF['fc1_in_features']}, 128).", verdict,
        f"Two 3x3 convolutions and one 2x2 pool leave 28 → 26 → 24 → 12: 12 × 12 × 64 = "
        f"{one_pool:,} features; a pool after each convolution leaves 28 → 26 → 13 → 11 → 5: "
        f"5 × 5 × 64 = {two_pools:,}, which fc1 cannot take, so the printed code fails. This "
        f"study trains the network the layer sizes describe ({one_pool:,} features)",
        short=f"its printed model cannot run ({two_pools:,} features reach a layer that takes "
              f"{REF['fc1_in_features']:,})", rank=1)


def _electricity() -> list[Check]:
    checks = []
    for key, name, rank in (("cpu", "CPU", 0), ("gpu", "GPU", 6)):
        secs = blog.training_seconds(REF[f"{key}_epoch_s"])
        power = REF[f"{key}_power_w"]
        right = blog.energy_cost(power, secs, REF["price_per_kwh"])
        printed = REF[f"{key}_cost"]
        factor = printed / right
        hours = (f"; its {as_printed(REF[f'{key}_hours'], 'h')} is {RUNS} runs × {EPOCHS} epochs"
                 f" × {as_printed(REF[f'{key}_epoch_s'], 's')} = {secs:,.0f} s")
        checks.append(_check(
            f"Electricity of {RUNS} {name} trainings",
            f"{RUNS} trainings on the {name} cost {usd(printed)} in electricity.",
            blog.verdict_arithmetic(printed, right),
            f"{as_printed(power, 'W')} (the blog's {name} system power) × "
            f"{num(secs / 3600, 3, 'h')} × {usd(REF['price_per_kwh'])}/kWh = {usd(right)}, "
            f"not {usd(printed)} ({num(factor, 3, '×')} too high){hours}",
            short=f"its {name} electricity is {num(factor, 2, '×')} too high ({usd(right)}, "
                  f"not {usd(printed)})", rank=rank))
    return checks


def _corrected_costs() -> tuple[float, float]:
    cpu = blog.energy_cost(REF["cpu_power_w"], blog.training_seconds(REF["cpu_epoch_s"]),
                           REF["price_per_kwh"])
    gpu = blog.energy_cost(REF["gpu_power_w"], blog.training_seconds(REF["gpu_epoch_s"]),
                           REF["price_per_kwh"])
    return cpu, gpu


def _saving(inputs: Inputs) -> Check:
    cpu, gpu = _corrected_costs()
    printed = 100 * (1 - REF["gpu_cost"] / REF["cpu_cost"])
    right = 100 * (1 - gpu / cpu)
    here = _measured_saving(inputs)
    return _check(
        "The electricity saving",
        f"The GPU saves {as_printed(REF['electricity_saving_pct'], '%')} of the electricity.",
        blog.verdict_arithmetic(REF["electricity_saving_pct"], right),
        f"From its printed figures 1 − {usd(REF['gpu_cost'])} / {usd(REF['cpu_cost'])} = "
        f"{num(printed, 3, '%')}; from the corrected ones 1 − {usd(gpu)} / {usd(cpu)} = "
        f"{num(right, 3, '%')}: both are about 10× too high, so their ratio survives. {here}",
        short=f"its {as_printed(REF['electricity_saving_pct'], '%')} electricity saving "
              "(the two 10× errors cancel)", rank=8)


def _measured_saving(inputs: Inputs) -> str:
    rows = {(r.env, r.device, r.loader): r for r in inputs.cost_report.rows}
    kinds = {k: set(g[CODE]) for k, g in inputs.cells.groupby(["env", "device", "loader"])}
    for (env, device, loader), row in sorted(rows.items()):
        gpu = rows.get((env, "cuda", loader))
        if device != "cpu" or gpu is None or kinds.get((env, "cpu", loader)) != kinds.get(
                (env, "cuda", loader)) or not row.energy_wh.value or gpu.energy_wh.value is None:
            continue
        label = code_label(inputs.cells[(inputs.cells["env"] == env)
                                        & (inputs.cells["loader"] == loader)])
        return (f"Here{_where(inputs, env)} ({label}) a GPU run takes "
                f"{num(gpu.energy_wh.value, 3, 'Wh')} against {num(row.energy_wh.value, 3, 'Wh')}"
                f" on the CPU: {num(100 * (1 - gpu.energy_wh.value / row.energy_wh.value), 3, '%')}"
                " less")
    return ("This study has no CPU and GPU runs of the same code on one machine to measure it "
            "on (energy is not compared across machines)")


def _own_arithmetic() -> Check:
    parts = [("per epoch", REF["speedup"], REF["cpu_epoch_s"] / REF["gpu_epoch_s"]),
             ("in total", REF["total_speedup"], REF["cpu_total_s"] / REF["gpu_total_s"]),
             ("data loading", REF["data_speedup"], REF["cpu_data_s"] / REF["gpu_data_s"]),
             ("backprop", REF["backward_speedup"], REF["cpu_backward_s"] / REF["gpu_backward_s"]),
             ("time saved", REF["time_saving_pct"],
              100 * (1 - REF["gpu_time_s"] / REF["cpu_time_s"]))]
    verdicts = [blog.verdict_arithmetic(printed, right) for _, printed, right in parts]
    return _check(
        "The speed-up column and the time saving",
        f"The GPU is {as_printed(REF['speedup'], '×')} faster per epoch and in total, "
        f"{as_printed(REF['data_speedup'], '×')} in data loading, "
        f"{as_printed(REF['backward_speedup'], '×')} in backprop, and saves "
        f"{as_printed(REF['time_saving_pct'], '%')} of the time.", _worst(verdicts),
        "; ".join(f"{what}: {num(right, 3)} (printed {as_printed(printed)})"
                  for what, printed, right in parts)
        + ": each ratio is the blog's own figures divided, to the digits it prints",
        short="its speed-up column is its own figures divided", rank=20)


def _title(inputs: Inputs) -> Check:
    verdict = blog.verdict_round_figure(REF["title_speedup"], REF["speedup"])
    measured = _kind_speedups(inputs)
    return _check(
        "The title's 10×",
        f"The title: \"a {as_printed(REF['title_speedup'])}x speed difference\"; its tables "
        f"say {as_printed(REF['speedup'], '×')}.", verdict,
        f"{as_printed(REF['speedup'], '×')} to one significant figure is "
        f"{num(blog.one_significant_figure(REF['speedup']), 2, '×')}: the title rounds its "
        "tables. This study's speed-ups: " + (
            measured or "none (" + comparison.device_absence(inputs.summary, "cuda") + ")"),
        short="the title's 10× rounds its tables' 11.3×", rank=19)


def _hardware_total(inputs: Inputs) -> Check:
    model = inputs.model
    parts = []
    for key, device in (("cpu", "cpu"), ("gpu", "cuda")):
        spec = model.devices[device]
        secs = REF[f"{key}_time_s"]
        share = blog.hardware_write_off(REF[f"{key}_hardware_usd"], secs, spec.life_years,
                                        spec.hours_per_year)
        parts.append(f"{device_name(device)}: ${REF[f'{key}_hardware_usd']:,.0f} over "
                     f"{num(spec.life_years, 2)} years × {num(spec.hours_per_year, 4)} h is "
                     f"{usd(share)} for {REF[f'{key}_time_s']:,.0f} s")
    return _check(
        f"The total cost of {RUNS} trainings",
        f"{RUNS} trainings cost ${REF['cpu_total_usd']:,.2f} on the CPU and "
        f"${REF['gpu_total_usd']:,.2f} on the GPU, hardware included.", Verdict.CONTRADICTED,
        f"The totals add the whole price of each machine to {RUNS} runs, which occupy it "
        f"for {as_printed(REF['cpu_hours'], 'h')} and {as_printed(REF['gpu_hours'], 'h')}. "
        "Written off over its life of use (the cost model's life and hours, an assumption): "
        + "; ".join(parts),
        short=f"its totals add the whole hardware price to {RUNS} runs", rank=4)


def _payback(inputs: Inputs) -> Check:
    model = inputs.model
    cpu, gpu = _corrected_costs()
    extra = REF["gpu_hardware_usd"] - REF["cpu_hardware_usd"]
    saving_el = (cpu - gpu) / RUNS
    saved_s = REF["cpu_total_s"] - REF["gpu_total_s"]
    wait = model.wait_value_per_hour
    saving_all = saving_el + saved_s / 3600 * wait
    life = model.devices["cuda"].life_years * model.devices["cuda"].hours_per_year
    runs_el = extra / saving_el if saving_el > 0 else math.inf
    runs_all = extra / saving_all if saving_all > 0 else math.inf
    verdict = blog.verdict_pays_back(runs_all, REF["gpu_total_s"], life)
    numbers = (f"From the blog's figures: the GPU machine costs ${extra:,.0f} more; a run saves "
               f"{usd(saving_el)} of electricity (corrected), paid back after "
               f"{runs(runs_el)} ({num(runs_el * REF['gpu_total_s'] / 3600, 3, 'h')} of GPU "
               f"training, against a life of {num(life, 4, 'h')}); counting the "
               f"{seconds(saved_s)} of waiting it saves at {num(wait, 3)} an hour (the cost "
               f"model's assumed value of waiting, read as dollars), after {runs(runs_all)} "
               f"({num(runs_all * REF['gpu_total_s'] / 3600, 3, 'h')}). Quickly: within "
               f"{num(100 * blog.QUICK_SHARE_OF_LIFE, 2, '%')} of that life")
    here = [b for b in inputs.cost_report.break_even if _same_kind(inputs, b.env, b.loader)]
    if here:
        b = here[0]
        numbers += (f". Here{_where(inputs, b.env)}: {runs(b.runs_with_waiting)} counting "
                    f"waiting, {runs(b.runs_electricity)} on electricity alone")
    return _check(
        "The GPU pays for itself quickly",
        "For long, heavy training the GPU's extra investment is quickly paid back by the "
        "time it saves.", verdict, numbers,
        short=f"the GPU pays for itself by the time it saves ({runs(runs_all)}), never by "
              "its electricity", rank=7)


def _same_kind(inputs: Inputs, env, loader) -> bool:
    part = inputs.cells[(inputs.cells["env"] == env) & (inputs.cells["loader"] == loader)]
    kinds = {d: set(part.loc[part["device"] == d, CODE]) for d in ("cpu", "cuda")}
    return len(kinds["cpu"]) == 1 and kinds["cpu"] == kinds["cuda"]


# ---------------------------------------------------------------------------- speed

def _kind_speedups(inputs: Inputs) -> str:
    """Each kind of code's GPU/CPU speed-ups, on one machine first, else across machines
    (labelled)."""
    parts = []
    for kind in ("blog", "best", ""):
        cells = inputs.cells[inputs.cells[CODE] == kind]
        for found in comparison.pairs(inputs.summary, cells):
            env = found.gpu_env
            for loader in sorted(set(cells.loc[cells["env"] == env, "loader"])):
                est = comparison.ratio(cells, found, loader, code=kind)
                if est is not None:
                    part = cells[(cells["env"] == env) & (cells["loader"] == loader)]
                    where = _where(inputs, env) if found.one_machine else f", {found.label()}"
                    parts.append(f"{code_label(part)}{where}: {num(est.value, 3, '×')}")
    return "; ".join(parts)


def _speedups(inputs: Inputs, note: str) -> list[Check]:
    summary, cells = inputs.summary, inputs.cells
    title = as_printed(REF["speedup"], "×")
    claim = f"A GPU trains this model {title} faster than a CPU."
    checks = []
    for kind in ("blog", "best"):
        label = blog_label(kind)
        frame = cells[cells[CODE] == kind]
        found = comparison.pair(summary, frame)
        if found is None:
            why = (f"No GPU and CPU cells of {label} in any environment of this study ("
                   + ("; ".join(comparison.device_absence(summary, d) for d in ("cpu", "cuda")
                                if frame[frame["device"] == d].empty)) + ")")
            checks.append(_check(f"{title}, {label}", claim, Verdict.NOT_CHECKABLE, why))
            continue
        env = found.gpu_env
        loader = sorted(set(frame.loc[frame["env"] == env, "loader"]))[0]
        est = comparison.ratio(frame, found, loader, code=kind)
        if est is None:
            checks.append(_check(f"{title}, {label}", claim, Verdict.NOT_CHECKABLE,
                                 f"No CPU cell of {label} with {loader_name(loader)}"))
            continue
        verdict, why = blog.verdict_in_interval(REF["speedup"], est)
        where = (_where(inputs, env) if found.one_machine else f", {found.label()}")
        numbers = (f"Here{where}: {ratio_phrase(est)} "
                   f"({hardware(summary, env, 'cuda')} against "
                   f"{hardware(summary, found.cpu_env, 'cpu')}); {title} is {why} (the rule: "
                   "confirmed when the interval holds the blog's figure)")
        if note:
            verdict, numbers = Verdict.NOT_CHECKABLE, f"{numbers}; {note}"
        scope = "" if found.one_machine else f", {comparison.ACROSS_MACHINES}"
        checks.append(_check(f"{title}, {label}", claim, verdict, numbers,
                             short=f"{title} with {label}: {num(est.value, 3, '×')} here{scope}",
                             rank=2 if kind == "blog" else 3))
    return checks


def blog_label(kind: str) -> str:
    """The kind of code in words ("the blog's code as written", "this project's best
    code")."""
    from mnistbench.core import study

    return study.CODE_LABELS[kind]


def _epochs(inputs: Inputs, note: str) -> list[Check]:
    checks, cells = [], inputs.cells
    for device, key, column, marker in (("cpu", "cpu_epoch_s", "cpu_model", "12700K"),
                                        ("cuda", "gpu_epoch_s", "gpu_name", "4090")):
        name = blog.BLOG["cpu" if device == "cpu" else "gpu"]
        title = f"The {device_name(device)} epoch on the blog's hardware"
        claim = f"An epoch takes {as_printed(REF[key], 's')} on the {name}."
        mine = cells[(cells["device"] == device) & (cells[CODE] == "blog")]
        same = (mine[mine[column].map(lambda v, m=marker: m in str(v))]
                if column in mine.columns else mine.iloc[0:0])
        est = stats.median_ci(col(same, "epoch_s_median"))
        if est is None:  # no cell of the blog's code on this model (with an epoch time)
            here = ", ".join(distinct(cells[cells["device"] == device], column)) \
                if column in cells.columns else ""
            checks.append(_check(
                title, claim, Verdict.NOT_CHECKABLE,
                f"No cell ran the blog's code as written on the {name}"
                + (f" (here: {here}): another machine's epoch says nothing about it" if here
                   else "")))
            continue
        verdict, why = blog.verdict_in_interval(REF[key], est)
        numbers = (f"Here, the blog's code on the same {device_name(device)} model: "
                   f"{seconds(est.value)} ({interval(est, 's')}); {as_printed(REF[key], 's')} "
                   f"is {why}")
        if note:
            verdict, numbers = Verdict.NOT_CHECKABLE, f"{numbers}; {note}"
        checks.append(_check(title, claim, verdict, numbers,
                             short=f"its {device_name(device)} epoch: "
                                   f"{seconds(est.value)} here on the same model", rank=5))
    return checks


# ---------------------------------------------------------------------------- phases

def _blog_phases(inputs: Inputs, device: str):
    """(phases of the blog's code on ``device``, where they come from)."""
    cells, source = blog_code(inputs, device)
    return (phases(cells) if not cells.empty else None), source


def _unexplained(inputs: Inputs) -> Check:
    unexplained, epoch = blog.unexplained_s("cpu"), REF["cpu_epoch_s"]
    numbers = (f"{as_printed(epoch, 's')} − {as_printed(REF['cpu_data_s'], 's')} − "
               f"{as_printed(REF['cpu_backward_s'], 's')} leaves {num(unexplained, 3, 's')} "
               f"({num(100 * unexplained / epoch, 2, '%')}) of the blog's CPU epoch unexplained "
               f"(on the GPU {num(blog.unexplained_s('gpu'), 2, 's')} of "
               f"{as_printed(REF['gpu_epoch_s'], 's')}).")
    here, source = _blog_phases(inputs, "cpu")
    if here is not None:
        rest = here["epoch"] - here["data"] - here["backward"]
        numbers += (f" Here ({source}) data loading {seconds(here['data'])} and backprop "
                    f"{seconds(here['backward'])} leave {seconds(rest)} "
                    f"({num(100 * rest / here['epoch'], 2, '%')}) of the "
                    f"{seconds(here['epoch'])} epoch: the forward pass "
                    f"{seconds(here['forward'])}, the optimizer {seconds(here['optimizer'])}, "
                    f"the test-set evaluation {seconds(here['eval'])} and the loop "
                    f"{seconds(here['other'])}, which the blog's table leaves out")
    else:
        numbers += f" {source[0].upper()}{source[1:]}"
    return _check(
        "What the CPU epoch's phases leave unexplained",
        f"Data loading and backprop account for the {as_printed(epoch, 's')} CPU epoch.",
        Verdict.CONTRADICTED, numbers,
        short=f"its phases leave {num(unexplained, 3, 's')} of its CPU epoch unexplained",
        rank=9)


def _step_share(p) -> str:
    step = sum(p[k] for k in ("data", "forward", "backward", "optimizer"))
    return (f"data loading {seconds(p['data'])} of a {seconds(step)} training epoch "
            f"({num(100 * p['data'] / step, 2, '%')}), the longest phase "
            f"{PHASE_WORDS[blog.largest_phase(p)]} ({seconds(p[blog.largest_phase(p)])})")


PHASE_WORDS = {"data": "data loading", "forward": "the forward pass",
               "backward": "the backward pass", "optimizer": "the optimizer step"}


def _bottleneck(inputs: Inputs) -> Check:
    measured, parts = [], []
    for device in ("cpu", "cuda"):
        p, source = _blog_phases(inputs, device)
        if p is None:
            parts.append(f"{device_name(device)}: {source}")
            continue
        measured.append(p)
        parts.append(f"{device_name(device)} ({source}): {_step_share(p)}")
    blog_share = 100 * REF["gpu_data_s"] / REF["gpu_epoch_s"]
    return _check(
        "Data loading is not the bottleneck",
        f"Data loading differs little ({as_printed(REF['cpu_data_s'], 's')} against "
        f"{as_printed(REF['gpu_data_s'], 's')}), so I/O is not the bottleneck.",
        blog.verdict_not_bottleneck(measured),
        "Here, with the blog's code: " + "; ".join(parts) + ". The inference itself does not "
        f"follow: on the blog's GPU data loading is {num(blog_share, 2, '%')} of the epoch",
        short="data loading is not the bottleneck of the blog's code", rank=10)


def _backprop_advantage(inputs: Inputs) -> Check:
    claim = ("The GPU's advantage is largest in backpropagation "
             f"({as_printed(REF['backward_speedup'], '×')}).")
    cpu_cells, cpu_source = blog_code(inputs, "cpu")
    gpu_cells, gpu_source = blog_code(inputs, "cuda")
    title = "The GPU's advantage is largest in backprop"
    cpu, gpu = phases(cpu_cells), phases(gpu_cells)
    if cpu is None or gpu is None:
        return _check(title, claim, Verdict.NOT_CHECKABLE,
                      "Needs the blog's code on a CPU and a GPU; "
                      + (gpu_source if gpu is None else cpu_source))
    one = set(cpu_cells["env"]) == set(gpu_cells["env"])
    where = (gpu_source if one else f"{comparison.ACROSS_MACHINES}, not like for like: "
             f"{gpu_source} against {cpu_source}")
    ratios = {p: cpu[p] / gpu[p] for p in PHASE_WORDS if gpu[p] > 0}
    top = max(ratios, key=ratios.__getitem__)
    return _check(title, claim, Verdict.holds(top == "backward"),
                  f"Here ({where}), per phase, the CPU's time over the GPU's: " + "; ".join(
                      f"{PHASE_WORDS[p]} {num(r, 3, '×')}" for p, r in ratios.items())
                  + " (the rule: confirmed when backprop has the largest ratio)",
                  short=f"the GPU's largest advantage is in {PHASE_WORDS[top]}", rank=11)


# ---------------------------------------------------------------------------- resources

def _cpu_use(inputs: Inputs) -> Check:
    cells, source = blog_code(inputs, "cpu")
    claim = "On the CPU, single-core use is close to 100 %: no effective parallel computation."
    use = median(col(cells, "cpu_pct_mean"))
    cores = median(col(cells, "cpu_cores_logical"))
    verdict = blog.verdict_single_core(use, int(cores) if cores else None)
    curve = threads.parallel(inputs)  # the threads experiment decides it where it ran
    if curve is not None and curve[0] != Verdict.NOT_CHECKABLE:
        gain_verdict, numbers, _ = curve
        short = ("the blog's code gains little from more threads here" if
                 gain_verdict == Verdict.CONFIRMED else
                 "the blog's code trains faster on more threads here")
        return _check("Single core near 100 %", claim, gain_verdict,
                      f"Decided by the threads experiment: {numbers}", short=short, rank=6)
    if use is None:
        return _check("Single core near 100 %", claim, verdict, source)
    numbers = (f"Here ({source}) the training process used {num(use, 3, '%')} of a core on "
               f"average (100 % = one core): {num(use / 100, 2)} of the machine's "
               f"{count(cores)} cores; PyTorch runs its operators on a thread per core")
    return _check("Single core near 100 %", claim, verdict, numbers,
                  short=f"its CPU run is single-core: the same code keeps {num(use / 100, 2)} "
                        f"of {count(cores)} cores busy here", rank=6)


def _memory(inputs: Inputs) -> Check:
    cells, source = blog_code(inputs, "cpu")
    claim = f"The CPU run takes about {as_printed(REF['memory_gb'], 'GB')} of memory."
    rss = median(col(cells, "peak_rss_mb"))
    if rss is None:
        return _check("Memory about 3.2 GB", claim, Verdict.NOT_CHECKABLE, source)
    gb = rss / MIB_PER_GB
    verdict = blog.verdict_relative(REF["memory_gb"], gb)
    return _check(
        "Memory about 3.2 GB", claim, verdict,
        f"Here ({source}) the training process peaks at {num(gb, 2, 'GB')} "
        f"({num(rss, 3, 'MiB')}) resident, {num(gb / REF['memory_gb'], 2, '×')} the blog's; "
        f"the blog's recipe as far as it can run and the same data take the same memory "
        f"on any machine (the rule: confirmed "
        f"within {num(100 * blog.SAME_CODE_TOLERANCE, 2, '%')}); the blog's figure may be the "
        "whole system's", short=f"its {as_printed(REF['memory_gb'], 'GB')}: its recipe peaks at "
                          f"{num(gb, 2, 'GB')} here", rank=8)


def _gpu_resource(inputs: Inputs, *, title, claim, column, claimed, to_unit, unit,
                  tolerance) -> Check:
    cells, source = blog_code(inputs, "cuda")
    value = median(col(cells, column))
    if value is None:
        return _check(title, claim, Verdict.NOT_CHECKABLE,
                      "Needs the blog's code on a GPU: " + source)
    measured = to_unit(value)
    return _check(title, claim, blog.verdict_relative(claimed, measured, tolerance),
                  f"Here ({source}): {num(measured, 3, unit)} against "
                  f"{as_printed(claimed, unit)} (the rule: confirmed within "
                  f"{num(100 * tolerance, 2, '%')})",
                  short=f"{title}: {num(measured, 3, unit)} here", rank=12)


def _peak(value) -> str:
    return "its peak not recorded" if value is None else f"{num(value, 3, '%')} peak"


def _gpu_util(inputs: Inputs) -> Check:
    """GPU utilisation depends on the GPU (a larger GPU is busier for less of the time): like
    the epoch times, it is checked only on the blog's GPU model."""
    title = "GPU utilisation peaks at 98 %"
    cells, _ = blog_code(inputs, "cuda")
    names = distinct(cells, "gpu_name")
    if names and not any("4090" in n for n in names):
        return _check(title, f"GPU utilisation peaks at {as_printed(REF['gpu_util_peak_pct'])} "
                      "%.", Verdict.NOT_CHECKABLE,
                      f"Measured here on another GPU ({', '.join(names)}; the rule: a figure "
                      f"that depends on the machine, like the epoch times, is checked only on "
                      f"the blog's {blog.BLOG['gpu']}): "
                      + _peak(median(col(cells, "gpu_util_peak"))))
    return _gpu_resource(inputs, title="GPU utilisation peaks at 98 %",
                         claim=f"GPU utilisation peaks at {as_printed(REF['gpu_util_peak_pct'])} "
                               "%.", column="gpu_util_peak", claimed=REF["gpu_util_peak_pct"],
                         to_unit=float, unit="%", tolerance=0.1)


def _gpu_memory(inputs: Inputs) -> Check:
    return _gpu_resource(inputs, title="GPU memory about 1.8 GB",
                         claim=f"The GPU run takes about {as_printed(REF['gpu_memory_gb'], 'GB')}"
                               " of GPU memory.", column="peak_cuda_mem_mb",
                         claimed=REF["gpu_memory_gb"], to_unit=lambda v: v / MIB_PER_GB,
                         unit="GB", tolerance=blog.SAME_CODE_TOLERANCE)


# ---------------------------------------------------------------------------- accuracy

def _accuracy_cells(inputs: Inputs):
    """(convergence cells to compare the blog's accuracy with, their label): the blog's code
    where it ran, else the DataLoader's cells (the same function)."""
    cells = inputs.cells[inputs.cells["experiment"] == "convergence"]
    part = cells[cells[CODE] == "blog"]
    if part.empty:
        part = cells[cells["loader"] == blog.BLOG_LOADER]
    return part, (code_label(part) if not part.empty else "no convergence cells")


def _per_device(inputs: Inputs, note, *, title, column, keys, fmt, rank) -> Check:
    cells, label = _accuracy_cells(inputs)
    verdicts, parts = [], []
    for device, key in (("cpu", keys[0]), ("cuda", keys[1])):
        mine = cells[cells["device"] == device]
        first = primary_env(inputs.summary)
        envs = sorted(set(mine["env"]), key=lambda e: (e != first, e))
        values = col(mine[mine["env"] == envs[0]], column) if envs else []
        claimed = REF[key]
        if not values:
            parts.append(f"{device_name(device)} {fmt(claimed)}: not measured here")
            verdicts.append(Verdict.NOT_CHECKABLE)
            continue
        verdict, why = blog.verdict_within_spread(claimed, values)
        verdicts.append(verdict)
        shown = ", ".join(fmt(v) for v in sorted(values))
        parts.append(f"{device_name(device)} {fmt(claimed)} against {shown} here"
                     f"{_where(inputs, envs[0])}: {why}")
    verdict, numbers = _worst(verdicts), f"With {label}: " + "; ".join(parts)
    if note and verdict != Verdict.NOT_CHECKABLE:
        verdict, numbers = Verdict.NOT_CHECKABLE, f"{numbers}; {note}"
    return _check(title, f"{title}: CPU {fmt(REF[keys[0]])}, GPU {fmt(REF[keys[1]])}.",
                  verdict, numbers, short=f"its {title.lower()}", rank=rank)


def _accuracy_gap(inputs: Inputs, note) -> Check:
    cells, label = _accuracy_cells(inputs)
    gap = REF["accuracy_gap_points"]
    spread = seed_spread(cells)
    diff, scope = None, ""
    for found in comparison.pairs(inputs.summary, cells):
        cpu = cells[(cells["env"] == found.cpu_env) & (cells["device"] == "cpu")]
        gpu = cells[(cells["env"] == found.gpu_env) & (cells["device"] == "cuda")]
        if not cpu.empty and set(cpu[CODE]) == set(gpu[CODE]):
            diff = stats.diff_ci(col(gpu, "final_test_acc"), col(cpu, "final_test_acc"))
            scope = "" if found.one_machine else f" ({found.label()})"
            break
    verdict, why = blog.verdict_accuracy_gap(gap, spread, diff)
    numbers = (f"The blog's devices differ by {as_printed(gap, 'points')} (best epoch "
               f"{REF['best_epoch_gap']:+d}, final loss {REF['final_loss_gap']:+g}). Here, with "
               f"{label}, the "
               + (f"seed-to-seed spread (max − min over repeats) is {points(spread, False)}"
                  if spread is not None else "cells have one repeat each")
               + ("" if diff is None else
                  f", and the GPU minus the CPU{scope} is {points(diff.value)} "
                  f"({points_interval(diff)})")
               + f": {why}. Its reasons (floating-point differences, random numbers) stand or "
                 "fall with the gap")
    if note and verdict != Verdict.NOT_CHECKABLE:
        verdict, numbers = Verdict.NOT_CHECKABLE, f"{numbers}; {note}"
    return _check("The accuracy gap", f"The GPU is {as_printed(gap, 'points')} more accurate.",
                  verdict, numbers, short="its accuracy gap between the devices", rank=13)


# ---------------------------------------------------------------------------- GPU advice

def _batch_size(inputs: Inputs) -> Check:
    claim = (f"A batch size too small cannot use the GPU's parallelism: train on a GPU from "
             f"batch {REF['gpu_from_batch']} up.")
    med = sweep_medians(ok(inputs.summary, "sweep"))
    fp32 = med[med["precision"] == "fp32"] if not med.empty else med
    for env in sorted(set(fp32["env"])) if not fp32.empty else []:
        part = fp32[fp32["env"] == env]
        for loader in sorted(set(part["loader"])):
            cpu = part[(part["device"] == "cpu") & (part["loader"] == loader)]
            gpu = part[(part["device"] == "cuda") & (part["loader"] == loader)]
            both = sorted(set(cpu["batch_size"]) & set(gpu["batch_size"]))
            if len(both) < 2:
                continue
            ratio = {b: float(gpu.loc[gpu["batch_size"] == b, "samples_per_s"].iloc[0])
                     / float(cpu.loc[cpu["batch_size"] == b, "samples_per_s"].iloc[0])
                     for b in both}
            grows = ratio[both[-1]] > ratio[both[0]]
            return _check(
                "Small batches waste the GPU", claim,
                Verdict.holds(grows),
                f"Here{_where(inputs, env)} (sweep, fp32, {loader_name(loader)}) the GPU's "
                "throughput over the CPU's: " + "; ".join(
                    f"batch {count(b)} {num(r, 3, '×')}" for b, r in ratio.items()),
                short="small batches waste the GPU", rank=14)
    return _check("Small batches waste the GPU", claim, Verdict.NOT_CHECKABLE,
                  "Needs sweep cells on a CPU and a GPU at two batch sizes or more")


def _fp16(inputs: Inputs) -> Check:
    claim = "Mixed precision (FP16) speeds the GPU up further."
    sweep = ok(inputs.summary, "sweep")
    gpu = sweep[sweep["device"] == "cuda"]
    for (env, loader, batch), group in gpu.groupby(["env", "loader", "batch_size"]):
        fp32 = group[group["precision"] == "fp32"]
        fp16 = group[group["precision"] == "fp16"]
        if fp32.empty or fp16.empty or batch != blog.BLOG_SETTINGS["batch_size"]:
            continue
        est = stats.ratio_ci(col(fp16, "samples_per_s"), col(fp32, "samples_per_s"))
        if est is None:  # no throughput on one side
            continue
        verdict = blog.verdict_faster(est)
        return _check("FP16 speeds the GPU up", claim, verdict,
                      f"Here{_where(inputs, env)} (sweep, batch {count(batch)}, "
                      f"{loader_name(loader)}) fp16 gives {ratio_phrase(est)} the fp32 "
                      "throughput (the rule: confirmed when the interval lies above 1, "
                      "contradicted below, not distinguishable when it holds 1)",
                      short=f"FP16 on the GPU: {num(est.value, 3, '×')}", rank=14)
    return _check("FP16 speeds the GPU up", claim, Verdict.NOT_CHECKABLE,
                  "Needs fp32 and fp16 sweep cells on a GPU at batch 128")


def _gpu_tips(inputs: Inputs) -> Check:
    from mnistbench.report.sections import tips as tips_section

    claim = ("To use the GPU well: the largest batch that fits, pin_memory=True with 4 "
             "workers, mixed precision and cudnn.benchmark = True.")
    shown, rows, _ = tips_section.tips_table(inputs.summary)
    blog_tips = ("max-batch", "pin_memory", "workers=4", "amp-fp16", "cudnn.benchmark")
    per_device: dict[str, list[tuple[str, str, str]]] = {d: [] for d in shown}
    for row in rows:
        if row["tip"] not in blog_tips:
            continue
        for device, cell in zip(shown, row["devices"], strict=True):
            if cell.get("speed"):
                per_device[device].append((row["tip"], cell["verdict"], cell["speed"]))
    gpu = per_device.get("cuda", [])
    cpu = "; ".join(f"{t} {s} ({v})" for t, v, s in per_device.get("cpu", []))
    if not gpu:
        return _check("The blog's GPU tips", claim, Verdict.NOT_CHECKABLE,
                      "No tips cell ran on a GPU" + (f"; on the CPU (where the blog does not "
                                                     f"give them): {cpu}" if cpu else ""))
    verdicts = [Verdict.CONTRADICTED if v in (blog.SLOWER, blog.COSTS_ACCURACY) else
                Verdict.CONFIRMED if v == blog.PAYS_OFF else Verdict.NOT_DISTINGUISHABLE
                for _, v, _ in gpu]
    verdict = _most(verdicts)
    paying = [t for t, v, _ in gpu if v == blog.PAYS_OFF]
    return _check("The blog's GPU tips", claim, verdict,
                  "On the GPU (speed-ups per sample): "
                  + "; ".join(f"{t} {s} ({v})" for t, v, s in gpu)
                  + (f"; on the CPU: {cpu}" if cpu else "")
                  + ". The rule: each tip confirmed when it pays off, contradicted when slower "
                    "or costing accuracy, not distinguishable within noise; the claim takes "
                    "the verdict most of its tips share (a tie: not distinguishable)",
                  short=f"of its GPU tips, {', '.join(paying) or 'none'} pay off", rank=15)


def _most(verdicts: list[Verdict]) -> Verdict:
    """The verdict most of ``verdicts`` share; a tie is not distinguishable."""
    counts = {v: verdicts.count(v) for v in set(verdicts)}
    top = max(counts.values())
    winners = [v for v, n in counts.items() if n == top]
    return winners[0] if len(winners) == 1 else Verdict.NOT_DISTINGUISHABLE


# ---------------------------------------------------------------------------- untested

UNTESTABLE = (
    ("Frequent context switches", "The CPU run switches context frequently.",
     "This study does not record context switches"),
    ("When to train on which device",
     "A CPU for small models, debugging and precise numerics; a GPU for CNNs, fast iteration "
     "and large data.", "Advice, not a measurement: the recommendations rebuild it from this "
                       "study's numbers"),
    ("The alternatives",
     "Cloud GPUs cost nothing up front, TPUs suit large-scale production, ROCm is good value, "
     "Intel XPU is unproven.", "This study runs no cloud GPU, TPU, ROCm or Intel XPU"),
)


def checks(inputs: Inputs) -> list[Check]:
    """Every claim of the blog, checked, in the order of its post."""
    note = blog.subset(inputs.cells) or ""
    untested = [_check(t, c, Verdict.NOT_CHECKABLE, why) for t, c, why in UNTESTABLE]
    return [
        _title(inputs), _model(), *_speedups(inputs, note), *_epochs(inputs, note),
        _own_arithmetic(), _unexplained(inputs), _bottleneck(inputs),
        _backprop_advantage(inputs), _cpu_use(inputs), untested[0], _memory(inputs),
        _gpu_util(inputs), _gpu_memory(inputs), _batch_size(inputs), _fp16(inputs),
        _per_device(inputs, note, title="Final accuracy", column="final_test_acc",
                    keys=("cpu_accuracy_pct", "gpu_accuracy_pct"),
                    fmt=lambda v: num(v, 3, "%"), rank=12),
        _per_device(inputs, note, title="Best epoch", column="best_epoch",
                    keys=("cpu_best_epoch", "gpu_best_epoch"), fmt=count, rank=16),
        _per_device(inputs, note, title="Final loss", column="final_test_loss",
                    keys=("cpu_final_loss", "gpu_final_loss"), fmt=lambda v: num(v, 2),
                    rank=13),
        _accuracy_gap(inputs, note), untested[1], _gpu_tips(inputs), *_electricity(),
        _saving(inputs), _hardware_total(inputs), _payback(inputs), untested[2],
    ]


def tally(found: list[Check]) -> dict[Verdict, int]:
    """How many checks end in each verdict."""
    return {v: sum(c.verdict == v for c in found) for v in Verdict}


def strongest(found: list[Check], n: int = 3) -> list[Check]:
    """The ``n`` decided checks with the strongest findings (lowest rank)."""
    decided = [c for c in found if c.verdict in (Verdict.CONFIRMED, Verdict.CONTRADICTED)
               and c.short]
    return sorted(decided, key=lambda c: c.rank)[:n]
