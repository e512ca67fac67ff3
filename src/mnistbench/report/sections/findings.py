"""Section 1, the findings: three to six sentences computed from the quiet cells (busy ones
left out where a quiet repeat exists): the GPU's speed-up and the phase behind it, or,
without a GPU, why and how to add one with what the CPU study found (loader, precision,
best batch); the cost of a run with the break-even; the accuracy difference against the
seed spread; the hardware."""

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
    ratio_interval,
    ratio_phrase,
    runs,
    seconds,
)
from mnistbench.report.selections import (
    BUSY_SHARE_PCT,
    Inputs,
    absent_reason,
    blog_loader_first,
    busy_mask,
    col,
    device_name,
    discount_busy,
    envs_with_gpu,
    hardware_line,
    median,
    ok,
    per_epoch,
    phases,
    primary_env,
    seed_spread,
    speedup,
    sweep_medians,
    waiting_share,
)
from mnistbench.results import cost, stats

#: Each phase of an epoch as a sentence names it.
PHASE_NAMES = {"data": "data loading", "forward": "the forward pass",
               "backward": "the backward pass", "optimizer": "the optimizer step",
               "eval": "the test-set evaluation", "other": "the loop's own overhead"}
#: The sentences at most before the hardware's.
MAX_SENTENCES = 5


def _speed(cells, env_prefix, env) -> str | None:
    parts = []
    for loader in blog_loader_first(cells.loc[cells["env"] == env, "loader"]):
        est = speedup(cells, env, loader)
        if est is not None:
            parts.append(f"{num(est.value, 3, '×')} with the {loader} loader "
                         f"({ratio_interval(est)})")
    if not parts:
        return None
    return f"{env_prefix}the GPU trains an epoch faster than the CPU by " + " and ".join(parts)


def _phase(cells, env) -> str | None:
    gpu_cells = cells[(cells["env"] == env) & (cells["device"] == "cuda")]
    for loader in blog_loader_first(gpu_cells["loader"]):
        same = (cells["env"] == env) & (cells["loader"] == loader)
        cpu = phases(cells[same & (cells["device"] == "cpu")])
        gpu = phases(cells[same & (cells["device"] == "cuda")])
        if cpu is None or gpu is None:
            continue
        saved = {p: cpu[p] - gpu[p] for p in (*schema.PHASES, "other")}
        total = cpu["epoch"] - gpu["epoch"]
        phase = max(saved, key=saved.get)
        if total <= 0:
            return (f"With the {loader} loader the GPU saves no time per epoch "
                    f"({seconds(cpu['epoch'])} on the CPU, {seconds(gpu['epoch'])} on the GPU)")
        name = PHASE_NAMES[phase]
        return (f"{name[0].upper()}{name[1:]} explains most of "
                f"it: {seconds(cpu[phase])} per epoch on the CPU against {seconds(gpu[phase])} "
                f"on the GPU, {num(100 * saved[phase] / total, 2, '%')} of the "
                f"{seconds(total)} per epoch the GPU saves ({loader} loader)")
    return None


def _loader(cells, env, device="cpu") -> str | None:
    here = (cells["env"] == env) & (cells["device"] == device)
    dl = cells[here & (cells["loader"] == "dataloader")]
    res = cells[here & (cells["loader"] == "resident")]
    if dl.empty or res.empty:
        only = sorted(set(cells.loc[here, "loader"]))
        return (f"Only the {only[0]} loader ran on the {device_name(device)}: no loader "
                "effect measured" if only else None)
    est = stats.ratio_ci(col(dl, "epoch_s_median"), col(res, "epoch_s_median"))
    dl_data, res_data = median(per_epoch(dl, "data_s")), median(per_epoch(res, "data_s"))
    return (f"On the {device_name(device)}, resident data makes an epoch "
            f"{ratio_phrase(est)} faster than the "
            f"DataLoader: data loading takes {seconds(dl_data)} of the DataLoader's "
            f"{seconds(median(col(dl, 'epoch_s_median')))} epoch against "
            f"{seconds(res_data)} with resident data")


def _precision(summary, env, device="cpu") -> str | None:
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
                         f"{count(batch)} ({loader} loader)")
        best = med.loc[med["samples_per_s"].idxmax()]
        parts.append(f"the best throughput is {num(best['samples_per_s'], 3, 'samples/s')} at "
                     f"batch {count(best['batch_size'])} ({best['precision']}, "
                     f"{best['loader']} loader)")
    if not parts:
        return None
    return f"In the sweep on the {device_name(device)}, " + "; ".join(parts)


def _cost(result: cost.CostReport, env, model) -> str | None:
    rows = [r for r in result.rows if r.env == env]
    if not rows:
        return None
    currency = model.currency
    loader = blog_loader_first(r.loader for r in rows)[0]
    parts = [f"{money(r.total.value, currency)} on the {device_name(r.device)}"
             for r in rows if r.loader == loader]
    text = (f"One training run at the blog's settings ({loader} loader, the whole process) "
            f"costs {' and '.join(parts)}")
    cpu = next((r for r in rows if r.loader == loader and r.device == "cpu"), None)
    share = waiting_share(cpu) if cpu else None
    if share is not None:
        text += (f", of which waiting is {num(100 * share, 2, '%')} on the CPU"
                 + (" (waiting dominates)" if share > 0.5 else ""))
    be = next((b for b in result.break_even if b.env == env and b.loader == loader), None)
    if be is not None:
        text += (f"; the GPU machine's extra {money(be.extra_price, currency)} pays for itself "
                 f"after {runs(be.runs_with_waiting)} counting waiting "
                 f"({runs(be.runs_electricity)} on electricity alone)")
    return text


def _accuracy(cells, env) -> str | None:
    part = cells[(cells["env"] == env) & (cells["experiment"] == "convergence")]
    if part.empty:
        return None
    spread = seed_spread(part)
    spread_text = ("one repeat per cell, so no seed-to-seed spread" if spread is None
                   else f"the seed-to-seed spread measured here is {points(spread, False)}")
    loader = blog_loader_first(part["loader"])[0]
    cpu = part[(part["device"] == "cpu") & (part["loader"] == loader)]
    gpu = part[(part["device"] == "cuda") & (part["loader"] == loader)]
    if not cpu.empty and not gpu.empty:
        diff = stats.diff_ci(col(gpu, "final_test_acc"), col(cpu, "final_test_acc"))
        within = spread is not None and abs(diff.value) <= spread
        return (f"Final test accuracy is {num(median(col(cpu, 'final_test_acc')), 4, '%')} "
                f"on the CPU and {num(median(col(gpu, 'final_test_acc')), 4, '%')} on the "
                f"GPU ({loader} loader), a difference of {points(diff.value)} "
                f"({points_interval(diff)}); {spread_text}"
                + ("" if spread is None else
                   (", so the difference lies within it" if within
                    else ", so the difference exceeds it")))
    accuracies = ", ".join(
        f"{num(median(col(part[part['device'] == d], 'final_test_acc')), 4, '%')}"
        f" on the {device_name(d)}" for d in sorted(set(part["device"])))
    return f"Final test accuracy is {accuracies} ({loader} loader); {spread_text}"


def _no_gpu(summary, envs) -> str:
    why = {env: absent_reason(summary, env, "cuda") for env in envs}
    reasons = ("; ".join(f"{env}: {text}" for env, text in why.items())
               if len(set(why.values())) > 1 else next(iter(why.values())))
    return (f"This study has no GPU ({reasons}), so there is no GPU/CPU speed-up; to add one, "
            "copy another machine's results/runs/ENV folder into results/runs/ and rerun "
            "(snakemake --cores all), run the study in the CUDA image (docker run --gpus all "
            "mnistbench:cuda), or run the cuda cells on a SLURM GPU partition "
            "(snakemake --profile profiles/slurm)")


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
        speed = [s for env in gpu_envs
                 if (s := _speed(cells, f"on {env} " if inputs.multi_env else "", env))]
        if speed:
            sentences.append(at + "; ".join(speed))
        env = gpu_envs[0]
        sentences.append(_phase(cells, env))
    else:
        ran = ok(summary)
        ran = ran[ran["device"] == "cuda"]
        sentences.append(_no_gpu(summary, envs) if ran.empty else
                         "No GPU cell ran at the blog's settings (batch 128, fp32), so there is "
                         "no GPU/CPU speed-up at them; the sweep compares the devices at other "
                         "settings")
        env = primary_env(summary)
        sentences += [_loader(cells, env), _precision(quiet, env)]
    sentences.append(_cost(cost.compute(quiet, inputs.epochs, model), env, model))
    sentences.append(_accuracy(cells, env))
    hardware = "Hardware: " + "; ".join(
        (f"{e}: " if inputs.multi_env else "") + hardware_line(summary, e) for e in envs)
    busy = int(busy_mask(summary).sum())
    if busy:
        hardware += (f"; {plural(busy, 'cell')} ran on a busy machine (others used more than "
                     f"{BUSY_SHARE_PCT} % of it), {dropped} of them left out of these findings")
    said = [s for s in sentences if s]
    return [s.rstrip(".") + "." for s in [*said[:MAX_SENTENCES], hardware]]


def context(inputs: Inputs) -> dict:
    return {"findings": findings(inputs)}
