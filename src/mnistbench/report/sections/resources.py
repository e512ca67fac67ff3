"""Section 8, resources at the blog's settings: medians over repeats of CPU use, peak
memory, GPU utilisation, memory and power, and the CPU package power from the energy
counter; the time series are a chart."""

from __future__ import annotations

from mnistbench.report.formatting import missing, num
from mnistbench.report.selections import (
    RUN,
    Inputs,
    busy_note,
    code_short,
    col,
    loader_name,
    median,
)


def _cpu_power(cells) -> list[float]:
    """Mean CPU package power of each cell, W: RAPL energy over the timed epochs / their
    duration."""
    out = []
    for energy, timed in zip(cells["cpu_energy_j"].tolist(), cells["timed_s"].tolist(),
                             strict=True):
        if not missing(energy) and not missing(timed) and timed > 0:
            out.append(float(energy) / float(timed))
    return out


#: Template key -> (column, unit) of each median the table shows.
MEDIANS = {"cpu_mean": ("cpu_pct_mean", "%"), "cpu_peak": ("cpu_pct_peak", "%"),
           "rss": ("peak_rss_mb", "MiB"), "gpu_mean": ("gpu_util_mean", "%"),
           "gpu_peak": ("gpu_util_peak", "%"), "gpu_mem": ("peak_cuda_mem_mb", "MiB"),
           "power": ("gpu_power_mean_w", "W")}


def _rows(cells) -> list[dict]:
    rows = []
    for (env, device, loader, _), group in cells.groupby(list(RUN), sort=True):
        rows.append({
            "env": env, "device": device, "loader": loader_name(loader),
            "code": code_short(group), "n": str(len(group)),
            **{key: num(median(col(group, column)), 3, unit)
               for key, (column, unit) in MEDIANS.items()},
            "cpu_power": num(median(_cpu_power(group)), 3, "W"),
            "busy": busy_note(group),
        })
    return rows


def context(inputs: Inputs) -> dict:
    return {"resource_rows": _rows(inputs.cells)}
