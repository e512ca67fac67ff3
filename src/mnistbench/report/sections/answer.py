"""The answer measured on one machine (the headline experiment): on every device of one
environment, the blog's code as written and this project's best as short timed cells with
repeats interleaved; their rates (training samples per second), the GPU over the CPU per code
and this project's best over the blog's code per device, each a ratio of medians with its
order-statistic interval (:data:`mnistbench.report.selections.ONE_MACHINE_CONFIDENCE`) and n;
and each short cell's rate against the steady epochs of the same code's convergence cell, so
that a warm-up too short for the steady rate shows. Other environments with headline cells
(the same hardware in a container or under SLURM, other machines) are listed apart, never
pooled. Absent (nothing rendered) without headline cells."""

from __future__ import annotations

from mnistbench.core import study
from mnistbench.report.formatting import count, interval, num, ratio_interval, seconds
from mnistbench.report.selections import (
    AGREEMENT_TOLERANCE,
    CODE,
    ONE_MACHINE_CONFIDENCE,
    RATE,
    STEADY_FROM_EPOCH,
    Inputs,
    OneMachine,
    busy_note,
    col,
    device_name,
    hardware,
    one_machine,
    one_machine_env,
    short_cells,
    steady_agreement,
)
from mnistbench.results import stats

TRAIN_SAMPLES = 60_000  # an epoch's training samples at the blog's settings


def _agreement(inputs: Inputs, env: str, device: str, code: str) -> str:
    found = steady_agreement(inputs.summary, inputs.epochs, env, device, code)
    if found is None:
        return "no convergence cell of this code here to compare with"
    fast, steady, diff, n = found
    verdict = ("agrees" if abs(diff) <= AGREEMENT_TOLERANCE else
               "does NOT agree")
    return (f"{num(fast, 3)} against {num(steady, 3)} samples/s in {n} steady epochs "
            f"(epoch {STEADY_FROM_EPOCH} on): {'+' if diff >= 0 else ''}{num(diff * 100, 2)} %, "
            f"{verdict} within {count(AGREEMENT_TOLERANCE * 100)} %")


def _rows(inputs: Inputs, env: str) -> list[dict]:
    cells = short_cells(inputs.summary, study.HEADLINE_EXPERIMENT)
    cells = cells[cells["env"] == env]
    rows = []
    for device in sorted(set(cells["device"]), key=lambda d: (d != "cpu", d)):
        for code in ("blog", "best"):
            part = cells[(cells["device"] == device) & (cells[CODE] == code)]
            if part.empty:
                continue
            est = stats.median_ci(col(part, RATE), ONE_MACHINE_CONFIDENCE)
            if est is None:  # short_cells keeps only cells with a rate: never
                continue
            steps = ", ".join(sorted({str(int(v)) for v in col(part, "max_steps")}))
            warm = ", ".join(sorted({str(int(v)) for v in col(part, "warmup_steps")}))
            rows.append({
                "device": device_name(device), "hardware": hardware(inputs.summary, env,
                                                                   device),
                "code": study.CODE_LABELS[code], "n": str(est.n),
                "rate": num(est.value, 3, "samples/s"), "rate_ci": interval(est),
                "epoch": seconds(TRAIN_SAMPLES / est.value) if est.value > 0 else "–",
                "steps": f"{warm} + {steps}", "busy": busy_note(part),
                "agreement": _agreement(inputs, env, device, code),
            })
    return rows


def ratio_lines(found: OneMachine) -> list[dict]:
    """The one-machine ratios as lines: what, the ratio, its interval with n."""
    lines = []
    for (device, code), est in sorted(found.gpu_over_cpu.items()):
        if est is not None:
            lines.append({"what": f"{device_name(device)} over CPU, {study.CODE_LABELS[code]}",
                          "value": num(est.value, 3, "×"), "ci": ratio_interval(est)})
    for device in sorted(found.best_over_blog, key=lambda d: (d != "cpu", d)):
        est = found.best_over_blog[device]
        if est is not None:
            lines.append({"what": f"this project's best over the blog's code on the "
                                  f"{device_name(device)}",
                          "value": num(est.value, 3, "×"), "ci": ratio_interval(est)})
    return lines


def context(inputs: Inputs) -> dict:
    chosen = one_machine_env(inputs.summary)
    if chosen is None:
        return {"answer_present": False, "answer_env": "", "answer_why": "",
                "answer_rows": [], "answer_ratios": [], "answer_others": [],
                "answer_level": ""}
    env, why = chosen
    found = one_machine(inputs.summary, env, why)
    others = []
    cells = short_cells(inputs.summary, study.HEADLINE_EXPERIMENT)
    for other in sorted(set(cells["env"]) - {env}):
        lines = ratio_lines(one_machine(inputs.summary, other))
        others.append({"env": other, "lines": lines})
    return {
        "answer_present": True,
        "answer_env": env,
        "answer_why": why,
        "answer_rows": _rows(inputs, env),
        "answer_ratios": ratio_lines(found),
        "answer_others": others,
        "answer_level": f"{count(ONE_MACHINE_CONFIDENCE * 100)} %",
    }
