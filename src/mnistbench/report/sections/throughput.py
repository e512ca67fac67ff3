"""Section 6, throughput vs batch size (three charts of the sweep), the best throughput of
each environment and device beside its throughput at the blog's batch 128, fp32, and each
precision's throughput against fp32 on the same device, loader and batch size (with the bf16
path: native instructions or emulated), as the precision chart draws it."""

from __future__ import annotations

from mnistbench.report.formatting import count, num, ratio_parts
from mnistbench.report.selections import Inputs, col, distinct, loader_name, ok, sweep_medians
from mnistbench.results import stats


def _best_rows(summary) -> list[dict]:
    med = sweep_medians(summary)
    rows: list[dict] = []
    if med.empty:
        return rows
    for (env, device), group in med.groupby(["env", "device"], sort=True):
        best = group.loc[group["samples_per_s"].idxmax()]
        at128 = group[(group["batch_size"] == 128) & (group["precision"] == "fp32")]
        rows.append({"env": env, "device": device,
                     "best": num(best["samples_per_s"], 3, "samples/s"),
                     "where": f"batch {count(best['batch_size'])}, {best['precision']}, "
                              f"{loader_name(best['loader'])}",
                     "at128": ", ".join(f"{num(r.samples_per_s, 3)} ({loader_name(r.loader)})"
                                        for r in at128.itertuples()) or "–"})
    return rows


def _precision_rows(summary) -> tuple[list[str], list[dict]]:
    """(batch sizes, rows): per environment, device, precision other than fp32 and loader,
    the throughput over fp32's at each batch size, with its interval."""
    sweep = ok(summary, "sweep").dropna(subset=["samples_per_s"])
    batches = sorted({int(b) for b in sweep["batch_size"]}) if not sweep.empty else []
    rows = []
    for (env, device, loader), group in sweep.groupby(["env", "device", "loader"], sort=True):
        fp32 = group[group["precision"] == "fp32"]
        for precision in sorted(set(group["precision"]) - {"fp32"}):
            other = group[group["precision"] == precision]
            cells, any_value = [], False
            for batch in batches:
                est = stats.ratio_ci(col(other[other["batch_size"] == batch], "samples_per_s"),
                                     col(fp32[fp32["batch_size"] == batch], "samples_per_s"))
                value, ci = ratio_parts(est)
                any_value |= est is not None
                cells.append({"value": value, "ci": ci})
            if any_value:
                path = ", ".join(distinct(other, "bf16_path")) if precision == "bf16" else ""
                rows.append({"env": env, "device": device, "precision": precision,
                             "loader": loader_name(loader), "path": path or "–",
                             "cells": cells})
    return [count(b) for b in batches], rows


def context(inputs: Inputs) -> dict:
    batches, rows = _precision_rows(inputs.summary)
    return {"best_rows": _best_rows(inputs.summary), "precision_batches": batches,
            "precision_rows": rows}
