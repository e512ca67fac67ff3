"""How training on the CPU scales with threads (the threads experiment): per environment and
code, the rate (training samples per second) at 1, 2, 4, ... threads up to every core, with
the threads asked for and got and the DataLoader's own, the CPU use, and the speed-up over
the fewest threads with its interval; and the blog's "one core near 100 %, no effective
parallel computing" decided from the blog's code's gain at every core (:func:`parallel`).
Absent (nothing rendered) without threads cells."""

from __future__ import annotations

from mnistbench.core import study
from mnistbench.report import blog
from mnistbench.report.formatting import count, num, ratio_interval
from mnistbench.report.selections import (
    Inputs,
    busy_mask,
    busy_note,
    hardware,
    threads_curve,
    threads_envs,
)


def _rows(curve: list[dict]) -> list[dict]:
    rows = []
    for point in curve:
        median, low, high, n = point["rate"]
        est = point["speedup"]
        rows.append({
            "threads": str(point["threads"]), "got": "/".join(point["got"]) or "–",
            "loader": "/".join(point["loader_threads"]) or "–",
            "rate": num(median, 3), "range": f"{num(low, 3)}–{num(high, 3)}" if n > 1 else "",
            "n": str(n),
            "cpu": num(point["cpu_pct"], 3, "%"),
            "speedup": "1× (the fewest threads)" if est is None else num(est.value, 3, "×"),
            "speedup_ci": "" if est is None else ratio_interval(est),
            "efficiency": "" if est is None else
            f"{num(est.value / point['threads'] * int(curve[0]['threads']) * 100, 2)} %",
            "busy": busy_note(point["part"]),
        })
    return rows


def parallel(inputs: Inputs) -> tuple[blog.Verdict, str, str] | None:
    """(verdict, numbers, env) of the blog's "no effective parallel computing" from the
    blog's code's rate at every core over one thread in the first environment with both;
    None without such cells."""
    for env in threads_envs(inputs.summary):
        curve = threads_curve(inputs.summary, env, "blog")
        if len(curve) < 2 or curve[0]["threads"] != 1:
            continue
        top = curve[-1]
        gain = top["speedup"]
        verdict = blog.verdict_parallel(gain)
        used = [*curve[0]["part"].index, *top["part"].index]
        busy = int(busy_mask(inputs.summary.loc[used]).sum())
        load = (f"; {busy} of {len(used)} of these runs on a busy machine: pessimistic"
                if busy else "")
        numbers = (f"the blog's code trained {num(gain.value, 3, '×')} as fast on "
                   f"{top['threads']} threads as on 1 ({ratio_interval(gain)}; "
                   f"{num(curve[0]['cpu_pct'], 3, '%')} and {num(top['cpu_pct'], 3, '%')} "
                   f"CPU use, 100 % = one core; {hardware(inputs.summary, env, 'cpu')}"
                   f"{', ' + env if inputs.multi_env else ''}{load}); the rule: more than "
                   f"{num(blog.PARALLEL_GAIN, 3, '×')} is effective parallel computing")
        return verdict, numbers, env
    return None


def context(inputs: Inputs) -> dict:
    tables = []
    for env in threads_envs(inputs.summary):
        for code in ("blog", "best"):
            curve = threads_curve(inputs.summary, env, code)
            if curve:
                tables.append({"env": env, "code": study.CODE_LABELS[code],
                               "hardware": hardware(inputs.summary, env, "cpu"),
                               "cores": count(curve[-1]["threads"]), "rows": _rows(curve)})
    found = parallel(inputs)
    return {
        "threads_present": bool(tables),
        "threads_tables": tables,
        "threads_claim": "" if found is None else f"{found[0]}: {found[1]}.",
    }
