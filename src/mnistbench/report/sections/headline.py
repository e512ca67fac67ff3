"""Section 2, the headline: the time per epoch, the total and the GPU/CPU speed-up at the
blog's settings, per environment, device, loader and kind of code (the blog's code as
written, this project's best, other settings; a row saying why for a device with no ok cell),
beside the blog's own figures. A speed-up compares cells of one kind of code only."""

from __future__ import annotations

from mnistbench.report import blog, comparison
from mnistbench.report.formatting import (
    as_printed,
    interval,
    missing,
    num,
    plain,
    plural,
    ratio_interval,
    seconds,
)
from mnistbench.report.selections import (
    BUSY_SHARE_PCT,
    CODE,
    CODE_LEGEND,
    COMPARED_DEVICES,
    RUN,
    Inputs,
    absent_reason,
    busy_mask,
    busy_note,
    code_short,
    col,
    device_name,
    devices,
    hardware,
    loader_name,
    loader_phrase,
    speedup,
)
from mnistbench.results import stats


def _shown(text: str) -> str:
    """An interval as a cell shows it: nothing for "no interval: 1 run", which the table's
    note says once."""
    return "" if text.startswith("no interval: 1 run") else text


def _rows(summary, cells) -> tuple[list[dict], list[str]]:
    """The table's rows, and the notes on the devices a machine left to another: a device an
    environment did not measure, which another did, has no row of its own (the note names
    both), and its speed-ups are across machines, labelled."""
    rows, elsewhere = [], []
    for env in sorted(summary["env"].unique()):
        have = set(cells.loc[cells["env"] == env, "device"])
        for device in devices(summary):
            group = cells[(cells["env"] == env) & (cells["device"] == device)]
            if group.empty:
                other = comparison.other_env(summary, cells, env, device)
                if other is not None:
                    ran = [device_name(d) for d in devices(summary) if d in have]
                    what = f"only its {' and '.join(ran)}" if ran else "nothing"
                    elsewhere.append(f"{env}: {what} ran at the blog's settings "
                                     f"({device_name(device)}: {other})")
                elif device in COMPARED_DEVICES:
                    rows.append({"env": env, "device": device,
                                 "hardware": hardware(summary, env, device), "loader": "–",
                                 "code": "–", "n": "0", "busy": "",
                                 "absent": absent_reason(summary, env, device)})
                continue
            for (loader, kind), part in group.groupby(["loader", CODE], sort=True):
                epoch = stats.median_ci(col(part, "epoch_s_median"))
                total = stats.median_ci(col(part, "total_s"))
                speed, speed_ci = "1× (baseline)", ""
                if device != "cpu":
                    speed, speed_ci = _speedup(summary, cells, env, device, loader, kind)
                rows.append({
                    "env": env, "device": device, "hardware": hardware(summary, env, device),
                    "loader": loader_name(loader), "code": code_short(part),
                    "n": str(epoch.n if epoch else 0), "absent": "",
                    "epoch": seconds(epoch.value if epoch else None),
                    "epoch_ci": _shown(interval(epoch, "s")),
                    "total": seconds(total.value if total else None),
                    "total_ci": _shown(interval(total, "s")),
                    "speedup": speed, "speedup_ci": _shown(speed_ci), "busy": busy_note(part),
                })
    return rows, elsewhere


def _speedup(summary, cells, env, device, loader, kind) -> tuple[str, str]:
    """(the speed-up, its interval and scope) of ``env``'s ``device`` row: over its own CPU,
    else over another machine's (:mod:`mnistbench.report.comparison`), said so."""
    est = speedup(cells, env, loader, device, code=kind)
    if est is not None:
        return num(est.value, 3, "×"), ratio_interval(est)
    found = next((p for p in comparison.pairs(summary, cells, code=kind, loader=loader)
                  if p.gpu_env == env), None)
    est = None if found is None else comparison.ratio(cells, found, loader, code=kind,
                                                     device=device)
    if found is None or est is None:
        return "–", f"no ok CPU cell of the same code with {loader_phrase(loader)}"
    shown = _shown(ratio_interval(est))
    return num(est.value, 3, "×"), f"{found.short()}" + (f"; {shown}" if shown else "")


def _notes(cells) -> list[str]:
    if cells.empty:
        return ["No ok cell ran at the blog's settings: no headline. The matrix below says "
                "what failed."]
    notes = []
    sizes = cells.groupby(list(RUN)).size()
    if (sizes == 1).any():
        notes.append("Rows with one repeat have no confidence interval (none is shown): a "
                     "single run says nothing about run-to-run spread. Run 2 or more repeats "
                     "for one (6 or more for a 95 % interval of a median).")
    if ((sizes > 1) & (sizes < 6)).any():
        notes.append("With fewer than 6 runs no interval of a median reaches 95 %, and "
                     "with fewer than 7 a side none of a speed-up: the interval shown is "
                     "then the range of the runs, with the coverage those runs give (3 "
                     "runs: 75 % for a median; 2 runs a side: at least 25 % for a "
                     "speed-up).")
    if busy_mask(cells).any():
        notes.append("Rows marked busy include repeats that ran while other processes used "
                     f"more than {BUSY_SHARE_PCT} % of the machine: their times are "
                     "pessimistic. The findings leave them out where a quiet repeat exists.")
    return notes


def context(inputs: Inputs) -> dict:
    cells = inputs.cells
    settings = {key: ", ".join(sorted({plain(v) for v in cells[key].tolist()
                                       if not missing(v)})) or "–"
                for key in ("batch_size", "precision", "epochs")}
    rows, elsewhere = _rows(inputs.summary, cells)
    notes = _notes(cells)
    if elsewhere:
        notes.append("; ".join(elsewhere) + ". A speed-up of a machine without its own CPU "
                     "cells is across machines: its row says against which CPU.")
    return {
        "headline_rows": rows,
        "headline_code_legend": CODE_LEGEND,
        "headline_notes": notes,
        "headline_source": inputs.cells_source,
        "headline_settings": "; ".join(f"{k.replace('_', ' ')} {v}"
                                       for k, v in settings.items()),
        "headline_epochs": plural(settings["epochs"], "epoch"),
        # the blog's figures beside this study's
        "blog_cpu": blog.BLOG["cpu"],
        "blog_gpu": blog.BLOG["gpu"],
        "blog_cpu_epoch": as_printed(blog.BLOG["cpu_epoch_s"], "s"),
        "blog_gpu_epoch": as_printed(blog.BLOG["gpu_epoch_s"], "s"),
        "blog_speedup": as_printed(blog.BLOG["speedup"], "×"),
    }
