"""Section 7, convergence: the test curves (a chart) and, per environment, device and
loader, the median (min – max) over repeats of the final and best test accuracy, the best
epoch and the final test loss."""

from __future__ import annotations

from mnistbench.report.formatting import count, num, spread
from mnistbench.report.selections import RUN, Inputs, col, ok


def _accuracy(value) -> str:
    return num(value, 4, "%")


def _loss(value) -> str:
    return num(value, 3)


def _rows(summary) -> list[dict]:
    rows = []
    for (env, device, loader), group in ok(summary, "convergence").groupby(list(RUN),
                                                                            sort=True):
        rows.append({
            "env": env, "device": device, "loader": loader, "n": str(len(group)),
            "final_acc": spread(col(group, "final_test_acc"), _accuracy),
            "best_acc": spread(col(group, "best_test_acc"), _accuracy),
            "best_epoch": spread(col(group, "best_epoch"), count),
            "final_loss": spread(col(group, "final_test_loss"), _loss),
        })
    return rows


def context(inputs: Inputs) -> dict:
    return {"convergence_rows": _rows(inputs.summary)}
