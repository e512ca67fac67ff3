"""The scaling half of the section "Why" (:mod:`mnistbench.report.sections.why`): the fixed
cost of a training step beside its cost per sample (:func:`mnistbench.results.scaling.fit_step_time`
over the sweep) and its table; the GPU's speed-up over the CPU by batch size (from which batch
it reaches :data:`SHARES` of its large-batch limit,
:func:`mnistbench.results.scaling.batch_for_share`) and by model size (the scale experiment's
widths) with the scale table. The wording both modules share is
:mod:`~mnistbench.report.sections.wording`.

The sentences read the cells as :mod:`~mnistbench.report.sections.why` passes them (busy
repeats discounted, the columns it reads present); every figure a column lacks reads "not
measured".
"""

from __future__ import annotations

from dataclasses import dataclass

from mnistbench.report import blog
from mnistbench.report.comparison import measured_devices
from mnistbench.report.formatting import (
    DASH,
    TableIntervals,
    count,
    num,
    plural,
    ratio_parts,
    ratio_phrase,
)
from mnistbench.report.sections.wording import (
    gflop_rate,
    limit_shares,
    not_measured,
    on_env,
    ordered_devices,
    ordered_loaders,
    percent,
    sentence,
    the_device,
    with_past_limit,
)
from mnistbench.report.selections import (
    SCALE_EXPERIMENT,
    Inputs,
    col,
    device_name,
    distinct,
    gpu_absence,
    loader_name,
    loader_phrase,
    median,
    ok,
)
from mnistbench.results import scaling, stats

_BATCH = blog.BLOG_SETTINGS["batch_size"]
assert isinstance(_BATCH, int)  # BLOG_SETTINGS mixes ints and strings: the batch size is an int
#: The blog's settings the section measures against: batch size (samples) and precision.
BLOG_BATCH: int = _BATCH
BLOG_PRECISION = blog.BLOG_SETTINGS["precision"]
#: Shares (0-1) of the large-batch speed-up whose batch size the section names.
SHARES = (0.5, 0.9)


# ---------------------------------------------------------------------------- wording

def _signed(value: float) -> str:
    """``value`` with three significant digits and a true minus sign."""
    return num(value, 3).replace("-", "−")


def _ms(seconds) -> str:
    """A step's time in milliseconds."""
    return DASH if seconds is None else f"{_signed(seconds * 1e3)} ms"


def _us(seconds) -> str:
    """A sample's time in microseconds."""
    return DASH if seconds is None else f"{_signed(seconds * 1e6)} µs"


def _per_sample(flops) -> str:
    """A model's FLOPs per training sample in GFLOP."""
    return num(flops / 1e9, 3, "GFLOP")


def _batch(value: float) -> str:
    """A fitted batch size (samples), rounded: "1 (any batch)", "2300"."""
    return "1 (any batch)" if value <= 1.0 else f"{value:.0f}"


# ---------------------------------------------------------------------------- step fits

@dataclass(frozen=True)
class Fit:
    """The step-time fit of one environment, device, precision and loader over the sweep."""

    env: str
    device: str
    precision: str
    loader: str
    fit: scaling.StepFit
    batches: int  # distinct batch sizes

    @property
    def fixed_share(self) -> float | None:
        """The fixed part's share of a step at the blog's batch size (%); 0 when the fitted
        fixed cost is not above zero."""
        return _step_share(self.fit, self.fit.fixed_s)

    @property
    def worst_residual(self) -> float | None:
        """The largest residual as a share of its point's step time (%)."""
        shares = [abs(r) / (self.fit.step_s(b) + r) * 100.0 for b, r in
                  zip(self.fit.batch_sizes, self.fit.residuals_s, strict=True)
                  if self.fit.step_s(b) + r > 0]
        return max(shares) if shares else None


def step_fits(summary) -> list[Fit]:
    """Every fit of ``t = fixed + per_sample x batch`` the sweep allows: per environment,
    device, precision and loader with ok cells at two batch sizes or more (each repeat one
    point)."""
    sweep = ok(summary, "sweep").dropna(subset=["samples_per_s", "batch_size"])
    fits = []
    for (env, device, precision, loader), group in sweep.groupby(
            ["env", "device", "precision", "loader"], sort=True):
        if group["batch_size"].nunique() < 2:
            continue
        fit = scaling.fit_step_time(group["batch_size"].tolist(),
                                    group["samples_per_s"].tolist())
        fits.append(Fit(env, device, precision, loader, fit,
                        int(group["batch_size"].nunique())))
    return fits


def _span(ci, scale: float, unit: str) -> str:
    """An interval in ``unit`` (``scale`` per second): "1.6–2.6 ms", "−0.3 to 0.6 ms"."""
    low, high = ci[0] * scale, ci[1] * scale
    return f"{_signed(low)}{' to ' if low < 0 else '–'}{_signed(high)} {unit}"


def fit_interval(item: Fit, ci, scale: float, unit: str, runs: bool = True) -> str:
    """The interval of one coefficient, with the runs it rests on unless ``runs`` is False:
    "fit interval 1.6–2.6 ms, 8 runs at 2 batch sizes", or why there is none."""
    said = f"{plural(item.fit.n, 'run')} at {plural(item.batches, 'batch size')}"
    if ci is None:
        return f"no interval: {said}"
    return f"fit interval {_span(ci, scale, unit)}" + (f", {said}" if runs else "")


def has_fixed_cost(fit: scaling.StepFit) -> bool:
    """Whether the fit finds a fixed cost above zero: its interval above zero (its value,
    without an interval)."""
    return fit.fixed_ci[0] > 0 if fit.fixed_ci is not None else fit.fixed_s > 0


def _step_share(fit: scaling.StepFit, fixed: float) -> float | None:
    """``fixed`` seconds as a share of the fitted batch-128 step (%)."""
    step = fit.step_s(BLOG_BATCH)
    return None if step <= 0 else max(0.0, fixed) / step * 100.0


def _fixed_text(item: Fit) -> str:
    """The fit of one device at one precision in a sentence: its fixed and per-sample costs
    with their intervals and the fixed share of a batch-128 step (or at most that share,
    where the fixed cost is within noise of zero)."""
    fit = item.fit
    per = (f"{_us(fit.per_sample_s)} per sample "
           f"({fit_interval(item, fit.per_sample_ci, 1e6, 'µs', runs=False)})")
    step = f"a batch-{count(BLOG_BATCH)} step"
    if has_fixed_cost(fit):
        return (f"a fixed {_ms(fit.fixed_s)} ({fit_interval(item, fit.fixed_ci, 1e3, 'ms')}) "
                f"plus {per}: the fixed part is {percent(item.fixed_share)} of {step}")
    bound = ("" if fit.fixed_ci is None or fit.fixed_ci[1] <= 0 else
             f", at most {percent(_step_share(fit, fit.fixed_ci[1]))} of {step}")
    return (f"{per}, and no fixed cost the fit can tell from zero ({_ms(fit.fixed_s)}, "
            f"{fit_interval(item, fit.fixed_ci, 1e3, 'ms')}{bound})")


def _fixed_brief(item: Fit) -> str:
    """Another precision's fit in a few words: "bf16: 2.06 ms fixed + 6.92 µs per sample
    (69.9 % of a step)"."""
    fit = item.fit
    if not has_fixed_cost(fit):
        return (f"{item.precision}: {_us(fit.per_sample_s)} per sample, no fixed cost "
                "within noise")
    return (f"{item.precision}: {_ms(fit.fixed_s)} fixed + {_us(fit.per_sample_s)} per "
            f"sample ({percent(item.fixed_share)} of a step)")


def fixed_sentences(inputs: Inputs, summary, fits: list[Fit]) -> list[str]:
    """Per environment and device: the fixed cost of a step and the cost per sample at fp32
    (with intervals), the fixed share of a batch-128 step, and the other precisions in
    brief; the GPU's "not measured" without GPU sweep cells."""
    out = []
    for env in inputs.envs:
        prefix = on_env(inputs, env)
        mine = [f for f in fits if f.env == env]
        for device in ordered_devices({f.device for f in mine}
                                       | ({"cpu", "cuda"} - measured_devices(summary))):
            on_device = [f for f in mine if f.device == device]
            if not on_device:
                why = (gpu_absence(summary[summary["env"] == env]) if device == "cuda"
                       else None) or f"no {device_name(device)} sweep cells at two batch sizes"
                out.append(sentence(prefix, not_measured(
                    f"the fixed cost of a training step on {the_device(device)}", why)))
                continue
            loader = _loaders_of(on_device)[0]
            chosen = [f for f in on_device if f.loader == loader]
            first = next((f for f in chosen if f.precision == BLOG_PRECISION), chosen[0])
            text = (f"a training step on {the_device(device)} (sweep, {first.precision}, "
                    f"{loader_phrase(loader)}) costs {_fixed_text(first)}")
            others = [f for f in chosen if f is not first]
            if others:
                text += "; " + "; ".join(_fixed_brief(f) for f in others)
            out.append(sentence(prefix, text + "."))
    return out


def _loaders_of(fits: list[Fit]) -> list[str]:
    """The loaders of ``fits``, those of :data:`~mnistbench.report.sections.wording.LOADER_ORDER`
    first."""
    import pandas as pd

    return ordered_loaders(pd.DataFrame({"loader": [f.loader for f in fits]}))


def fit_rows(fits: list[Fit]) -> list[dict]:
    """The table of every step-time fit: fixed ms and per-sample µs with their intervals,
    the fixed share of a batch-128 step, the batch at which the fixed part is half the
    step, the runs, and the largest residual."""
    rows = []
    for f in fits:
        half = f.fit.fixed_share_at
        clear = has_fixed_cost(f.fit)
        rows.append({"env": f.env, "device": f.device, "precision": f.precision,
                     "loader": loader_name(f.loader), "fixed": _ms(f.fit.fixed_s),
                     "fixed_ci": "" if f.fit.fixed_ci is None else
                     _span(f.fit.fixed_ci, 1e3, "ms"),
                     "per_sample": _us(f.fit.per_sample_s),
                     "per_sample_ci": "" if f.fit.per_sample_ci is None else
                     _span(f.fit.per_sample_ci, 1e6, "µs"),
                     "share": percent(f.fixed_share) if clear else "within noise of 0",
                     "half": DASH if not clear or half is None else
                     "below 1" if half < 1 else f"{half:.3g}",
                     "runs": f"{f.fit.n} at {plural(f.batches, 'batch size')}",
                     "residual": percent(f.worst_residual)})
    return rows


# ---------------------------------------------------------------------------- speed-ups

def rates(frame, **where) -> list[float]:
    """samples/s of the rows of ``frame`` matching ``where`` (column -> value)."""
    keep = frame
    for column, value in where.items():
        keep = keep[keep[column] == value]
    return col(keep, "samples_per_s")


def batch_sentences(inputs: Inputs, summary, fits: list[Fit]) -> list[str]:
    """Per environment and GPU device: the speed-up over the CPU at the blog's batch size,
    the largest measured, and the large-batch limit of the fits with the batch sizes from
    which it reaches :data:`SHARES` of it."""
    out = []
    sweep = ok(summary, "sweep")
    for env in inputs.envs:
        prefix = on_env(inputs, env)
        cpu = {f.loader: f for f in fits if f.env == env and f.device == "cpu"
               and f.precision == BLOG_PRECISION}
        for device in ordered_devices({f.device for f in fits if f.env == env} - {"cpu"}):
            gpu = {f.loader: f for f in fits if f.env == env and f.device == device
                   and f.precision == BLOG_PRECISION}
            common = [x for x in _loaders_of(list(gpu.values())) if x in cpu]
            if not common:
                continue
            loader = common[0]
            part = sweep[(sweep["env"] == env) & (sweep["loader"] == loader)
                         & (sweep["precision"] == BLOG_PRECISION)]
            batches = sorted(set(part.loc[part["device"] == "cpu", "batch_size"])
                             & set(part.loc[part["device"] == device, "batch_size"]))
            ratios = {b: stats.ratio_ci(rates(part, device=device, batch_size=b),
                                        rates(part, device="cpu", batch_size=b))
                      for b in batches}
            ests = {b: e for b, e in ratios.items() if e is not None}
            if not ests:
                continue
            at = min(ests, key=lambda b: (abs(b - BLOG_BATCH), b))
            top = max(ests, key=lambda b: ests[b].value)
            name = device_name(device)
            blog_batch = ("the blog's" if at == BLOG_BATCH else
                          f"the nearest measured to the blog's {count(BLOG_BATCH)}")
            text = (f"{the_device(device)}'s speed-up over the CPU (sweep, {BLOG_PRECISION}, "
                    f"{loader_phrase(loader)}) is {ratio_phrase(ests[at])} at batch "
                    f"{count(at)}, {blog_batch}. ")
            if top > at and ests[top].value > ests[at].value:
                text += (f"Larger batches lift it to {num(ests[top].value, 3, '×')} at batch "
                         f"{count(top)}")
            else:
                text += (f"Larger batches do not lift it (largest: "
                         f"{num(ests[top].value, 3, '×')} at batch {count(top)})")
            slow, fast = cpu[loader].fit, gpu[loader].fit
            # batch_for_share's None does not depend on the share: all are None or none is
            reach = [b for b in (scaling.batch_for_share(slow, fast, s) for s in SHARES)
                     if b is not None]
            if len(reach) < len(SHARES):
                text += (f". The fits give no batch from which it grows further: the {name} "
                         "is not faster per sample")
            else:
                limit = slow.per_sample_s / fast.per_sample_s
                text += (f". The fits' ratio of per-sample costs puts its large-batch limit at "
                         f"{num(limit, 3, '×')}: "
                         + ", ".join(f"{'half' if s == 0.5 else num(100 * s, 2, '%')} of that "
                                     f"from batch {_batch(b)}"
                                     for s, b in zip(SHARES, reach, strict=True)))
            out.append(sentence(prefix, text + "."))
    return out


def scale_frame(summary):
    """The ok scale cells with a throughput and a width."""
    cells = ok(summary, SCALE_EXPERIMENT)
    if "width" not in cells.columns:
        return cells.iloc[0:0]
    return cells.dropna(subset=["samples_per_s", "width"])


def _flops_of(frame, width) -> float | None:
    """The FLOPs per training sample recorded at ``width`` (FLOP)."""
    return median(col(frame[frame["width"] == width], "train_flops_per_sample"))


def width_phrase(frame, width) -> str:
    """"width 2 (0.271 GFLOP per sample)"."""
    flops = _flops_of(frame, width)
    return f"width {count(width)}" + ("" if flops is None else
                                      f" ({_per_sample(flops)} per sample)")


def _scale_settings(frame) -> str:
    """What the scale cells ran at: "batch 128, data held in memory"."""
    batches = "/".join(distinct(frame, "batch_size")) or DASH
    loaders = " or ".join(loader_phrase(x) for x in ordered_loaders(frame)) or DASH
    return f"batch {batches}, {loaders}"


def share_or_rate(frame, named: bool = True) -> str:
    """"37.2 % of its limit" ("37.2 %" unless ``named``) or "112 GFLOP/s" (no limit
    measured) of ``frame``'s cells."""
    shares = limit_shares(frame)
    if shares:
        share = median(shares)
        return with_past_limit(f"{percent(share)}" + (" of its limit" if named else ""), frame,
                               share)
    return gflop_rate(median(col(frame, "achieved_gflops")))


def _trend(values: list[float]) -> str:
    """"rises", "falls" or "stays" from the first of ``values`` to the last (10 % apart)."""
    if values[-1] > 1.1 * values[0]:
        return "rises"
    return "falls" if values[-1] < values[0] / 1.1 else "stays about the same"


def _share_by_width(frame) -> str:
    """"the share of its limit rises with the width: 4.94 % at width 1, 9.17 % at 2", or
    the achieved GFLOP/s where no limit was measured."""
    widths = sorted(set(frame["width"]))
    shares = [median(limit_shares(frame[frame["width"] == w])) for w in widths]
    if all(v is not None for v in shares):
        values, fmt, what = shares, percent, "the share of its limit"
    else:
        values = [median(col(frame[frame["width"] == w], "achieved_gflops")) for w in widths]
        fmt, what = gflop_rate, "its achieved arithmetic (limit not measured)"
    limited = values is shares  # a share past 100 % carries its flag
    listed = ", ".join(
        with_past_limit(f"{fmt(v)} at {'width ' if i == 0 else ''}{count(w)}",
                        frame[frame["width"] == w], v if limited else None)
        for i, (w, v) in enumerate(zip(widths, values, strict=True)))
    known = [v for v in values if v is not None]
    if len(widths) == 1 or len(known) < len(values):
        return f"{what}: {listed}"
    return f"{what} {_trend(known)} with the width: {listed}"


def scale_sentences(inputs: Inputs, summary) -> list[str]:
    """Per environment: each device's throughput and share of its limit by width (fp32),
    and for each GPU its speed-up over the CPU by width, from which width it exceeds width
    1's, and the widths only the GPU ran."""
    out = []
    cells = scale_frame(summary)
    cells = cells[cells["precision"] == BLOG_PRECISION]
    for env in inputs.envs:
        prefix = on_env(inputs, env)
        part = cells[cells["env"] == env]
        if part.empty:
            continue
        settings = _scale_settings(part)
        cpu = part[part["device"] == "cpu"]
        if not cpu.empty:
            listed = "; ".join(
                f"{width_phrase(cpu, w)} {num(median(rates(cpu, width=w)), 3, 'samples/s')}"
                f" at {share_or_rate(cpu[cpu['width'] == w])}"
                for w in sorted(set(cpu["width"])))
            out.append(sentence(prefix, f"on the CPU a wider network (scale, "
                                         f"{BLOG_PRECISION}, {settings}) runs: {listed}."))
        for device in ordered_devices(set(part["device"]) - {"cpu"}):
            gpu = part[part["device"] == device]
            both = sorted(set(gpu["width"]) & set(cpu["width"]))
            alone = sorted(set(gpu["width"]) - set(cpu["width"]))
            text = (f"on {the_device(device)} (scale, {BLOG_PRECISION}, {settings}) "
                    f"{_share_by_width(gpu)}")
            ratios = {w: stats.ratio_ci(rates(gpu, width=w), rates(cpu, width=w))
                      for w in both}
            ests = {w: e for w, e in ratios.items() if e is not None}
            if ests:
                intervals = TableIntervals()
                spans = {w: intervals.add(e) for w, e in ests.items()}
                caption = intervals.caption()
                listed = ", ".join(f"{num(e.value, 3, '×')} at width {count(w)}"
                                   + (f" ({spans[w]['text']})" if e.has_interval else "")
                                   for w, e in ests.items())
                small = min(ests)
                base = ests[small]
                beyond = [w for w, e in ests.items() if w > small
                          and (e.low > base.high if e.low is not None and base.high is not None
                               else e.value > base.value)]  # both bounds or neither
                if len(ests) == 1:
                    grows = ""
                elif beyond:
                    grows = f" grows beyond width {count(small)}'s from width {count(beyond[0])}"
                else:
                    grows = f" does not grow beyond width {count(small)}'s"
                text += (f". Its speed-up over the CPU{grows}: {listed}"
                         + (f"; {caption[:-1].lower()}" if caption else ""))
            if alone:
                text += (f". Width {', '.join(count(w) for w in alone)} ran on the "
                         f"{device_name(device)} alone")
            out.append(sentence(prefix, text + "."))
    if cells.empty:
        out.append(not_measured("Model size", "these results hold no ok cells of the scale "
                                               "experiment"))
    return out


def scale_rows(summary) -> tuple[list[str], list[dict], str]:
    """(devices, rows, caption): per environment, precision and width of the scale cells, the
    FLOPs per sample and, per device, the samples/s with the share of its limit; the GPU's
    speed-up over the CPU with its interval (the kind of interval named once in the
    caption where all are of one kind)."""
    cells = scale_frame(summary)
    shown = ordered_devices(set(cells["device"])) if not cells.empty else []
    intervals = TableIntervals()
    rows = []
    for (env, precision, width), group in cells.groupby(["env", "precision", "width"],
                                                        sort=True):
        per_device = []
        for device in shown:
            mine = group[group["device"] == device]
            if mine.empty:
                per_device.append({"rate": DASH, "share": ""})
                continue
            shares = limit_shares(mine)
            per_device.append({"rate": num(median(col(mine, "samples_per_s")), 3),
                               "share": (with_past_limit(f"{percent(median(shares))} of its "
                                                         "limit", mine, median(shares))
                                         if shares else
                                         f"{gflop_rate(median(col(mine, 'achieved_gflops')))}, "
                                         "limit not measured")})
        gpus = [d for d in shown if d != "cpu"]
        if gpus and "cpu" in shown:
            est = stats.ratio_ci(col(group[group["device"] == gpus[0]], "samples_per_s"),
                                 col(group[group["device"] == "cpu"], "samples_per_s"))
        else:
            est = None
        value, _ = ratio_parts(est)
        flops = median(col(group, "train_flops_per_sample"))
        rows.append({"env": env, "precision": precision, "width": count(width),
                     "flops": DASH if flops is None else _per_sample(flops),
                     "devices": per_device, "ratio": value,
                     "ci": intervals.add(est) if est is not None else {"text": ""}})
    caption = intervals.caption()
    return shown, rows, caption


def ratio_head(shown: list[str]) -> str:
    """The scale table's speed-up column ("GPU ÷ CPU"), "" without a CPU and another device
    (the table then has no such column)."""
    others = [d for d in shown if d != "cpu"]
    return f"{device_name(others[0])} ÷ CPU" if others and "cpu" in shown else ""

