"""Section 10, which of the blog's tips pay off: each tip of the tips experiment against the
baseline on the same device, its speed-up with the interval, its effect on accuracy against
the baseline's seed spread, and a verdict; n/a with the reason where a tip does not apply."""

from __future__ import annotations

import math

from mnistbench.core import study
from mnistbench.report import blog
from mnistbench.report.formatting import (
    TableIntervals,
    count,
    num,
    plural,
    points,
    ratio_parts,
    ratio_phrase,
)
from mnistbench.report.selections import (
    COMPARED_DEVICES,
    TIP_COLUMN,
    Inputs,
    busy_note,
    col,
    device_name,
    devices,
    discount_busy,
    distinct,
    median,
    tips_cells,
    value_range,
)
from mnistbench.results import stats

#: Verdict -> the CSS class of its mark.
VERDICT_CLASS = {blog.PAYS_OFF: "good", blog.SLOWER: "bad", blog.COSTS_ACCURACY: "bad",
                 blog.WITHIN_NOISE: "noise", blog.UNCLEAR: "noise"}


#: A tip's verdict where its environment has no cell of it on the device.
NOT_MEASURED = "not measured"


def _tip_cell(device, rule, base, group, spread) -> dict:
    """One tip on one device: speed-up over the baseline with its interval, accuracy effect,
    verdict; or why there is none."""
    empty = {"speed": "", "ci": "", "acc": "", "busy": "", "note": "", "span": True,
             "est": None, "bf16_path": ""}
    not_applicable = study.not_applicable_reason(rule, device)
    if not_applicable:
        measured = ""
        if group is not None and not group.empty:
            est = per_sample_speedup(base, group)
            if est is not None:
                measured = f" (measured anyway: {ratio_phrase(est)})"
        return {**empty, "verdict": "n/a", "cls": "na", "note": not_applicable + measured}
    if group is None or group.empty:
        return {**empty, "verdict": NOT_MEASURED, "cls": "na", "note": ""}
    ran = group[group["status"] == "ok"]
    if ran.empty:
        reason = group["reason"].dropna()
        return {**empty, "verdict": group["status"].iloc[0], "cls": "bad",
                "note": str(reason.iloc[0]) if not reason.empty else "(no reason recorded)"}
    if base is None or base.empty:
        return {**empty, "verdict": "no baseline", "cls": "na",
                "note": f"no ok baseline cell on the {device}"}
    quiet_base, _ = discount_busy(base)
    quiet, _ = discount_busy(ran)
    if rule.name == blog.BASELINE:
        acc = median(col(quiet, "final_test_acc"))
        return {**empty, "span": False, "speed": "1× (baseline)", "verdict": "baseline",
                "cls": "na",
                "acc": f"{num(acc, 4, '%')}" + ("" if spread is None else
                                                f" (seed spread {points(spread, False)})"),
                "busy": busy_note(ran)}
    est = per_sample_speedup(quiet_base, quiet)
    diff = stats.diff_ci(col(quiet, "final_test_acc"), col(quiet_base, "final_test_acc"))
    basis, unequal = accuracy_basis(quiet_base, quiet)
    verdict = blog.tip_verdict(est, None if diff is None or unequal else -diff.value, spread)
    acc_text = "–"
    if diff is not None:
        acc_text = points(diff.value)
        if spread is not None and not unequal:
            acc_text += (" (within the seed spread)" if abs(diff.value) <= spread
                         else f" (beyond the seed spread of {points(spread, False)})")
        acc_text += f", {basis}"
    speed, speed_ci = ratio_parts(est)
    return {**empty, "span": False, "speed": speed, "ci": speed_ci, "acc": acc_text,
            "verdict": verdict, "cls": VERDICT_CLASS.get(verdict, "na"),
            "busy": busy_note(ran), "est": est,
            "bf16_path": ", ".join(distinct(ran, "bf16_path"))}


def per_sample_speedup(base, tip):
    """A tip's speed-up over the baseline per sample: the tip's median samples/s over the
    baseline's (so a tip that changes the batch, and with it the work of a run, is compared
    at equal work); the baseline's epoch time over the tip's where a side has no throughput
    recorded (older summaries)."""
    est = stats.ratio_ci(col(tip, "samples_per_s"), col(base, "samples_per_s"))
    if est is None:
        est = stats.ratio_ci(col(base, "epoch_s_median"), col(tip, "epoch_s_median"))
    return est


def _work(cells) -> tuple[float | None, float | None]:
    """(median optimizer steps, median training samples) of a run of ``cells``."""
    steps = [s * e for s, e in zip(col(cells, "steps_per_epoch"), col(cells, "epochs"),
                                   strict=False)]
    batch = median(col(cells, "batch_size"))
    step = median(steps)
    return step, (None if step is None or batch is None else step * batch)


def accuracy_basis(base, tip) -> tuple[str, bool]:
    """(how a tip's accuracy is compared with the baseline's, whether the runs did unequal
    work): "at equal steps and samples", "at equal steps", "at equal samples", or "not
    comparable: 1 step of 16,384 samples against 40 steps of 5,120" (then the accuracy
    change is no verdict)."""
    (b_steps, b_samples), (t_steps, t_samples) = _work(base), _work(tip)
    if b_steps is None or b_samples is None or t_steps is None or t_samples is None:
        return "work of the runs not recorded", False
    same_steps, same_samples = b_steps == t_steps, b_samples == t_samples
    if same_steps and same_samples:
        return "at equal steps and samples", False
    if same_steps:
        return "at equal steps", False
    if same_samples:
        return "at equal samples", False
    return (f"not comparable: {plural(count(t_steps), 'step')} of {int(t_samples):,} samples "
            f"against {plural(count(b_steps), 'step')} of {int(b_samples):,}"), True


def tips_table(summary):
    """(devices, rows, why there are none): each tip's speed-up over the baseline per device,
    accuracy effect and verdict."""
    cells = tips_cells(summary)
    if cells.empty:
        why = ("Not measured in this study: no cells of the tips experiment"
               + ("" if TIP_COLUMN in summary.columns else
                  f" (the summary has no '{TIP_COLUMN}' column)") + ".")
        return [], [], why
    shown = [d for d in devices(cells) if d in set(cells["device"]) or d in COMPARED_DEVICES]
    rows = []
    for env in sorted(cells["env"].unique()):
        part = cells[cells["env"] == env]
        bases = {d: part[(part["device"] == d) & (part[TIP_COLUMN] == blog.BASELINE)
                         & (part["status"] == "ok")] for d in shown}
        spreads = {d: value_range(col(discount_busy(b)[0], "final_test_acc"))
                   for d, b in bases.items()}
        for name in blog.tip_order(part[TIP_COLUMN]):
            rule = blog.tip(name)
            per_device = [_tip_cell(device, rule, bases[device],
                                    part[(part["device"] == device) & (part[TIP_COLUMN] == name)],
                                    spreads[device])
                          for device in shown]
            for device, cell in zip(shown, per_device, strict=True):
                others = sorted(set(cells.loc[cells["device"] == device, "env"]) - {env})
                if cell["verdict"] == NOT_MEASURED and others:  # another machine's row has it
                    cell.update(verdict="another machine", note=(
                        f"this machine's {device_name(device)} ran no tips; "
                        f"{', '.join(others)} did (its rows)"))
            rows.append({"env": env, "tip": name, "change": rule.change or "–",
                         "devices": per_device})
    return shown, rows, ""


def runs_intro(summary) -> str:
    """What the tips experiment's runs are: per environment the steps and epochs of a run
    (and what capped them), the test samples, the repeats per tip; "" without tips cells."""
    cells = tips_cells(summary)
    done = cells[cells["status"] == "ok"]
    if done.empty:
        return ""
    parts = []
    for env, part in done.groupby("env", sort=True):
        shapes = []
        groups = sorted(part.groupby(["steps_per_epoch", "batch_size"]),
                        key=lambda item: -len(item[1]))
        for (steps, batch), group in groups:
            full = math.ceil(blog.BLOG_SETTINGS["train_samples"] / float(batch))
            capped = steps < full
            tips = ", ".join(blog.tip_order(group[TIP_COLUMN]))
            why = ""
            if capped:
                stops = [s for s in distinct(group, "max_batch_stop") if s]
                why = (", capped by max_steps" + (f"; the largest-batch search stopped at "
                                                 f"{', '.join(stops)}" if stops else ""))
            shapes.append(f"{plural(count(steps), 'step')} at batch {count(batch)} "
                          f"({int(steps * batch):,} of the {blog.BLOG_SETTINGS['train_samples']:,}"
                          f" training samples{why}) for {tips}")
        epochs = "/".join(distinct(part, "epochs"))
        tests = [f"{int(float(t)):,}" for t in distinct(part, "test_limit") if t not in ("0", "")]
        repeats = part.groupby(TIP_COLUMN).size()
        n = (str(repeats.min()) if repeats.min() == repeats.max()
             else f"{repeats.min()}–{repeats.max()}")
        parts.append(("" if summary["env"].nunique() == 1 else f"on {env}: ")
                     + f"{plural(epochs, 'epoch')} of " + "; ".join(shapes)
                     + (f"; tested on {', '.join(tests)} samples" if tests else "")
                     + f"; {plural(n, 'repeat')} per tip")
    return ("Its runs are short: " + "; ".join(parts) + ". Their speed-ups compare like with "
            "like; their accuracy is that of these short runs, not the 10-epoch accuracy.")


def context(inputs: Inputs) -> dict:
    tip_devices, tip_rows, absent = tips_table(inputs.summary)
    intervals = TableIntervals()
    shown = [(cell, intervals.add(cell["est"])) for row in tip_rows for cell in row["devices"]
             if cell.get("est") is not None and not cell["span"]]
    caption = intervals.caption()
    for cell, interval in shown:
        cell["ci"] = interval["text"]
    return {"tip_devices": tip_devices, "tip_rows": tip_rows, "tips_absent": absent,
            "tips_runs": runs_intro(inputs.summary), "tips_caption": caption}
