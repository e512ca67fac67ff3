"""Section 1, the findings: three to six sentences computed from the quiet cells (busy ones
left out where a quiet repeat exists): the GPU's speed-up per kind of code and the phase
behind it, or, without a GPU, why (the how-to has its own section) with what the CPU study
found (this project's best against the DataLoader's code, precision, best batch); the
energy and cost of a run with the break-even; the accuracy against the seed spread; the
hardware.

Every number of a sentence is one a table of the report shows (tests/report/test_report_findings.py
checks it), and each names the environment (with several) and the kind of code it comes
from.
"""

from __future__ import annotations

from mnistbench.core import schema
from mnistbench.report import blog
from mnistbench.report.formatting import (
    count,
    money,
    num,
    plural,
    points,
    points_interval,
    ratio_phrase,
    runs,
    seconds,
)
from mnistbench.report.selections import (
    CODE,
    Inputs,
    absent_reason,
    blog_loader_first,
    busy_mask,
    code_phrase,
    col,
    device_name,
    discount_busy,
    envs_with_gpu,
    hardware_line,
    loader_phrase,
    median,
    ok,
    per_epoch,
    phases,
    primary_env,
    seed_spread,
    speedup,
    sweep_medians,
)
from mnistbench.results import cost, stats

#: Each phase of an epoch as a sentence names it.
PHASE_NAMES = {"data": "data loading", "forward": "the forward pass",
               "backward": "the backward pass", "optimizer": "the optimizer step",
               "eval": "the test-set evaluation", "other": "the loop's own overhead"}
#: The sentences at most before the hardware's.
MAX_SENTENCES = 5
#: The kinds of code in the order the findings give them.
KINDS = ("blog", "best", "")


def _on(inputs: Inputs, env) -> str:
    """" on ENV" with several environments, else nothing."""
    return f" on {env}" if inputs.multi_env else ""


def _runs_of(cells, env, kind):
    """(loader, cells) of one kind of code in ``env``: the blog's loader first."""
    part = cells[(cells["env"] == env) & (cells[CODE] == kind)]
    for loader in blog_loader_first(part["loader"]):
        yield loader, part[part["loader"] == loader]


def _speed(inputs: Inputs, cells, env) -> str | None:
    parts = []
    for kind in KINDS:
        for loader, part in _runs_of(cells, env, kind):
            est = speedup(cells, env, loader, code=kind)
            if est is not None:
                parts.append(f"{ratio_phrase(est)} with {code_phrase(part)}")
    if not parts:
        return None
    return (f"{_on(inputs, env).strip().capitalize() + ', ' if inputs.multi_env else ''}"
            "the GPU trains an epoch faster than the CPU by " + " and by ".join(parts))


def _phase(inputs: Inputs, cells, env) -> str | None:
    for kind in KINDS:
        for _, part in _runs_of(cells, env, kind):
            cpu = phases(part[part["device"] == "cpu"])
            gpu = phases(part[part["device"] == "cuda"])
            if cpu is None or gpu is None:
                continue
            saved = {p: cpu[p] - gpu[p] for p in (*schema.PHASES, "other")}
            label = code_phrase(part)
            if cpu["epoch"] - gpu["epoch"] <= 0:
                return (f"With {label}{_on(inputs, env)} the GPU saves no time per epoch "
                        f"({seconds(cpu['epoch'])} on the CPU, {seconds(gpu['epoch'])} on "
                        "the GPU)")
            phase = max(saved, key=saved.__getitem__)
            name = PHASE_NAMES[phase]
            return (f"{name[0].upper()}{name[1:]} explains most of it: {seconds(cpu[phase])} "
                    f"per epoch on the CPU against {seconds(gpu[phase])} on the GPU ({label}"
                    f"{_on(inputs, env)})")
    return None


def _best_against_blog(inputs: Inputs, cells, env, device="cpu") -> str | None:
    """This project's best code against the DataLoader's cells on one device."""
    here = cells[(cells["env"] == env) & (cells["device"] == device)]
    dl = here[here["loader"] == "dataloader"]
    res = here[here["loader"] == "resident"]
    if dl.empty or res.empty:
        only = sorted(set(here["loader"]))
        return (f"Only {loader_phrase(only[0])} ran on the {device_name(device)}"
                f"{_on(inputs, env)}: no loader effect measured" if only else None)
    est = stats.ratio_ci(col(dl, "epoch_s_median"), col(res, "epoch_s_median"))
    return (f"On the {device_name(device)}{_on(inputs, env)}, {code_phrase(res)} trains an "
            f"epoch {ratio_phrase(est)} faster than {code_phrase(dl)}: data "
            f"loading takes {seconds(median(per_epoch(dl, 'data_s')))} of the DataLoader's "
            f"{seconds(median(col(dl, 'epoch_s_median')))} epoch against "
            f"{seconds(median(per_epoch(res, 'data_s')))} with data held in memory")


def _precision(inputs: Inputs, summary, env, device="cpu") -> str | None:
    sweep = ok(summary, "sweep")
    cells = sweep[(sweep["env"] == env) & (sweep["device"] == device)]
    med = sweep_medians(cells)
    parts = []
    if not med.empty:
        fp32 = cells[cells["precision"] == "fp32"]
        for precision in sorted(set(med["precision"]) - {"fp32"}):
            other = cells[cells["precision"] == precision]
            common = sorted(set(fp32["batch_size"]) & set(other["batch_size"]))
            if not common:
                continue
            batch = 128 if 128 in common else common[-1]
            loader = sorted(set(fp32.loc[fp32["batch_size"] == batch, "loader"])
                            & set(other.loc[other["batch_size"] == batch, "loader"]))[-1]

            def pick(frame, batch=batch, loader=loader):
                return frame[(frame["batch_size"] == batch) & (frame["loader"] == loader)]
            est = stats.ratio_ci(col(pick(other), "samples_per_s"),
                                 col(pick(fp32), "samples_per_s"))
            parts.append(f"{precision} gives {ratio_phrase(est)} the fp32 throughput at batch "
                         f"{count(batch)} ({loader_phrase(loader)})")
        best = med.loc[med["samples_per_s"].idxmax()]
        parts.append(f"the best throughput is {num(best['samples_per_s'], 3, 'samples/s')} at "
                     f"batch {count(best['batch_size'])} ({best['precision']}, "
                     f"{loader_phrase(best['loader'])})")
    if not parts:
        return None
    return f"In the sweep on the {device_name(device)}{_on(inputs, env)}, " + "; ".join(parts)


def _cost(inputs: Inputs, result: cost.CostReport, cells, env) -> str | None:
    rows = [r for r in result.rows if r.env == env]
    if not rows:
        return None
    currency = inputs.model.currency
    loader = blog_loader_first(r.loader for r in rows)[0]
    mine = [r for r in rows if r.loader == loader]
    label = code_phrase(cells[(cells["env"] == env) & (cells["loader"] == loader)])
    parts = [f"{num(r.energy_wh.value, 3, 'Wh')} ({money(r.electricity.value, currency)} of "
             f"electricity) on the {device_name(r.device)}" for r in mine]
    totals = [f"{money(r.total.value, currency)} on the {device_name(r.device)}" for r in mine]
    text = (f"One training run{_on(inputs, env)} at the blog's settings ({label}, the whole "
            f"process) takes {' and '.join(parts)}; with the hardware's write-off and the "
            f"waiting (assumed values) it costs {' and '.join(totals)}")
    be = next((b for b in result.break_even if b.env == env and b.loader == loader), None)
    if be is not None:
        text += (f"; the GPU machine's extra {money(be.extra_price, currency)} pays for itself "
                 f"after {runs(be.runs_with_waiting)} counting waiting "
                 f"({runs(be.runs_electricity)} on electricity alone)")
    return text


def _accuracy(inputs: Inputs, cells, env) -> str | None:
    part = cells[(cells["env"] == env) & (cells["experiment"] == "convergence")]
    if part.empty:
        return None
    loader = blog_loader_first(part["loader"])[0]
    same = part[part["loader"] == loader]
    kind = sorted(set(same[CODE]))[0]
    same = same[same[CODE] == kind]
    # the spread of the code and loader the sentence is about, not of another code's cells
    spread = seed_spread(same)
    spread_text = ("one repeat per cell, so no seed-to-seed spread" if spread is None
                   else f"its seed-to-seed spread is {points(spread, False)}")
    cpu, gpu = same[same["device"] == "cpu"], same[same["device"] == "cuda"]
    where = f"{code_phrase(same)}{_on(inputs, env)}"
    if not cpu.empty and not gpu.empty:
        diff = stats.diff_ci(col(gpu, "final_test_acc"), col(cpu, "final_test_acc"))
        within = spread is not None and abs(diff.value) <= spread
        return (f"Final test accuracy is {num(median(col(cpu, 'final_test_acc')), 4, '%')} "
                f"on the CPU and {num(median(col(gpu, 'final_test_acc')), 4, '%')} on the "
                f"GPU ({where}), a difference of {points(diff.value)} "
                f"({points_interval(diff)}); {spread_text}"
                + ("" if spread is None else
                   (", so the difference lies within it" if within
                    else ", so the difference exceeds it")))
    accuracies = ", ".join(
        f"{num(median(col(same[same['device'] == d], 'final_test_acc')), 4, '%')}"
        f" on the {device_name(d)}" for d in sorted(set(same["device"])))
    return f"Final test accuracy is {accuracies} ({where}); {spread_text}"


def _no_gpu(summary, envs) -> str:
    why = {env: absent_reason(summary, env, "cuda").removeprefix("not in this study: ")
           for env in envs}
    reasons = ("; ".join(f"{env}: {text}" for env, text in why.items())
               if len(set(why.values())) > 1 else next(iter(why.values())))
    return (f"This study has no GPU, so there is no GPU/CPU speed-up: {reasons}; the section "
            "\"Adding a GPU\" says how to add one")


def findings(inputs: Inputs) -> list[str]:
    """Three to six sentences, computed from the quiet cells (busy ones left out where a
    quiet repeat exists)."""
    summary, model, envs = inputs.summary, inputs.model, inputs.envs
    quiet, dropped = discount_busy(summary)
    cells, _ = blog.blog_cells(quiet)
    gpu_envs = envs_with_gpu(cells)
    subset = blog.subset(cells)
    at = "At the blog's settings (batch 128, fp32" + (f"; {subset}" if subset else "") + "), "
    sentences = []
    if gpu_envs:
        speed = [s for env in gpu_envs if (s := _speed(inputs, cells, env))]
        if speed:
            sentences.append(at + "; ".join(s[0].lower() + s[1:] for s in speed))
        env = gpu_envs[0]
        sentences.append(_phase(inputs, cells, env))
    else:
        ran = ok(summary)
        ran = ran[ran["device"] == "cuda"]
        sentences.append(_no_gpu(summary, envs) if ran.empty else
                         "No GPU cell ran at the blog's settings (batch 128, fp32), so there is "
                         "no GPU/CPU speed-up at them; the sweep compares the devices at other "
                         "settings")
        env = primary_env(summary)
        sentences += [_best_against_blog(inputs, cells, env), _precision(inputs, quiet, env)]
    sentences.append(_cost(inputs, cost.compute(quiet, inputs.epochs, model), cells, env))
    sentences.append(_accuracy(inputs, cells, env))
    hardware = "Hardware: " + "; ".join(
        (f"{e}: " if inputs.multi_env else "") + hardware_line(summary, e) for e in envs)
    busy = int(busy_mask(summary).sum())
    if busy:
        hardware += (f"; {plural(busy, 'cell')} ran on a busy machine (others used more than "
                     f"a quarter of it), {dropped} of them left out of these findings")
    said = [s for s in sentences if s]
    return [s.rstrip(".") + "." for s in [*said[:MAX_SENTENCES], hardware]]


def context(inputs: Inputs) -> dict:
    return {"findings": findings(inputs)}

