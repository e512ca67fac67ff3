"""Section 12, recommendations from what was measured: on the CPU, which levers pay off and
which to avoid (the tips experiment's speed-ups), what bf16 is worth depending on whether
the CPU has bf16 instructions; then the blog's "when to use a CPU, when a GPU" rebuilt from
the data and the cost model: when the CPU suffices, from which batch size the GPU pays off,
and the break-even in runs, each with the numbers behind it."""

from __future__ import annotations

import math
from dataclasses import replace

from mnistbench.report import blog, comparison
from mnistbench.report.formatting import count, money, num, ratio_phrase, runs, seconds
from mnistbench.report.sections import tips as tips_section
from mnistbench.report.selections import (
    Inputs,
    blog_loader_first,
    col,
    loader_name,
    loader_phrase,
    ok,
    waiting_share,
)
from mnistbench.results import cost, stats


def _hourly(row: cost.CostRow) -> float | None:
    """What an hour of the run costs: its total over its time."""
    if row.total.value is None or not row.run_s.value:
        return None
    return row.total.value / row.run_s.value * 3600


def _assumed_hourly(model: cost.CostModel, device: str) -> float:
    """What an hour on ``device`` costs at the cost model's assumed power."""
    spec = model.devices[device]
    return (spec.system_power_w / 1000 * model.price_per_kwh + spec.hardware_per_hour
            + model.wait_value_per_hour)


def _cpu_suffices(result: cost.CostReport, chosen, currency: str) -> dict:
    title = "When the CPU suffices"
    if chosen is None:
        return {"title": title,
                "text": "Not computable from this study: it needs ok convergence cells on "
                        "both the CPU and the GPU (in any environment).",
                "numbers": list(result.notes) or ["no break-even"]}
    be, cpu, gpu, scope = chosen
    numbers = [*([scope] if scope else []),
               f"a run takes {seconds(cpu.run_s.value)} on the CPU and "
               f"{seconds(gpu.run_s.value)} on the GPU ({loader_phrase(be.loader)})",
               f"a run costs {money(cpu.total.value, currency)} on the CPU and "
               f"{money(gpu.total.value, currency)} on the GPU (electricity, hardware, "
               "waiting)",
               f"the GPU machine costs {money(be.extra_price, currency)} more"]
    share = waiting_share(cpu)
    if share is not None:
        numbers.append(f"waiting is {num(100 * share, 2, '%')} of the CPU run's cost"
                       + (": it dominates" if share > 0.5 else ""))
    if math.isinf(be.runs_with_waiting):
        text = ("The CPU suffices however much you train: a GPU run is not cheaper than a "
                "CPU run here, even counting the time you wait.")
    elif be.runs_with_waiting == 0:
        text = "The GPU pays off from the first run: its machine costs no more."
    else:
        n = be.runs_with_waiting
        text = (f"The CPU suffices below {n:,.0f} training runs over the machines' life: "
                f"{seconds(n * cpu.run_s.value)} of CPU training, or "
                f"{money(n * cpu.total.value, currency)} at this cost model. Beyond that the "
                "GPU machine's extra price is paid back by what each run saves.")
    return {"title": title, "text": text, "numbers": numbers}


def _break_even(chosen, model: cost.CostModel, multi_env: bool) -> dict:
    title, currency = "Break-even in runs", model.currency
    be, scope = (None, "") if chosen is None else (chosen[0], chosen[3])
    if be is None:
        extra = model.devices["cuda"].hardware_price - model.devices["cpu"].hardware_price
        return {"title": title,
                "text": "Not computable: no ok convergence cells on both devices.",
                "numbers": [f"the GPU machine costs {money(extra, currency)} more (assumed)"]}
    return {"title": title,
            "text": f"The GPU machine pays for itself after {runs(be.runs_with_waiting)} "
                    f"counting the time you wait, after {runs(be.runs_electricity)} on "
                    "electricity alone.",
            "numbers": [f"extra price {money(be.extra_price, currency)}",
                        f"saving per run: {money(be.saving_with_waiting, currency)} with "
                        f"waiting, {money(be.saving_electricity, currency)} in electricity",
                        loader_phrase(be.loader) + (f", {be.env}" if multi_env and not scope
                                                    else ""),
                        *([scope] if scope else [])]}


def _batch(summary, result: cost.CostReport, model: cost.CostModel) -> dict:
    title = "From which batch size the GPU pays off"
    sweep = ok(summary, "sweep")
    cpu = sweep[(sweep["device"] == "cpu") & (sweep["precision"] == "fp32")]
    gpu = sweep[(sweep["device"] == "cuda") & (sweep["precision"] == "fp32")]
    if cpu.empty or gpu.empty:
        return {"title": title, "text": "Not measured: the sweep needs ok fp32 cells on both "
                "the CPU and the GPU.", "numbers": ["no GPU sweep cells" if gpu.empty
                                                    else "no CPU fp32 sweep cells"]}
    currency = model.currency
    rows = {(r.env, r.device, r.loader): r for r in result.rows}
    # the devices of one machine first, then across machines (labelled); the blog's loader
    # first
    fp32 = sweep[sweep["precision"] == "fp32"]
    pairs = sorted(((p, loader) for loader in set(gpu["loader"]) & set(cpu["loader"])
                    for p in comparison.pairs(summary, fp32, loader=loader)),
                   key=lambda item: (not item[0].one_machine, item[1] != blog.BLOG_LOADER,
                                     item[0].gpu_env, item[1]))
    for found_pair, loader in pairs:
        env, cpu_env = found_pair.gpu_env, found_pair.cpu_env
        c_row, g_row = rows.get((cpu_env, "cpu", loader)), rows.get((env, "cuda", loader))
        if c_row is not None and g_row is not None and _hourly(c_row) and _hourly(g_row):
            c_rate, g_rate, basis = _hourly(c_row), _hourly(g_row), "this study's runs"
        else:
            c_rate, g_rate = _assumed_hourly(model, "cpu"), _assumed_hourly(model, "cuda")
            basis = "the cost model's assumed powers"
        need = g_rate / c_rate

        def pick(frame, env, loader=loader):
            return frame[(frame["env"] == env) & (frame["loader"] == loader)]
        on_cpu, on_gpu = pick(cpu, cpu_env), pick(gpu, env)
        batches = sorted(set(on_cpu["batch_size"]) & set(on_gpu["batch_size"]))
        if not batches:
            continue
        ests = {b: stats.ratio_ci(col(on_gpu[on_gpu["batch_size"] == b], "samples_per_s"),
                                  col(on_cpu[on_cpu["batch_size"] == b], "samples_per_s"))
                for b in batches}
        start = None
        for batch in reversed(batches):
            est = ests[batch]
            if est is not None and (est.low if est.has_interval else est.value) > need:
                start = batch
            else:
                break
        numbers = [f"an hour costs {money(g_rate, currency)} on the GPU and "
                   f"{money(c_rate, currency)} on the CPU ({basis}), so the GPU must "
                   f"be {num(need, 3, '×')} faster to cost less per sample"]
        numbers += [f"batch {count(b)}: {ratio_phrase(e)}" for b, e in ests.items()]
        on_env = (f", {env}" if found_pair.one_machine else f"; {found_pair.label()}") \
            if summary["env"].nunique() > 1 else ""
        where = f" ({loader_phrase(loader)}, fp32{on_env})"
        if start is None:
            best = max(ests, key=lambda b: ests[b].value if ests[b] else 0)
            text = (f"At no batch size measured ({count(batches[0])}–{count(batches[-1])})"
                    f"{where} is the GPU fast enough to pay for its dearer hour: it needs "
                    f"{num(need, 3, '×')}, the best is {ratio_phrase(ests[best])} at batch "
                    f"{count(best)}.")
        elif start == batches[0]:
            text = (f"The GPU pays off at every batch size measured{where}, from "
                    f"{count(start)}: its speed-up exceeds the {num(need, 3, '×')} its "
                    "dearer hour needs.")
        else:
            text = (f"The GPU pays off from batch size {count(start)}{where}: from there "
                    f"its speed-up ({ratio_phrase(ests[start])}) exceeds the "
                    f"{num(need, 3, '×')} its dearer hour needs.")
        return {"title": title, "text": text, "numbers": numbers}
    return {"title": title, "text": "Not measured: no batch size ran on both devices with the "
            "same loader.", "numbers": ["–"]}


def _tip_items(inputs: Inputs, device: str):
    """(tip, what it changes, its cell of the tips table) of every measured tip on
    ``device`` but the baseline."""
    shown, rows, _ = tips_section.tips_table(inputs.summary)
    if device not in shown:
        return []
    i = shown.index(device)
    return [(r, r["devices"][i]) for r in rows
            if r["tip"] != blog.BASELINE and r["devices"][i].get("est") is not None]


def _cpu_levers(inputs: Inputs) -> dict:
    title = "On the CPU: the levers that pay off, and those to avoid"
    items = _tip_items(inputs, "cpu")
    if not items:
        return {"title": title, "text": "Not measured: no tips cells ran on the CPU.",
                "numbers": ["the tips experiment measures each lever against the blog's code"]}
    multi = inputs.multi_env

    def line(row, cell):
        where = f" on {row['env']}" if multi else ""
        return f"{row['tip']}{where}: {cell['speed']} ({cell['ci']}), {row['change']}"
    ranked = sorted(items, key=lambda item: -item[1]["est"].value)
    good = [(r, c) for r, c in ranked if c["verdict"] == blog.PAYS_OFF]
    bad = [(r, c) for r, c in ranked if c["verdict"] in (blog.SLOWER, blog.COSTS_ACCURACY)]
    rest = [(r, c) for r, c in ranked if (r, c) not in good and (r, c) not in bad]

    def names(chosen):
        return ", ".join(f"{r['tip']} {c['speed']}" for r, c in chosen) or "none"
    text = (f"Use {names(good)} (speed-ups per sample over the blog's code); avoid "
            f"{names(bad)}" + (f"; within noise: {names(rest)}" if rest else "") + ".")
    numbers = [f"{c['verdict']}: " + line(r, c) for r, c in ranked]
    return {"title": title, "text": text, "numbers": numbers}


def _bf16(inputs: Inputs) -> dict:
    title = "What bf16 is worth on the CPU"
    parts, numbers, paths, sweeps = [], [], set(), []
    for row, cell in _tip_items(inputs, "cpu"):
        if row["tip"] == "amp-bf16":
            path = cell["bf16_path"] or "unrecorded"
            paths.add(path)
            parts.append(f"{cell['speed']} in the tips experiment (the blog's code, bf16 "
                         f"{path}; accuracy {cell['acc']})")
            numbers.append(f"tips, amp-bf16{', ' + row['env'] if inputs.multi_env else ''}: "
                           f"{cell['speed']} ({cell['ci']})")
    sweep = ok(inputs.summary, "sweep")
    cpu = sweep[sweep["device"] == "cpu"]
    for (env, loader), group in cpu.groupby(["env", "loader"], sort=True):
        bf16 = group[group["precision"] == "bf16"]
        fp32 = group[group["precision"] == "fp32"]
        common = sorted(set(bf16["batch_size"]) & set(fp32["batch_size"]))
        if not common:
            continue
        batch = 128 if 128 in common else common[-1]
        est = stats.ratio_ci(col(bf16[bf16["batch_size"] == batch], "samples_per_s"),
                             col(fp32[fp32["batch_size"] == batch], "samples_per_s"))
        if est is None:
            continue
        path = ", ".join(sorted({str(v) for v in bf16["bf16_path"].dropna() if str(v)})) \
            or "unrecorded"
        paths.add(path)
        where = f", {env}" if inputs.multi_env else ""
        numbers.append(f"sweep, batch {count(batch)}, {loader_name(loader)}{where} (bf16 "
                       f"{path}): {ratio_phrase(est)} the fp32 throughput")
        sweeps.append(f"{num(est.value, 3, '×')} the fp32 throughput in the sweep at batch "
                      f"{count(batch)} ({loader_phrase(loader)}{where})")
    if not numbers:
        return {"title": title, "text": "Not measured: no bf16 cells ran on the CPU.",
                "numbers": ["–"]}
    measured = "; ".join(parts + sweeps)
    if paths == {"native"}:
        text = ("Here the CPU runs bf16 natively (AVX-512 bf16 or AMX): bf16 autocast is worth "
                f"{measured}. On a CPU without bf16 instructions PyTorch emulates it, and this "
                "gain is not measured here: keep fp32 there unless a cell of that CPU shows "
                "otherwise.")
    elif paths == {"emulated"}:
        text = (f"Here the CPU has no bf16 instructions and PyTorch emulates bf16: it gives "
                f"{measured}. Use it only where that ratio exceeds 1; a CPU with AVX-512 bf16 "
                "or AMX runs it natively (not measured here).")
    else:
        text = (f"bf16's worth depends on the CPU's bf16 path (native or emulated): {measured}."
                " Use it where the path is native and the ratio exceeds 1.")
    return {"title": title, "text": text, "numbers": numbers}


def _chosen_break_even(inputs: Inputs):
    """(break-even, CPU cost row, GPU cost row, scope) of the comparison the section makes: on
    one machine where one measured both devices (the blog's loader first), else the same
    loader across machines (:mod:`mnistbench.report.comparison`), its scope said; None when
    no environment has a CPU or a GPU cost row."""
    result, model = inputs.cost_report, inputs.model
    rows = {(r.env, r.device, r.loader): r for r in result.rows}
    ranked = sorted(result.break_even, key=lambda b: (b.loader != blog.BLOG_LOADER, b.env))
    if ranked:
        be = ranked[0]
        return be, rows[(be.env, "cpu", be.loader)], rows[(be.env, "cuda", be.loader)], ""
    cells = ok(inputs.summary, "convergence")
    for loader in blog_loader_first(set(r.loader for r in result.rows)):
        for found in comparison.pairs(inputs.summary, cells, loader=loader):
            cpu, gpu = rows.get((found.cpu_env, "cpu", loader)), rows.get(
                (found.gpu_env, "cuda", loader))
            if cpu is None or gpu is None:
                continue
            both = cost.break_even([replace(cpu, env=found.gpu_env), gpu], model)
            if both:
                return both[0], cpu, gpu, found.label()
    return None


def recommendations(inputs: Inputs) -> list[dict]:
    """Each recommendation with the numbers behind it."""
    result, model = inputs.cost_report, inputs.model
    chosen = _chosen_break_even(inputs)
    return [_cpu_levers(inputs), _bf16(inputs), _cpu_suffices(result, chosen, model.currency),
            _batch(inputs.summary, result, model), _break_even(chosen, model, inputs.multi_env)]


def context(inputs: Inputs) -> dict:
    return {"recommendations": recommendations(inputs)}
