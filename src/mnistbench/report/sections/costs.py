"""Section 10, energy and cost: one training run at the blog's settings on each device, led
by its energy and electricity (the blog's measure), then its time, the hardware's write-off,
the waiting (its value an assumption of the cost model) and the total; each column's basis
(measured, assumed or mixed) named once in its header where every row shares it; the cost of
the cost model's runs and of reaching its target accuracy; the break-even of the GPU machine
between runs of the same code; the cost model's inputs."""

from __future__ import annotations

from mnistbench.report.formatting import count, money, num, readable_command, runs, seconds
from mnistbench.report.selections import (
    Inputs,
    code_phrase,
    code_short,
    device_name,
    focus_env,
    loader_name,
    waiting_share,
)
from mnistbench.results.cost import MIXED, CostReport, Figure

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


#: The figures of a row whose basis the table names, per column.
FIGURES = ("run", "energy", "electricity", "hardware", "machine", "per_epoch", "waiting",
           "total", "total_n", "target", "target_cost")


def _machine(r) -> tuple[Figure, Figure]:
    """(the machine's cost of a run: electricity + hardware, without the waiting; the same
    per timed epoch)."""
    if r.electricity.value is None or r.hardware.value is None:
        return Figure(None, MIXED), Figure(None, MIXED)
    run = r.electricity.value + r.hardware.value
    epoch = run / r.epochs if r.epochs else None
    return Figure(run, MIXED), Figure(epoch, MIXED)


def _rows(result: CostReport, currency: str, codes: dict) -> list[dict]:
    rows = []
    for r in result.rows:
        def fig(figure, kind="money"):
            return _figure(figure, kind, currency)
        rows.append({
            "env": r.env, "device": r.device, "loader": loader_name(r.loader),
            "code": codes.get((r.env, r.device, r.loader), "–"), "n": str(r.n),
            "run": fig(r.run_s, "seconds"), "energy": fig(r.energy_wh, "energy"),
            "energy_note": r.energy_note, "electricity": fig(r.electricity),
            "hardware": fig(r.hardware), "waiting": fig(r.waiting),
            "machine": fig(_machine(r)[0]), "per_epoch": fig(_machine(r)[1]),
            "hardware_note": r.hardware_note,
            "total": fig(r.total), "total_n": fig(r.total_n),
            "target": fig(r.target_s, "seconds"),
            "target_epoch": count(r.target_epoch),
            "target_cost": fig(r.target_cost),
        })
    return rows


def _bases(rows: list[dict]) -> dict[str, str]:
    """Per figure, the basis every row shares ("" where they differ): the header names it
    once and the cells carry none; where rows differ, each cell keeps its own."""
    shared = {}
    for key in FIGURES:
        found = {r[key]["basis"] for r in rows}
        shared[key] = found.pop() if len(found) == 1 else ""
    for r in rows:
        for key in FIGURES:
            r[key]["shown"] = not shared[key]
    return shared


def _lead(inputs: Inputs, result: CostReport) -> str:
    """The energy and electricity of a run at the blog's settings, in a sentence."""
    env = focus_env(inputs.summary, inputs.cells)
    rows = [r for r in result.rows if r.env == env]
    if not rows:
        return "No ok convergence cell: no energy or cost of a run."
    currency, price = inputs.model.currency, inputs.model.price_per_kwh
    parts = []
    for r in rows:
        label = code_phrase(inputs.cells[(inputs.cells["env"] == env)
                                         & (inputs.cells["device"] == r.device)
                                         & (inputs.cells["loader"] == r.loader)])
        parts.append(f"{num(r.energy_wh.value, 3, 'Wh')}, {money(r.electricity.value, currency)}"
                     f" of electricity, on the {device_name(r.device)} ({label})")
    where = f" on {env}" if inputs.multi_env else ""
    return (f"Energy and electricity first, the blog's measure: a training run at the blog's "
            f"settings{where} takes " + "; ".join(parts)
            + f", at {price:g} {currency} per kWh.")


def _notes(result: CostReport) -> list[str]:
    notes = list(result.notes)
    waiting = [(r, share) for r in result.rows
               if (share := waiting_share(r)) is not None and share > WAITING_DOMINATES]
    multi = len({r.env for r in result.rows}) > 1
    if waiting:
        listed = "; ".join(f"{r.device} ({loader_name(r.loader)}{', ' + r.env if multi else ''}): "
                           f"{num(100 * share, 2, '%')}" for r, share in waiting)
        notes.append(f"Waiting dominates the cost of these runs (its share of the total): "
                     f"{listed}. The time you wait is worth more than the electricity and the "
                     "hardware it uses; set wait_value_per_hour to 0 to cost the machine "
                     "alone.")
    return notes


def context(inputs: Inputs) -> dict:
    result, model = inputs.cost_report, inputs.model
    currency = model.currency
    codes = {key: code_short(group) for key, group in
             inputs.cells.groupby(["env", "device", "loader"])}
    breakeven = [{"env": b.env, "loader": loader_name(b.loader),
                  "code": codes.get((b.env, "cpu", b.loader), "–"),
                  "extra": money(b.extra_price, currency),
                  "save_el": money(b.saving_electricity, currency),
                  "runs_el": runs(b.runs_electricity),
                  "save_all": money(b.saving_with_waiting, currency),
                  "runs_all": runs(b.runs_with_waiting)} for b in result.break_even
                 if codes.get((b.env, "cpu", b.loader)) == codes.get((b.env, "cuda", b.loader))]
    rows = _rows(result, currency, codes)
    energy = sorted({(r.device, r.energy_note) for r in result.rows})
    used = sorted({r.hardware_note for r in result.rows if r.hardware_note})
    kinds = sorted({note.split(":", 1)[0] for note in used} & set(model.kinds))
    return {
        "currency": currency,
        "cost_runs": str(model.runs),
        "cost_target": num(model.target_accuracy, 4, "%"),
        # a path: relative, or the "built-in default"
        "cost_source": readable_command(model.source) if "/" in model.source
        else model.source,
        "cost_rows": rows,
        "cost_bases": _bases(rows),
        "cost_lead": _lead(inputs, result),
        "cost_wait": f"{num(model.wait_value_per_hour, 3)} {currency} per hour",
        "breakeven_rows": breakeven,
        "cost_notes": _notes(result),
        "cost_inputs": [{"key": k, "value": v, "meaning": m} for k, v, m in model.as_rows()],
        "cost_energy_notes": [f"{device}: {note}" for device, note in energy],
        "cost_pricing": (f"Hardware: {'; '.join(used) or 'no run'} (pricing: {model.pricing}; "
                         + ("set pricing: cloud in the cost model for each kind's cloud price "
                            "per hour instead" if model.pricing == "purchase" else
                            "set pricing: purchase for the machines' prices written off "
                            "instead") + ")."),
        "cost_price_sources": [f"{name} ({model.kinds[name].date}): {model.kinds[name].source}"
                               for name in kinds],
    }

