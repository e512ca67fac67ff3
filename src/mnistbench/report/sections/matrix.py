"""Section 12, the matrix: every cell by status (a chart), the cells that are not ok
grouped by status and reason, and each of them listed."""

from __future__ import annotations

from mnistbench.report.formatting import count, missing
from mnistbench.report.selections import SETTINGS, Inputs, failure_counts


def _sort_key(column):
    """Sort key of a mixed column: numbers numerically, text after them."""
    def key(value):
        if missing(value):
            return (2, 0.0, "")
        try:
            return (0, float(value), "")
        except (TypeError, ValueError):
            return (1, 0.0, str(value))
    return column.map(key)


def context(inputs: Inputs) -> dict:
    summary = inputs.summary
    bad = summary[summary["status"] != "ok"].sort_values([*SETTINGS, "repeat"], key=_sort_key)
    rows = [{"env": r.env, "experiment": r.experiment, "cell": r.cell, "device": r.device,
             "precision": r.precision, "loader": r.loader,
             "batch": count(r.batch_size), "repeat": count(r.repeat),
             "status": r.status, "reason": r.reason or "(no reason recorded)"}
            for r in bad.itertuples()]
    groups = [] if bad.empty else [{"status": s, "reason": r, "count": str(c)}
                                   for (s, r), c in failure_counts(bad).items()]
    return {"non_ok_rows": rows, "non_ok_groups": groups}
