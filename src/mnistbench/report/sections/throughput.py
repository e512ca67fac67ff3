"""Section 6, throughput vs batch size (three charts of the sweep) and the best throughput
of each environment and device, beside its throughput at the blog's batch 128, fp32."""

from __future__ import annotations

from mnistbench.report.formatting import count, num
from mnistbench.report.selections import Inputs, sweep_medians


def _best_rows(summary) -> list[dict]:
    med = sweep_medians(summary)
    rows = []
    if med.empty:
        return rows
    for (env, device), group in med.groupby(["env", "device"], sort=True):
        best = group.loc[group["samples_per_s"].idxmax()]
        at128 = group[(group["batch_size"] == 128) & (group["precision"] == "fp32")]
        rows.append({"env": env, "device": device,
                     "best": num(best["samples_per_s"], 3, "samples/s"),
                     "where": f"batch {count(best['batch_size'])}, {best['precision']}, "
                              f"{best['loader']} loader",
                     "at128": ", ".join(f"{num(r.samples_per_s, 3)} ({r.loader})"
                                        for r in at128.itertuples()) or "–"})
    return rows


def context(inputs: Inputs) -> dict:
    return {"best_rows": _best_rows(inputs.summary)}
