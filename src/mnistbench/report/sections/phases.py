"""Section 5, where the time goes: the phases of an epoch (a chart), and the DataLoader
against resident tensors: data loading per epoch, its share of the epoch, and how much
faster resident data makes an epoch."""

from __future__ import annotations

from mnistbench.report.formatting import num, ratio_parts, seconds
from mnistbench.report.selections import Inputs, col, median, per_epoch
from mnistbench.results import stats


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
                     "dl_share": share, "res_data": seconds(median(per_epoch(res, "data_s"))),
                     "dl_epoch": seconds(dl_epoch),
                     "res_epoch": seconds(median(col(res, "epoch_s_median"))),
                     "gain": gain, "gain_ci": gain_ci})
    return rows


def context(inputs: Inputs) -> dict:
    return {"loader_rows": _loader_rows(inputs.cells)}
