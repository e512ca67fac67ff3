"""Section 5, where the time goes: the phases of an epoch (a chart, and the same medians as a
table), and the DataLoader against data held in memory: data loading per epoch, its share
of the epoch, and how much faster an epoch is with the data held in memory (each side named
by the code it ran)."""

from __future__ import annotations

from mnistbench.core import schema
from mnistbench.report.formatting import num, ratio_parts, seconds
from mnistbench.report.selections import (
    RUN,
    Inputs,
    code_short,
    col,
    loader_name,
    median,
    per_epoch,
    phases,
)
from mnistbench.results import stats

#: The phases as the table's header names them.
PHASE_HEADS = {"data": "data loading", "forward": "forward", "backward": "backward",
               "optimizer": "optimizer", "eval": "evaluation", "other": "other (loop)"}


def _phase_rows(cells) -> list[dict]:
    rows = []
    for (env, device, loader, _), group in cells.groupby(list(RUN), sort=True):
        p = phases(group)
        if p is None:
            continue
        rows.append({"env": env, "device": device, "loader": loader_name(loader),
                     "code": code_short(group),
                     "phases": [seconds(p[k]) for k in (*schema.PHASES, "other")],
                     "epoch": seconds(p["epoch"])})
    return rows


def _loader_rows(cells) -> list[dict]:
    rows = []
    for (env, device), group in cells.groupby(["env", "device"], sort=True):
        by_loader = dict(iter(group.groupby("loader")))
        dl, res = by_loader.get("dataloader"), by_loader.get("resident")
        dl_data = median(per_epoch(dl, "data_s"))
        dl_epoch = median(col(dl, "epoch_s_median"))
        gain, gain_ci = ratio_parts(stats.ratio_ci(col(dl, "epoch_s_median"),
                                                   col(res, "epoch_s_median")))
        share = (num(100 * dl_data / dl_epoch, 3, "%") if dl_data is not None and dl_epoch
                 else "–")
        rows.append({"env": env, "device": device, "dl_data": seconds(dl_data),
                     "dl_code": "–" if dl is None else code_short(dl),
                     "res_code": "–" if res is None else code_short(res),
                     "dl_share": share, "res_data": seconds(median(per_epoch(res, "data_s"))),
                     "dl_epoch": seconds(dl_epoch),
                     "res_epoch": seconds(median(col(res, "epoch_s_median"))),
                     "gain": gain, "gain_ci": gain_ci})
    return rows


def context(inputs: Inputs) -> dict:
    return {"loader_rows": _loader_rows(inputs.cells), "phase_rows": _phase_rows(inputs.cells),
            "phase_heads": list(PHASE_HEADS.values())}
