"""The first screen: a verdict box of at most :data:`MAX_WORDS` words, generated from the
data: the GPU/CPU speed-up per kind of code, or "not measured yet" and why; this machine's
epoch for the blog's code as written and for this project's best (whichever ran), beside the
blog's 58.7 s and 5.2 s on another machine; the blog's claims tallied as confirmed,
contradicted and not checkable, the strongest named. The headline chart under it is
:func:`mnistbench.report.plots.headline`."""

from __future__ import annotations

from mnistbench.core import study
from mnistbench.report import blog, comparison
from mnistbench.report.formatting import num, plural, ratio_interval, seconds
from mnistbench.report.sections import claims
from mnistbench.report.selections import (
    CODE,
    Inputs,
    code_label,
    col,
    distinct,
    envs_with_gpu,
    focus_env,
    gpu_absence,
    hardware,
    median,
    one_machine,
    one_machine_env,
    speedup,
)

#: The most words the box may hold.
MAX_WORDS = 200


def _speedups(inputs: Inputs, cells) -> tuple[str, list[str]]:
    """(the speed-up line, the CPU environments it divides by where it is across machines,
    else [])."""
    absent = gpu_absence(inputs.summary)
    if absent or not envs_with_gpu(cells):
        return (f"GPU speed-up: not measured yet "
                f"({absent or 'no GPU cell at the blog settings'}).", [])
    env, parts = envs_with_gpu(cells)[0], []
    for kind in ("blog", "best"):
        part = cells[(cells["env"] == env) & (cells[CODE] == kind)]
        for loader in sorted(set(part["loader"])):
            est = speedup(cells, env, loader, code=kind)
            if est is not None:
                parts.append(f"{num(est.value, 3, '×')} with {study.CODE_LABELS[kind]}")
    if not parts:
        line, cpu_envs = _across_machines(inputs, cells, env)
        return line or ("GPU speed-up: not measured like for like (no CPU and GPU cells of "
                        "the same code)."), cpu_envs
    return (f"GPU speed-up: {' and '.join(parts)} ({hardware(inputs.summary, env, 'cuda')} "
            f"against {hardware(inputs.summary, env, 'cpu')}).", [])


def _one_machine(inputs: Inputs) -> tuple[str, str]:
    """(the first line, the machine's other ratio) from the headline experiment: on an
    environment that measured its CPU and its GPU, the GPU over the CPU per code; on one with
    a CPU only, this project's best over the blog's code. Each with its interval and n.
    ("", "") without headline cells."""
    chosen = one_machine_env(inputs.summary)
    if chosen is None:
        return "", ""
    env, why = chosen
    found = one_machine(inputs.summary, env, why)

    def said(est) -> str:
        return f"{num(est.value, 3, '×')} ({ratio_interval(est)})"

    best = [f"{said(est)} on the {'CPU' if d == 'cpu' else 'GPU'}"
            for d, est in sorted(found.best_over_blog.items(), key=lambda x: x[0] != "cpu")
            if est is not None]
    best_line = (f"This project's best over the blog's code, same machine: {' and '.join(best)}."
                 if best else "")
    parts = [f"{said(est)} with {study.CODE_LABELS[code]}"
             for (device, code), est in sorted(found.gpu_over_cpu.items()) if est is not None]
    if not parts:
        return best_line, ""
    gpu = next(d for d, _ in sorted(found.gpu_over_cpu))
    return (f"GPU speed-up on one machine ({env}: {hardware(inputs.summary, env, gpu)} "
            f"against its own {hardware(inputs.summary, env, 'cpu')}): {' and '.join(parts)}.",
            best_line)


def _across_machines(inputs: Inputs, cells, gpu_env: str) -> tuple[str, list[str]]:
    """Where ``gpu_env`` did not measure its CPU, its GPU against the CPU of another
    environment (:mod:`mnistbench.report.comparison`'s rule), per kind of code, said to be
    across machines: (the line, the CPU environments used); ("", []) when no CPU ran the same
    code."""
    parts, cpu_envs = [], []
    for kind in ("blog", "best"):
        part = cells[(cells["env"] == gpu_env) & (cells[CODE] == kind)]
        for loader in sorted(set(part["loader"])):
            found = next((p for p in comparison.pairs(inputs.summary, cells, code=kind,
                                                      loader=loader)
                          if p.gpu_env == gpu_env and not p.one_machine), None)
            est = None if found is None else comparison.ratio(cells, found, loader, code=kind)
            if found is not None and est is not None:
                parts.append(f"{num(est.value, 3, '×')} with {study.CODE_LABELS[kind]}")
                if found.cpu_env not in cpu_envs:
                    cpu_envs.append(found.cpu_env)
    if not parts:
        return "", []
    against = " and ".join(f"{hardware(inputs.summary, e, 'cpu')} in {e}" for e in cpu_envs)
    return (f"GPU speed-up across machines (none measured its CPU and its GPU, so not like "
            f"for like): {' and '.join(parts)} ({hardware(inputs.summary, gpu_env, 'cuda')} "
            f"in {gpu_env} against {against}).", cpu_envs)


def _machine(summary, env: str, multi_env: bool, threads: bool = True) -> str:
    """"env: CPU model, N cores, M threads" (the env's name only in a study of several; the
    threads only with ``threads``)."""
    here = summary[summary["env"] == env]
    machine = ", ".join(distinct(here, "cpu_model")) or "CPU model not recorded"
    cores = distinct(here, "cpu_cores_physical")
    counts = distinct(here, "cpu_cores_logical")
    return (f"{env + ': ' if multi_env else ''}{machine}"
            + (f", {plural('/'.join(cores), 'core')}" if cores else "")
            + (f", {plural('/'.join(counts), 'thread')}" if counts and threads else ""))


def _epochs(cells, env, devices=("cpu", "cuda")) -> list[str]:
    """This machine's epoch per device and kind of code (the blog's and the best first)."""
    lines = []
    here = cells[cells["env"] == env]
    for device in devices:
        mine = here[here["device"] == device]
        if mine.empty:
            continue
        name = "CPU" if device == "cpu" else "GPU"
        for kind in ("blog", "best", ""):
            part = mine[mine[CODE] == kind]
            if part.empty:
                if kind == "blog":
                    lines.append(f"{name}, {study.CODE_LABELS[kind]}: not run here")
                continue
            for _, group in part.groupby("loader"):
                lines.append(f"{name}, {code_label(group)}: "
                             f"{seconds(median(col(group, 'epoch_s_median')))}")
    return lines


def word_count(context: dict) -> int:
    """Words of the verdict box as the page shows it."""
    text = " ".join([context["verdict_heading"], context["verdict_one_machine"],
                     context["verdict_one_machine_best"], context["verdict_speedup"],
                     context["verdict_machine"], *context["verdict_epochs"],
                     context["verdict_blog"], context["verdict_tally"],
                     *context["verdict_strongest"]])
    return len(text.split())


def context(inputs: Inputs) -> dict:
    cells = inputs.cells
    env = focus_env(inputs.summary, cells)
    found = claims.checks(inputs)
    tally = claims.tally(found)
    subset = blog.subset(cells)
    settings = "seconds per epoch at the blog's settings" + (f" ({subset})" if subset else "")
    speed, across = _speedups(inputs, cells)
    here = set(cells.loc[cells["env"] == env, "device"])
    cpu_envs = [] if "cpu" in here else across
    if cpu_envs:  # the two machines the speed-up divides, each with its cores
        cpus = ", ".join(f"CPU of {e} ({_machine(inputs.summary, e, False, False)})"
                         for e in cpu_envs)
        machine = (f"{settings[:1].upper()}{settings[1:]}, across machines: GPU of {env} (host "
                   f"{_machine(inputs.summary, env, False, False)}; its CPU ran nothing), "
                   f"{cpus}:")
        epochs = _epochs(cells, env, ("cuda",)) + [
            line.replace("CPU, ", f"CPU ({e}), " if len(cpu_envs) > 1 else "CPU, ", 1)
            for e in cpu_envs for line in _epochs(cells, e, ("cpu",))]
    else:
        machine = (f"This machine ({_machine(inputs.summary, env, inputs.multi_env)}), "
                   f"{settings}:")
        epochs = _epochs(cells, env)
    ref = blog.BLOG
    first, best = _one_machine(inputs)
    strongest = [f"{c.verdict}: {c.short}" for c in claims.strongest(found)]
    if first.startswith("GPU speed-up on one machine"):
        # The one-machine figure leads; the convergence cells' figure (often across
        # machines) follows as a labelled second line.
        speed = f"Second line, from the 10-epoch convergence cells: {speed}"
    out = {
        "verdict_heading": "Verdict",
        "verdict_one_machine": first,
        "verdict_one_machine_best": best,
        "verdict_speedup": speed,
        "verdict_machine": machine,
        "verdict_epochs": epochs or ["no ok cell at the blog's settings"],
        "verdict_blog": (f"The blog, on another machine: {ref['cpu_epoch_s']:g} s on its CPU "
                         f"({ref['cpu']}), {ref['gpu_epoch_s']:g} s on its GPU "
                         f"({ref['gpu']})."),
        "verdict_tally": (f"The blog's {len(found)} claims, checked here: "
                          + ", ".join(f"{n} {word}" for word, n in tally.items())
                          + ". The strongest:"),
        "verdict_strongest": strongest,
    }
    # The strongest claims, as many as the box holds (at least one).
    while word_count(out) > MAX_WORDS and len(strongest) > 1:
        strongest.pop()
    return out
