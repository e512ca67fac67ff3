"""Runtimes: the same cells run in two environments of the same hardware (a
container or SLURM jobs beside the local runner): each other environment's median epoch
time over the reference's (:func:`mnistbench.report.selections.reference_env`), with its
95 % interval, and a sentence per environment with the median over the matched settings."""

from __future__ import annotations

from mnistbench.report.formatting import TableIntervals, count, num, plural, seconds
from mnistbench.report.selections import (
    SAME_CELL,
    TIP_COLUMN,
    Inputs,
    col,
    discount_busy,
    loader_name,
    median,
    ok,
    reference_env,
    with_tip,
)
from mnistbench.results import stats

#: A median ratio within these bounds costs nothing measurable.
NO_COST = (0.98, 1.02)


def _sentence(hardware, env, ref, ratios) -> str:
    middle = median(ratios)
    return (f"On {hardware}, {env} took {num(middle, 3, '×')} the epoch time of {ref} "
            f"(median over {plural(len(ratios), 'matched setting')}; "
            f"{num(min(ratios), 3, '×')} to {num(max(ratios), 3, '×')}): "
            + ("no measurable cost." if NO_COST[0] <= middle <= NO_COST[1] else
               f"{abs(middle - 1) * 100:.1f} % " + ("slower." if middle > 1 else "faster.")))


def runtimes(summary):
    """(rows, sentences, why there are none)."""
    if "hardware" not in summary.columns or "container" not in summary.columns:
        return [], [], "Not measured: the summary has no hardware or container column."
    cells, _ = discount_busy(ok(summary))
    keys = with_tip(cells, SAME_CELL)
    cells = cells.assign(**{k: cells[k].fillna("") for k in [*keys, "hardware"]
                            if k != "batch_size"})
    rows, sentences = [], []
    for hardware, part in cells.groupby("hardware", sort=True):
        envs = sorted(part["env"].unique())
        if len(envs) < 2:
            continue
        ref = reference_env(envs, part)
        reference = dict(iter(part[part["env"] == ref].groupby(keys)))
        for env in [e for e in envs if e != ref]:
            ratios = []
            for key, group in part[part["env"] == env].groupby(keys, sort=True):
                match = reference.get(key)
                times = col(group, "epoch_s_median")
                ref_times = [] if match is None else col(match, "epoch_s_median")
                est = stats.ratio_ci(times, ref_times)
                if est is None:
                    continue
                ratios.append(est.value)
                what = dict(zip(keys, key, strict=True))
                rows.append({
                    "env": env, "ref": ref, "experiment": what["experiment"],
                    "device": what["device"], "precision": what["precision"],
                    "loader": loader_name(what["loader"]), "batch": count(what["batch_size"]),
                    "tip": what.get(TIP_COLUMN) or "",
                    "ref_s": seconds(median(ref_times)), "env_s": seconds(median(times)),
                    "ratio": num(est.value, 3, "×"), "est": est,
                    "repeats": f"{len(group)} / {len(match)}",
                })
            if ratios:
                sentences.append(_sentence(hardware, env, ref, ratios))
    if not rows:
        return [], [], ("Not measured: no cells of the same settings ran in two environments "
                        "of the same hardware (e.g. runner: docker beside runner: local).")
    return rows, sentences, ""


def context(inputs: Inputs) -> dict:
    rows, sentences, absent = runtimes(inputs.summary)
    intervals = TableIntervals()
    cells = [(row, intervals.add(row["est"])) for row in rows]
    caption = intervals.caption()
    for row, cell in cells:
        row["ratio_ci"] = cell["text"]
    return {"runtime_rows": rows, "runtime_sentences": sentences, "runtimes_absent": absent,
            "runtimes_caption": caption}
