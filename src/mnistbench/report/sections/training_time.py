"""Section 4, training time: like the blog's table, at its settings, medians over repeats of
the time per epoch, the total, data loading and backprop, with the GPU's speed-up."""

from __future__ import annotations

from mnistbench.report.formatting import ratio_parts, seconds
from mnistbench.report.selections import RUN, Inputs, busy_note, col, median, speedup


def _rows(cells) -> list[dict]:
    rows = []
    for (env, device, loader), group in cells.groupby(list(RUN), sort=True):
        speed, speed_ci = "1× (baseline)", ""
        if device != "cpu":
            speed, speed_ci = ratio_parts(speedup(cells, env, loader, device))
        rows.append({
            "env": env, "device": device, "loader": loader, "n": str(len(group)),
            "epoch": seconds(median(col(group, "epoch_s_median"))),
            "total": seconds(median(col(group, "total_s"))),
            "data": seconds(median(col(group, "data_s"))),
            "backward": seconds(median(col(group, "backward_s"))),
            "speedup": speed, "speedup_ci": speed_ci, "busy": busy_note(group),
        })
    return rows


def context(inputs: Inputs) -> dict:
    return {"time_rows": _rows(inputs.cells)}
