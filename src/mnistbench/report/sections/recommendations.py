"""Section 11, recommendations: the blog's "when to use a CPU, when a GPU" rebuilt from the
data and the cost model: when the CPU suffices, from which batch size the GPU pays off, and
the break-even in runs, each with the numbers behind it."""

from __future__ import annotations

import math

from mnistbench.report import blog
from mnistbench.report.formatting import count, money, num, ratio_phrase, runs, seconds
from mnistbench.report.selections import (
    Inputs,
    blog_loader_first,
    col,
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


def _cpu_suffices(result: cost.CostReport, be, currency: str) -> dict:
    title = "When the CPU suffices"
    if be is None:
        return {"title": title,
                "text": "Not computable from this study: it needs ok convergence cells on "
                        "both the CPU and the GPU.",
                "numbers": list(result.notes) or ["no break-even"]}
    rows = {(r.env, r.device, r.loader): r for r in result.rows}
    cpu, gpu = rows[(be.env, "cpu", be.loader)], rows[(be.env, "cuda", be.loader)]
    numbers = [f"a run takes {seconds(cpu.run_s.value)} on the CPU and "
               f"{seconds(gpu.run_s.value)} on the GPU ({be.loader} loader)",
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


def _break_even(be, model: cost.CostModel, multi_env: bool) -> dict:
    title, currency = "Break-even in runs", model.currency
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
                        f"{be.loader} loader" + (f", {be.env}" if multi_env else "")]}


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
    for env in sorted(set(gpu["env"]) & set(cpu["env"])):
        for loader in blog_loader_first(set(gpu["loader"]) & set(cpu["loader"])):
            c_row, g_row = rows.get((env, "cpu", loader)), rows.get((env, "cuda", loader))
            if c_row is not None and g_row is not None and _hourly(c_row) and _hourly(g_row):
                c_rate, g_rate, basis = _hourly(c_row), _hourly(g_row), "this study's runs"
            else:
                c_rate, g_rate = _assumed_hourly(model, "cpu"), _assumed_hourly(model, "cuda")
                basis = "the cost model's assumed powers"
            need = g_rate / c_rate

            def pick(frame, env=env, loader=loader):
                return frame[(frame["env"] == env) & (frame["loader"] == loader)]
            on_cpu, on_gpu = pick(cpu), pick(gpu)
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
            on_env = f", {env}" if summary["env"].nunique() > 1 else ""
            where = f" ({loader} loader, fp32{on_env})"
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


def recommendations(inputs: Inputs) -> list[dict]:
    """Each recommendation with the numbers behind it."""
    result, model = inputs.cost_report, inputs.model
    ranked = sorted(result.break_even, key=lambda b: (b.loader != blog.BLOG_LOADER, b.env))
    be = ranked[0] if ranked else None
    return [_cpu_suffices(result, be, model.currency), _batch(inputs.summary, result, model),
            _break_even(be, model, inputs.multi_env)]


def context(inputs: Inputs) -> dict:
    return {"recommendations": recommendations(inputs)}
