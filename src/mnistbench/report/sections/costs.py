"""Section 9, cost: one training run at the blog's settings on each device (time, energy,
electricity, hardware write-off, waiting, total), each figure tagged measured, assumed or
mixed; the cost of the cost model's runs and of reaching its target accuracy; the
break-even of the GPU machine; the cost model's inputs."""

from __future__ import annotations

from mnistbench.report.formatting import count, money, num, readable_command, runs, seconds
from mnistbench.report.selections import Inputs, waiting_share
from mnistbench.results.cost import CostReport, Figure

#: The share of a run's cost above which the report says that waiting dominates it.
WAITING_DOMINATES = 0.5


def _figure(figure: Figure, kind: str, currency: str) -> dict:
    """A figure as text ("not reached" for a missing time or amount) with its basis."""
    if kind == "money":
        value = "not reached" if figure.value is None else money(figure.value, currency)
    elif kind == "seconds":
        value = "not reached" if figure.value is None else seconds(figure.value)
    else:
        value = num(figure.value, 3, "Wh")
    return {"value": value, "basis": figure.basis}


def _rows(result: CostReport, currency: str) -> list[dict]:
    rows = []
    for r in result.rows:
        def fig(figure, kind="money"):
            return _figure(figure, kind, currency)
        rows.append({
            "env": r.env, "device": r.device, "loader": r.loader, "n": str(r.n),
            "run": fig(r.run_s, "seconds"), "energy": fig(r.energy_wh, "energy"),
            "energy_note": r.energy_note, "electricity": fig(r.electricity),
            "hardware": fig(r.hardware), "waiting": fig(r.waiting),
            "total": fig(r.total), "total_n": fig(r.total_n),
            "target": fig(r.target_s, "seconds"),
            "target_epoch": count(r.target_epoch),
            "target_cost": fig(r.target_cost),
        })
    return rows


def _notes(result: CostReport) -> list[str]:
    notes = list(result.notes)
    waiting = [(r, share) for r in result.rows
               if (share := waiting_share(r)) is not None and share > WAITING_DOMINATES]
    multi = len({r.env for r in result.rows}) > 1
    if waiting:
        listed = "; ".join(f"{r.device} ({r.loader}{', ' + r.env if multi else ''}): "
                           f"{num(100 * share, 2, '%')}" for r, share in waiting)
        notes.append(f"Waiting dominates the cost of these runs (its share of the total): "
                     f"{listed}. The time you wait is worth more than the electricity and the "
                     "hardware it uses; set wait_value_per_hour to 0 to cost the machine "
                     "alone.")
    return notes


def context(inputs: Inputs) -> dict:
    result, model = inputs.cost_report, inputs.model
    currency = model.currency
    breakeven = [{"env": b.env, "loader": b.loader, "extra": money(b.extra_price, currency),
                  "save_el": money(b.saving_electricity, currency),
                  "runs_el": runs(b.runs_electricity),
                  "save_all": money(b.saving_with_waiting, currency),
                  "runs_all": runs(b.runs_with_waiting)} for b in result.break_even]
    energy = sorted({(r.device, r.energy_note) for r in result.rows})
    return {
        "currency": currency,
        "cost_runs": str(model.runs),
        "cost_target": num(model.target_accuracy, 4, "%"),
        # a path: relative, or the "built-in default"
        "cost_source": readable_command(model.source) if "/" in model.source
        else model.source,
        "cost_rows": _rows(result, currency),
        "breakeven_rows": breakeven,
        "cost_notes": _notes(result),
        "cost_inputs": [{"key": k, "value": v, "meaning": m} for k, v, m in model.as_rows()],
        "cost_energy_notes": [f"{device}: {note}" for device, note in energy],
    }

