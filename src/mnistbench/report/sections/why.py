"""Why: each device against its limit (after section 6, the throughput). How close each
device runs to the FLOP/s it reaches on a dense kernel in the same environment (a
``mnistbench peak`` run: the summary's limit columns,
:data:`mnistbench.report.selections.LIMIT_COLUMNS`); the fixed cost of a training step beside
its cost per sample (:func:`mnistbench.results.scaling.fit_step_time` over the sweep); from
which batch size (:func:`mnistbench.results.scaling.batch_for_share`) and which model size
(the scale experiment's widths) the GPU's speed-up over the CPU grows beyond its speed-up at
the blog's settings; and the blog's advice on when to use which device checked against
them. A chart draws each device's share of its limit against batch size and model FLOPs
(:func:`mnistbench.report.plots.against_limit`).

This module holds the limits (their sentences and table), the advice checked and the
section's context; the step-cost fits and the speed-ups by batch size and by width (their
sentences and tables) are in :mod:`mnistbench.report.sections.why_scaling`; the wording both
share is :mod:`mnistbench.report.sections.wording`.

The sentences read the quiet cells (busy repeats left out where a quiet one exists) and,
where both loaders ran, the cells with data held in memory: the DataLoader's per-sample work
runs on the CPU whatever the device, so it is not the device's. The tables give every loader.
Every column read beyond the schema may be absent (older summaries): the section then says
"not measured", never a figure it does not have.
"""

from __future__ import annotations

from dataclasses import dataclass

from mnistbench.report import blog
from mnistbench.report.comparison import measured_devices
from mnistbench.report.formatting import (
    DASH,
    count,
    interval,
    num,
    ratio_phrase,
)
from mnistbench.report.sections.why_scaling import (
    BLOG_BATCH,
    BLOG_PRECISION,
    batch_sentences,
    fit_rows,
    fixed_sentences,
    rates,
    ratio_head,
    scale_frame,
    scale_rows,
    scale_sentences,
    share_or_rate,
    step_fits,
    width_phrase,
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
    CODE,
    SCALE_EXPERIMENT,
    Inputs,
    code_phrase,
    col,
    device_name,
    discount_busy,
    distinct,
    gpu_absence,
    limit_share,
    loader_name,
    median,
    ok,
)
from mnistbench.results import stats

#: The batch size from which the blog says a GPU wins (samples).
GPU_FROM_BATCH = blog.BLOG["gpu_from_batch"]
#: The blog's advice on which device to train on, as the section quotes it.
ADVICE = ("a CPU for very small models; a GPU for compute-intensive models such as CNNs and "
          f"batch sizes above {GPU_FROM_BATCH}")
#: The kinds of code in the order the sentences give them.
KINDS = ("best", "blog", "")


# ---------------------------------------------------------------------------- limits

@dataclass(frozen=True)
class Limit:
    """A device's measured limit in one environment at one precision: GFLOP/s (None: not
    measured), the kernel that reached it and where the figure came from."""

    gflops: float | None
    kernel: str
    source: str

    @property
    def text(self) -> str:
        """"50,000 GFLOP/s (matmul 8192x8192 @ 8192x8192; measured: ...)" or "not
        measured"."""
        if self.gflops is None:
            return "not measured"
        detail = "; ".join(x for x in (self.kernel, self.source) if x)
        return gflop_rate(self.gflops) + (f" ({detail})" if detail else "")


def limit_of(frame) -> Limit:
    """The limit recorded on the cells of ``frame`` (one environment, device and precision):
    the median of ``limit_gflops`` with the kernel and source named; not measured without
    one."""
    value = median(col(frame, "limit_gflops"))
    if value is None:
        return Limit(None, "", "")
    return Limit(value, ", ".join(distinct(frame, "limit_kernel")),
                 ", ".join(distinct(frame, "limit_source")))


def _share_phrase(frame, first: bool = True) -> str:
    """"37.2 % of its measured limit (range of 3 runs: 36.0–38.1 %, 75 % coverage; 112
    GFLOP/s)" ("of its measured limit" only when ``first``), or the achieved GFLOP/s with
    its interval where no limit was measured."""
    achieved = median(col(frame, "achieved_gflops"))
    est = stats.median_ci(limit_shares(frame))
    if est is None:
        rate = stats.median_ci(col(frame, "achieved_gflops"))
        return f"{gflop_rate(achieved)} ({interval(rate, 'GFLOP/s')})"
    text = (f"{percent(est.value)}{' of its measured limit' if first else ''} "
            f"({interval(est, '%')}; {gflop_rate(achieved)})")
    return with_past_limit(text, frame, est.value)


def _limit_sentences(inputs: Inputs, summary, cells) -> list[str]:
    """Per environment and device: how close the cells at the blog's settings run to the
    device's measured limit, per kind of code; the limit's figure, kernel and source."""
    out = []
    cells = cells[cells["precision"] == BLOG_PRECISION]
    for env in inputs.envs:
        part = cells[cells["env"] == env]
        prefix = on_env(inputs, env)
        shown = ordered_devices(set(part["device"]) | ({"cpu", "cuda"} - measured_devices(summary)))
        for device in shown:
            ran = part[part["device"] == device]
            mine = ran.dropna(subset=["achieved_gflops"])
            if mine.empty:
                why = ("these results record no achieved GFLOP/s for its cells" if not
                       ran.empty else gpu_absence(summary[summary["env"] == env])
                       if device == "cuda" else
                       f"no ok {device_name(device)} cell at the blog's settings")
                out.append(sentence(prefix, not_measured(
                    f"how close {the_device(device)} runs to its limit at the blog's settings",
                    why or "no ok cell")))
                continue
            parts: list[str] = []
            for kind in KINDS:
                for loader in ordered_loaders(mine[mine[CODE] == kind]):
                    group = mine[(mine[CODE] == kind) & (mine["loader"] == loader)]
                    parts.append(f"{_share_phrase(group, not parts)} for "
                                 f"{code_phrase(group)}")
            limit = limit_of(mine)
            measured = bool(limit_shares(mine))
            lead = (f"at the blog's settings (batch {count(BLOG_BATCH)}, {BLOG_PRECISION}) "
                    f"{the_device(device)} runs at " if measured else
                    f"at the blog's settings (batch {count(BLOG_BATCH)}, {BLOG_PRECISION}) "
                    f"{the_device(device)} reaches ")
            tail = (f"Its limit: {limit.text}." if limit.gflops is not None else
                    "Its limit is not measured: these results hold no peak figure for it.")
            out.append(sentence(prefix, lead + "; ".join(parts) + ". " + tail))
    return out


def _at_blog(frame) -> str:
    """The share of the limit (the achieved GFLOP/s where none was measured) at the blog's
    settings per loader: "36.5 % (data held in memory), 25.2 % (DataLoader)"."""
    parts = []
    for loader in ordered_loaders(frame):
        group = frame[frame["loader"] == loader]
        share = median(limit_shares(group))
        value = (with_past_limit(percent(share), group, share) if share is not None else
                 f"{gflop_rate(median(col(group, 'achieved_gflops')))}, limit not measured")
        parts.append(f"{value} ({loader_name(loader)})")
    return ", ".join(parts) or DASH


def limit_rows(summary, blog_cells) -> list[dict]:
    """Per environment, device and precision with ok cells of ``summary``: the measured
    limit, its kernel and source, the share at the blog's settings (``blog_cells``, per
    loader) and the best share measured (and where)."""
    rows = []
    done = ok(summary).dropna(subset=["achieved_gflops"])
    for (env, device, precision), group in done.groupby(["env", "device", "precision"],
                                                        sort=True):
        limit = limit_of(group)
        at_blog = blog_cells[(blog_cells["env"] == env) & (blog_cells["device"] == device)
                             & (blog_cells["precision"] == precision)]
        share = limit_share(group)
        best, where = "not measured", ""
        if share.notna().any():
            top = group.loc[share.idxmax()]
            best = with_past_limit(percent(share.max()), group.loc[[share.idxmax()]],
                                   share.max())
            where = (f"width {count(top['width'])}, scale" if top["experiment"] ==
                     SCALE_EXPERIMENT else
                     f"batch {count(top['batch_size'])}, {loader_name(top['loader'])}, "
                     f"{top['experiment']}")
        rows.append({"env": env, "device": device, "precision": precision,
                     "limit": "not measured" if limit.gflops is None else
                     gflop_rate(limit.gflops),
                     "kernel": limit.kernel or "not measured",
                     "source": limit.source or "not measured",
                     "at_blog": _at_blog(at_blog), "best": best, "where": where})
    return rows


# ---------------------------------------------------------------------------- the advice

def _wins(est) -> bool | None:
    """Whether a GPU/CPU ratio says the GPU is faster: its interval above 1 (its value
    where there is no interval); None when the interval holds 1 (within noise)."""
    if est is None:
        return None
    if est.has_interval:
        return True if est.low > 1 else False if est.high < 1 else None
    return est.value > 1


def _batch_check(summary, env, device) -> str | None:
    """The advice's batch half against the sweep (fp32, the preferred loader)."""
    sweep = ok(summary, "sweep")
    part = sweep[(sweep["env"] == env) & (sweep["precision"] == BLOG_PRECISION)]
    loaders = [x for x in ordered_loaders(part[part["device"] == device])
               if x in set(part.loc[part["device"] == "cpu", "loader"])]
    if not loaders:
        return None
    part = part[part["loader"] == loaders[0]]
    batches = sorted(set(part.loc[part["device"] == "cpu", "batch_size"])
                     & set(part.loc[part["device"] == device, "batch_size"]))
    ratios = {b: stats.ratio_ci(rates(part, device=device, batch_size=b),
                                rates(part, device="cpu", batch_size=b)) for b in batches}
    ests = {b: e for b, e in ratios.items() if e is not None}
    if not ests:
        return None
    name = device_name(device)
    start = None
    for b in sorted(ests, reverse=True):
        if _wins(ests[b]):
            start = b
        else:
            break
    smallest, largest = min(ests), max(ests)
    lead = f"batch sizes above {GPU_FROM_BATCH}: "
    at = f"({num(ests[start].value, 3, '×')})" if start is not None else ""
    if start is None:
        return (lead + f"does not hold, the {name} wins at no batch measured "
                f"({count(smallest)}–{count(largest)}; {num(ests[largest].value, 3, '×')} "
                f"at batch {count(largest)})")
    if start == smallest and start <= GPU_FROM_BATCH:
        return lead + f"holds, and the {name} already wins at batch {count(start)} {at}"
    if start == smallest:
        return (lead + f"holds from batch {count(start)} {at}, the smallest measured; "
                "smaller batches were not measured")
    if start <= GPU_FROM_BATCH:
        return lead + f"holds, the {name} wins from batch {count(start)} {at}"
    return (lead + f"does not hold as stated, the {name} wins only from batch "
            f"{count(start)} {at}")


def _model_check(summary, env, device) -> str | None:
    """The advice's model half against the scale cells (fp32)."""
    cells = scale_frame(summary)
    part = cells[(cells["env"] == env) & (cells["precision"] == BLOG_PRECISION)]
    cpu, gpu = part[part["device"] == "cpu"], part[part["device"] == device]
    both = sorted(set(cpu["width"]) & set(gpu["width"]))
    ratios = {w: stats.ratio_ci(rates(gpu, width=w), rates(cpu, width=w)) for w in both}
    ests = {w: e for w, e in ratios.items() if e is not None}
    if not ests:
        return None
    name = device_name(device)
    small, large = min(ests), max(ests)
    wins = _wins(ests[small])
    if wins:
        first = (f"very small models: not borne out here, even the smallest measured, "
                 f"{width_phrase(gpu, small)}, runs {num(ests[small].value, 3, '×')} faster "
                 f"on the {name}")
    elif wins is None:
        first = (f"very small models: at {width_phrase(gpu, small)} the devices are within "
                 f"noise ({ratio_phrase(ests[small])})")
    else:
        first = (f"very small models: holds, the CPU wins at {width_phrase(gpu, small)} "
                 f"({num(1 / ests[small].value, 3, '×')} faster)")
    if large == small:
        return first
    grows = ests[large].value > ests[small].value
    second = ("compute-intensive models: " + ("holds, " if grows else "does not hold, ")
              + f"the {name}'s lead is {num(ests[large].value, 3, '×')} at width "
              f"{count(large)} against {num(ests[small].value, 3, '×')} at width "
              f"{count(small)}")
    return f"{first}; {second}"


def _advice_sentences(inputs: Inputs, summary) -> list[str]:
    """The blog's advice checked per environment with a GPU against the sweep and the scale
    cells; without GPU cells, the CPU side and "not measured"."""
    out = []
    gpu_envs = []
    for env in inputs.envs:
        part = ok(summary[summary["env"] == env])
        others = ordered_devices(set(part["device"]) - {"cpu"})
        for device in others:
            checks = [c for c in (_batch_check(summary, env, device),
                                  _model_check(summary, env, device)) if c]
            if checks:
                gpu_envs.append(env)
                out.append(sentence(on_env(inputs, env), f"the blog's advice, \"{ADVICE}\", "
                                    f"checked on {the_device(device)}: "
                                    + "; ".join(checks) + "."))
    if gpu_envs:
        return out
    why = gpu_absence(summary) or (
        "no machine measured both its CPU and its GPU in the sweep or scale experiments (each "
        "device's own scaling is above)" if "cuda" in measured_devices(summary)
        else "no GPU cell in the sweep or scale experiments")
    cpu = scale_frame(summary)
    cpu = cpu[(cpu["device"] == "cpu") & (cpu["precision"] == BLOG_PRECISION)]
    side = ""
    widths = sorted(set(cpu["width"])) if not cpu.empty else []
    if len(widths) > 1:
        small, large = (cpu[cpu["width"] == w] for w in (widths[0], widths[-1]))
        flops = [median(col(x, "train_flops_per_sample")) for x in (small, large)]
        rate_small, rate_large = (median(col(x, "samples_per_s")) for x in (small, large))
        # scale_frame keeps only cells with a throughput, and each width has a cell
        assert rate_small is not None and rate_large is not None
        grew = (None if flops[0] is None or flops[1] is None else flops[1] / flops[0])
        more = (f"has {num(grew, 3, '×')} the FLOPs per sample of width "
                f"{count(widths[0])} and " if grew is not None else "")
        side = (f" On the CPU (scale), width {count(widths[-1])} {more}runs at "
                f"{num(rate_large / rate_small, 3, '×')} its samples/s "
                f"({share_or_rate(large)} against {share_or_rate(small, named=False)})")
        if grew is not None and abs(grew * rate_large / rate_small - 1) < 0.2:
            side += ": its time per sample grows in step with the FLOPs"
        side += "."
    return [f"The blog's advice, \"{ADVICE}\": only the CPU side is measured here.{side} "
            + not_measured("Whether a GPU wins, by model size or by batch size,", why)]


# ---------------------------------------------------------------------------- the section

#: Result columns the section reads that summaries before schema version 4 lack (read empty).
READ_COLUMNS = ("achieved_gflops", "train_flops_per_sample", "width")


def _with_columns(frame):
    """``frame`` with every column of :data:`READ_COLUMNS` (empty where it lacked one)."""
    missing = {c: float("nan") for c in READ_COLUMNS if c not in frame.columns}
    return frame.assign(**missing) if missing else frame


def context(inputs: Inputs) -> dict:
    summary, _ = discount_busy(_with_columns(inputs.summary))
    cells, _ = discount_busy(_with_columns(inputs.cells))
    fits = step_fits(summary)
    scale_devices, scale_table, scale_caption = scale_rows(summary)
    sentences = [*_limit_sentences(inputs, summary, cells),
                 *fixed_sentences(inputs, summary, fits),
                 *batch_sentences(inputs, summary, fits),
                 *scale_sentences(inputs, summary),
                 *_advice_sentences(inputs, summary)]
    return {"why_sentences": sentences, "why_limit_rows": limit_rows(summary, cells),
            "why_fit_rows": fit_rows(fits), "why_scale_devices": scale_devices,
            "why_scale_rows": scale_table, "why_scale_caption": scale_caption,
            "why_scale_ratio": ratio_head(scale_devices)}
