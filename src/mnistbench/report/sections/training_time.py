"""Section 4, training time: like the blog's table, at its settings, medians over repeats of
the time per epoch, the total, and data loading and backprop per epoch (as the blog gives
them), with the GPU's speed-up over the CPU running the same code."""

from __future__ import annotations

from mnistbench.report import comparison
from mnistbench.report.formatting import ratio_parts, seconds
from mnistbench.report.selections import (
    RUN,
    Inputs,
    busy_note,
    code_short,
    col,
    loader_name,
    median,
    per_epoch,
    speedup,
)


def _speed(summary, cells, env, device, loader, kind) -> tuple[str, str]:
    """The speed-up over the CPU running the same code: on this machine, else across
    machines (:mod:`mnistbench.report.comparison`), said so under the figure."""
    found = next((p for p in comparison.pairs(summary, cells, code=kind, loader=loader)
                  if p.gpu_env == env), None) if device == "cuda" else None
    if found is None or found.one_machine:
        return ratio_parts(speedup(cells, env, loader, device, code=kind))
    speed, ci = ratio_parts(comparison.ratio(cells, found, loader, code=kind))
    return speed, "; ".join(x for x in (ci, found.label()) if x)


def _rows(summary, cells) -> list[dict]:
    rows = []
    for (env, device, loader, kind), group in cells.groupby(list(RUN), sort=True):
        speed, speed_ci = "1× (baseline)", ""
        if device != "cpu":
            speed, speed_ci = _speed(summary, cells, env, device, loader, kind)
        rows.append({
            "env": env, "device": device, "loader": loader_name(loader),
            "code": code_short(group), "n": str(len(group)),
            "epoch": seconds(median(col(group, "epoch_s_median"))),
            "total": seconds(median(col(group, "total_s"))),
            "data": seconds(median(per_epoch(group, "data_s"))),
            "backward": seconds(median(per_epoch(group, "backward_s"))),
            "speedup": speed, "speedup_ci": speed_ci, "busy": busy_note(group),
        })
    return rows


def context(inputs: Inputs) -> dict:
    return {"time_rows": _rows(inputs.summary, inputs.cells)}
