"""Section 7, convergence: the test curves (a chart) and, per environment, device, kind of
code and loader, the median (min – max) over repeats of the final and best test accuracy
with the seed-to-seed spread and the GPU's difference from the CPU running the same code,
the best epoch and the final test loss."""

from __future__ import annotations

from mnistbench.report import comparison
from mnistbench.report.formatting import count, num, points, points_interval, spread
from mnistbench.report.selections import (
    CODE,
    RUN,
    Inputs,
    code_short,
    col,
    loader_name,
    ok,
    value_range,
)
from mnistbench.results import stats


def _accuracy(value) -> str:
    return num(value, 4, "%")


def _loss(value) -> str:
    return num(value, 3)


def _against_cpu(summary, cells, env, device, loader, kind) -> str:
    """The difference of final test accuracy from the CPU running the same code: on this
    machine, else across machines, labelled (:mod:`mnistbench.report.comparison`)."""
    if device == "cpu":
        return "–"
    found = next((p for p in comparison.pairs(summary, cells, code=kind, loader=loader)
                  if p.gpu_env == env), None) if device == "cuda" else None
    cpu_env = found.cpu_env if found is not None else env
    same = (cells["loader"] == loader) & (cells[CODE] == kind)
    cpu = cells[same & (cells["env"] == cpu_env) & (cells["device"] == "cpu")]
    other = cells[same & (cells["env"] == env) & (cells["device"] == device)]
    diff = stats.diff_ci(col(other, "final_test_acc"), col(cpu, "final_test_acc"))
    if diff is None:
        return "no CPU cell of the same code in any environment"
    where = "" if cpu_env == env else f"; {comparison.ACROSS_MACHINES}, CPU of {cpu_env}"
    return f"{points(diff.value)} ({points_interval(diff)}{where})"


def _rows(summary) -> list[dict]:
    cells = ok(summary, "convergence")
    rows = []
    for (env, device, loader, kind), group in cells.groupby(list(RUN), sort=True):
        seed = value_range(col(group, "final_test_acc"))
        rows.append({
            "env": env, "device": device, "loader": loader_name(loader),
            "code": code_short(group), "n": str(len(group)),
            "final_acc": spread(col(group, "final_test_acc"), _accuracy),
            "seed": "–" if seed is None else points(seed, False),
            "vs_cpu": _against_cpu(summary, cells, env, device, loader, kind),
            "best_acc": spread(col(group, "best_test_acc"), _accuracy),
            "best_epoch": spread(col(group, "best_epoch"), count),
            "final_loss": spread(col(group, "final_test_loss"), _loss),
        })
    return rows


def context(inputs: Inputs) -> dict:
    return {"convergence_rows": _rows(inputs.summary)}
