"""The published report: one self-contained HTML file (CSS inline, charts as PNG data URIs at
twice the CSS resolution) that opens offline.

One autoescaped Jinja2 environment, one template (``templates/report.html.j2``, which
includes ``templates/report.css`` into its ``<style>``), one render call with a flat,
explicit context of preformatted strings: every value that comes from the results (host
names, error messages, env names) is escaped by Jinja, nothing is marked safe. Every number
is computed here from the aggregated tables (and :mod:`mnistbench.report.blog`'s reference figures);
the template holds prose only.

Columns read beyond :mod:`mnistbench.core.schema` when present:
``tip`` (the tips experiment's lever,
text), ``busy`` (true when other processes used more than 25 % of the machine while the cell
ran) and ``system_load_mean`` (machine-wide CPU busy %, 100 = all cores). Summaries without
them (older ones) render as before, with no cell flagged.
"""

from __future__ import annotations

import base64
import math
import re
import shlex
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from mnistbench import __version__
from mnistbench.core import atomic, schema, study
from mnistbench.report import blog
from mnistbench.results import aggregate, cost, stats


class ReportError(Exception):
    """The report cannot be rendered; the message names the input and the fix."""


#: Experiment whose cells measure the blog's tips, and its lever column.
TIPS_EXPERIMENT = "tips"
TIP_COLUMN = "tip"
#: Optional per-cell system-load columns (absent in older summaries).
BUSY_COLUMN = "busy"
LOAD_COLUMN = "system_load_mean"
#: The share of the machine (%) others must use beyond a cell's own processes for the trainer
#: to mark it busy: the report only reads the flag, this is for its prose.
BUSY_SHARE_PCT = 25
#: Devices the headline always shows, with their reason when absent.
DEVICES = ("cpu", "cuda")
DEVICE_NAMES = {"cpu": "CPU", "cuda": "GPU"}


# ---------------------------------------------------------------------------- formatting

def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def num(value, digits: int = 3, unit: str = "") -> str:
    """``value`` with ``digits`` significant digits (thousands grouped) and its unit;
    an en dash when missing."""
    if _missing(value):
        return "–"
    value = float(value)
    if value == 0:
        text = "0"
    elif abs(value) >= 10 ** digits:
        text = f"{value:,.0f}"
    else:
        decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
        text = f"{value:,.{decimals}f}"
    return f"{text} {unit}".strip() if unit else text


def count(value) -> str:
    """A count or index (an epoch, a batch size, a repeat, a median of epochs): 6, 6.5, 128;
    an en dash when missing."""
    return "–" if _missing(value) else f"{float(value):g}"


def plural(n, word: str, words: str | None = None) -> str:
    """``n`` and ``word`` in the right number: 1 epoch, 2 epochs, 1 or 2 epochs (a text n)."""
    if isinstance(n, str):
        return f"{n} {word if n == '1' else (words or word + 's')}"
    return f"{count(n)} {word if n == 1 else (words or word + 's')}"


def seconds(value) -> str:
    """A duration: seconds below two minutes, else minutes, else hours."""
    if _missing(value):
        return "–"
    value = float(value)
    if value < 120:
        return num(value, 3, "s")
    if value < 7200:
        return f"{num(value, 3, 's')} ({value / 60:.1f} min)"
    return f"{num(value, 3, 's')} ({value / 3600:.1f} h)"


def money(value, currency: str) -> str:
    """An amount with 3 significant digits (more for large amounts) and its currency."""
    if _missing(value):
        return "–"
    value = float(value)
    return f"{num(value, 3)} {currency}" if abs(value) < 1000 else f"{value:,.0f} {currency}"


def as_printed(value, unit: str = "") -> str:
    """A figure of the blog as it prints it (5.2 s, not 5.20 s); "not in this project's
    reference data" when the project does not hold it."""
    if value is None:
        return "not in this project's reference data"
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return f"{text} {unit}".strip()


def interval(est: stats.Estimate | None, unit: str = "") -> str:
    """The interval part of an estimate: "95 % CI a–b unit", "a–b unit (min–max, 75 %
    coverage)" when too few repeats reach 95 %, or why there is none."""
    if est is None:
        return "no data"
    if not est.has_interval:
        return "no interval: 1 repeat" + (" on one side" if "one side" in est.method else "")
    span = f"{num(est.low, 3)}–{num(est.high, 3)}" + (f" {unit}" if unit else "")
    if est.coverage is not None and est.coverage < stats.CONFIDENCE - 1e-9:
        return f"{span} (min–max, {est.coverage * 100:.3g} % coverage)"
    return f"95 % CI {span}"


def ratio_interval(est: stats.Estimate | None) -> str:
    """A ratio's interval, and "within noise" when it contains 1 (or, without an interval,
    a ratio too close to 1 to tell from one repeat)."""
    text = interval(est, "×")
    if est is None:
        return text
    noise = stats.within_noise(est, 1.0)
    if noise:
        return f"{text}: within noise"
    if noise is None and abs(est.value - 1.0) < 0.1:
        return f"{text}: too close to 1 to tell"
    return text


def ratio_phrase(est: stats.Estimate | None) -> str:
    """"9.8× (95 % CI 9.1–10.4×)", with "within noise" where the interval holds 1."""
    if est is None:
        return "–"
    return f"{num(est.value, 3, '×')} ({ratio_interval(est)})"


def points(value, sign: bool = True) -> str:
    """An accuracy difference in percentage points, two decimals, with a true minus sign:
    "+0.04 points", "−0.10 points"."""
    if _missing(value):
        return "–"
    text = f"{abs(float(value)):.2f}"
    if sign:
        text = ("−" if value < 0 and text != "0.00" else "+") + text
    return f"{text} points"


def points_interval(est: stats.Estimate | None) -> str:
    """The interval of an accuracy difference: "95 % CI −0.13 to +0.06 points", "min–max"
    below 95 % coverage, or why there is none."""
    if est is None:
        return "no data"
    if not est.has_interval:
        return "no interval: 1 repeat on a side"
    span = f"{points(est.low)[:-7]} to {points(est.high)}"
    if est.coverage is not None and est.coverage < stats.CONFIDENCE - 1e-9:
        return f"{span} ({est.coverage * 100:.3g} % coverage)"
    return f"95 % CI {span}"


def _plain(value) -> str:
    """A parameter or environment value as text: whole floats without decimals (128, not
    128.000), other floats with up to 6 significant digits."""
    if isinstance(value, float) and math.isfinite(value):
        return str(int(value)) if value.is_integer() else f"{value:.6g}"
    return str(value)


def _spread(values, fmt=lambda v: num(v, 4)) -> str:
    s = stats.spread(values)
    if s is None:
        return "–"
    median, low, high, n = s
    if n == 1:
        return f"{fmt(median)} (1 repeat)"
    return f"{fmt(median)} ({fmt(low)} – {fmt(high)})"


def _col(frame, name) -> list[float]:
    if frame is None or name not in frame.columns:
        return []
    return [float(v) for v in frame[name].tolist() if not _missing(v)]


def _per_epoch(frame, column) -> list[float]:
    out = []
    if frame is None or frame.empty:
        return out
    for value, epochs in zip(frame[column].tolist(), frame["epochs"].tolist(), strict=True):
        if not _missing(value) and not _missing(epochs) and epochs > 0:
            out.append(float(value) / float(epochs))
    return out


def _median(values: Iterable[float]):
    s = stats.spread(values)
    return None if s is None else s[0]


def _range(values) -> float | None:
    """max - min of ``values`` (the spread over repeats), None below 2 values."""
    s = stats.spread(values)
    return None if s is None or s[3] < 2 else s[2] - s[1]


def _values(frame, column) -> list[str]:
    """The distinct non-empty values of ``column`` in ``frame`` as text (none when absent)."""
    if column not in frame.columns:
        return []
    return sorted({_plain(v) for v in frame[column].tolist() if not _missing(v) and str(v)})


def _raw_words(command: str) -> list[str]:
    """``command`` split at unquoted white space, each word as written (quotes kept), so
    shell operators (``&&``, ``|``, ``>``) stay apart from quoted text; ValueError when a
    quote is not closed."""
    words, word, quote, i = [], [], None, 0
    while i < len(command):
        ch = command[i]
        if quote is not None:
            word.append(ch)
            if ch == quote:
                quote = None
            elif ch == "\\" and quote == '"' and i + 1 < len(command):
                word.append(command[i + 1])
                i += 1
        elif ch in "'\"":
            quote = ch
            word.append(ch)
        elif ch == "\\" and i + 1 < len(command):
            word += [ch, command[i + 1]]
            i += 1
        elif ch.isspace():
            if word:
                words.append("".join(word))
            word = []
        else:
            word.append(ch)
        i += 1
    if quote is not None:
        raise ValueError("unclosed quote")
    if word:
        words.append("".join(word))
    return words


def readable_command(command: str, root: Path | None = None) -> str:
    """``command`` with absolute paths under ``root`` (the current folder) made relative, and
    each quoted argument quoted only as much as a shell needs, with double quotes where they
    read better ("mirrors=['../shared/mnist']" rather than shlex's '"'"' escapes). Unquoted
    words (shell operators among them) keep their form; text that does not parse is returned
    as it is."""
    root = Path.cwd() if root is None else Path(root)
    prefix = str(root).rstrip("/") + "/"
    try:
        raw = _raw_words(command)
    except ValueError:
        return command
    out = []
    for word in raw:
        if not re.search(r"[\'\"\\]", word):
            out.append("." if word == str(root) else word.replace(prefix, ""))
            continue
        try:
            (text,) = shlex.split(word)
        except ValueError:
            out.append(word)
            continue
        text = "." if text == str(root) else text.replace(prefix, "")
        if text and re.fullmatch(r"[\w@%+=:,./-]+", text):
            out.append(text)
        elif not re.search(r'["$`\\!]', text):
            out.append(f'"{text}"')
        else:
            out.append(shlex.quote(text))
    return " ".join(out)


# ---------------------------------------------------------------------------- busy cells

def _is_busy(value) -> bool:
    """Whether a ``busy`` value says the machine was busy (bool, "True"/"False" text, 1/0)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    if _missing(value):
        return False
    try:
        return bool(float(value))
    except (TypeError, ValueError):
        return False


def busy_mask(frame):
    """A boolean Series: which rows of ``frame`` ran on a busy machine (all False when the
    summary has no ``busy`` column)."""
    import pandas as pd

    if BUSY_COLUMN not in frame.columns:
        return pd.Series(False, index=frame.index, dtype=bool)
    return frame[BUSY_COLUMN].map(_is_busy).astype(bool)


_GROUP = ["env", "experiment", "device", "precision", "loader", "batch_size"]


def discount_busy(summary):
    """(summary without the busy ok cells whose group (env, experiment, device, precision,
    loader, batch size) has a quiet ok cell too, how many were left out): what the findings
    use. A group whose every ok cell was busy keeps them (and is flagged)."""
    busy = busy_mask(summary)
    if not busy.any():
        return summary, 0
    ok = summary["status"] == "ok"
    quiet = (ok & ~busy).groupby([summary[c] for c in _GROUP], dropna=False).transform("any")
    drop = busy & ok & quiet
    return summary[~drop], int(drop.sum())


def _busy_note(group) -> str:
    """"2 of 3 busy (machine 81–95 % busy)" for the busy rows of ``group``; "" when none."""
    busy = busy_mask(group)
    n = int(busy.sum())
    if n == 0:
        return ""
    load = _col(group[busy], LOAD_COLUMN)
    span = ""
    if load:
        low, high = min(load), max(load)
        span = (f" (machine {num(low, 2)} % busy)" if round(low) == round(high)
                else f" (machine {num(low, 2)}–{num(high, 2)} % busy)")
    return f"{n} of {len(group)} busy{span}"


# ---------------------------------------------------------------------------- hardware

def _hardware_line(summary, env: str) -> str:
    """One line of an environment's hardware: CPU model with cores and threads, GPU and
    driver (or "no GPU")."""
    cells = summary[summary["env"] == env]
    cpu = ", ".join(_values(cells, "cpu_model")) or "CPU model not recorded"
    cores, threads = _values(cells, "cpu_cores_physical"), _values(cells, "cpu_cores_logical")
    detail = []
    if cores:
        detail.append(plural("/".join(cores), "core"))
    if threads:
        detail.append(plural("/".join(threads), "thread"))
    line = f"CPU {cpu}" + (f" ({', '.join(detail)})" if detail else "")
    gpus = _values(cells, "gpu_name")
    if gpus:
        drivers = _values(cells, "gpu_driver")
        line += f"; GPU {', '.join(gpus)}" + (f", driver {', '.join(drivers)}" if drivers
                                             else "")
    else:
        line += "; no GPU"
    return line


def _hardware(summary, env: str, device: str) -> str:
    """The hardware of ``device`` in ``env``: the aggregate's ``hardware`` label of its cells
    where there is one (e.g. "AMD EPYC 7B13 · AVX2"), else the CPU model or GPU name."""
    cells = summary[summary["env"] == env]
    names = _values(cells[cells["device"] == device], "hardware")
    if not names:
        names = _values(cells, "cpu_model" if device == "cpu" else "gpu_name")
    return ", ".join(names) if names else "–"


def _absent_reason(summary, env: str, device: str) -> str:
    """Why ``env`` has no ok ``device`` cell at the blog's settings: the commonest status and
    reason of its cells, or that the study has none."""
    cells = summary[(summary["env"] == env) & (summary["device"] == device)]
    if cells.empty:
        if device == "cuda":
            return ("not in this study: no cuda cells (no GPU was found when the study was "
                    "planned, or the config's devices leave it out)")
        return f"not in this study: no {device} cells"
    bad = cells[cells["status"] != "ok"]
    if bad.empty:
        return "no ok cell at the blog's settings (batch 128, fp32)"
    counted = bad.assign(reason=bad["reason"].fillna("(no reason recorded)")).groupby(
        ["status", "reason"]).size().sort_values(ascending=False)
    (status, reason), n = next(iter(counted.items()))
    return f"{status} ({plural(n, 'cell')}): {reason}"


def _devices(summary) -> list[str]:
    """cpu and cuda always, then any other device of the study."""
    return [*DEVICES, *sorted(set(summary["device"]) - set(DEVICES))]


def _envs_with_gpu(cells) -> list[str]:
    return sorted(set(cells.loc[cells["device"] == "cuda", "env"]))


# ---------------------------------------------------------------------------- sections

def _speedup(cells, env, loader, device="cuda", column="epoch_s_median"):
    """The CPU's median epoch time over ``device``'s, in one env with one loader."""
    cpu = cells[(cells["env"] == env) & (cells["device"] == "cpu") & (cells["loader"] == loader)]
    gpu = cells[(cells["env"] == env) & (cells["device"] == device)
                & (cells["loader"] == loader)]
    return stats.ratio_ci(_col(cpu, column), _col(gpu, column))


def _headline(summary, cells, source):
    rows, notes = [], []
    for env in sorted(summary["env"].unique()):
        for device in _devices(summary):
            group = cells[(cells["env"] == env) & (cells["device"] == device)]
            if group.empty:
                if device in DEVICES:
                    rows.append({"env": env, "device": device,
                                 "hardware": _hardware(summary, env, device), "loader": "–",
                                 "n": "0", "absent": _absent_reason(summary, env, device),
                                 "busy": ""})
                continue
            for loader, part in group.groupby("loader", sort=True):
                epoch = stats.median_ci(_col(part, "epoch_s_median"))
                total = stats.median_ci(_col(part, "total_s"))
                speed, speed_ci = "1× (baseline)", ""
                if device != "cpu":
                    est = _speedup(cells, env, loader, device)
                    if est is None:
                        speed, speed_ci = "–", f"no ok CPU cell with the {loader} loader"
                    else:
                        speed, speed_ci = num(est.value, 3, "×"), ratio_interval(est)
                rows.append({
                    "env": env, "device": device, "hardware": _hardware(summary, env, device),
                    "loader": loader, "n": str(epoch.n if epoch else 0), "absent": "",
                    "epoch": seconds(epoch.value if epoch else None),
                    "epoch_ci": interval(epoch, "s"),
                    "total": seconds(total.value if total else None),
                    "total_ci": interval(total, "s"),
                    "speedup": speed, "speedup_ci": speed_ci, "busy": _busy_note(part),
                })
    if cells.empty:
        notes.append("No ok cell ran at the blog's settings: no headline. The matrix below "
                     "says what failed.")
    else:
        sizes = cells.groupby(["env", "device", "loader"]).size()
        if (sizes == 1).any():
            notes.append("Rows with one repeat have no confidence interval: a single run "
                         "says nothing about run-to-run spread. Run 2 or more repeats for one "
                         "(6 or more for a 95 % interval of a median).")
        if ((sizes > 1) & (sizes < 6)).any():
            notes.append("With fewer than 6 repeats no interval of a median reaches 95 %: the "
                         "interval shown is min–max with its actual coverage (3 repeats: 75 %). "
                         "The speed-up's bootstrap interval is nominally 95 % but optimistic "
                         "with so few repeats.")
        if busy_mask(cells).any():
            notes.append("Rows marked busy include repeats that ran while other processes used "
                         f"more than {BUSY_SHARE_PCT} % of the machine: their times are "
                         "pessimistic. The findings leave them out where a quiet repeat "
                         "exists.")
    settings = {}
    for key in ("batch_size", "precision", "epochs"):
        values = sorted({_plain(v) for v in cells[key].tolist() if not _missing(v)})
        settings[key] = ", ".join(values) or "–"
    text = "; ".join(f"{k.replace('_', ' ')} {v}" for k, v in settings.items())
    return rows, notes, source, text, plural(settings["epochs"], "epoch")


def _time_table(cells):
    rows = []
    for (env, device, loader), group in cells.groupby(["env", "device", "loader"], sort=True):
        speed, speed_ci = "1× (baseline)", ""
        if device != "cpu":
            est = _speedup(cells, env, loader, device)
            speed = "–" if est is None else num(est.value, 3, "×")
            speed_ci = "" if est is None else ratio_interval(est)
        rows.append({
            "env": env, "device": device, "loader": loader, "n": str(len(group)),
            "epoch": seconds(_median(_col(group, "epoch_s_median"))),
            "total": seconds(_median(_col(group, "total_s"))),
            "data": seconds(_median(_col(group, "data_s"))),
            "backward": seconds(_median(_col(group, "backward_s"))),
            "speedup": speed, "speedup_ci": speed_ci, "busy": _busy_note(group),
        })
    return rows


def _loader_contrast(cells):
    rows = []
    for (env, device), group in cells.groupby(["env", "device"], sort=True):
        by_loader = {loader: g for loader, g in group.groupby("loader")}
        dl, res = by_loader.get("dataloader"), by_loader.get("resident")
        dl_data = _median(_per_epoch(dl, "data_s"))
        res_data = _median(_per_epoch(res, "data_s"))
        dl_epoch = _median(_col(dl, "epoch_s_median"))
        res_epoch = _median(_col(res, "epoch_s_median"))
        est = stats.ratio_ci(_col(dl, "epoch_s_median"), _col(res, "epoch_s_median"))
        share = (num(100 * dl_data / dl_epoch, 3, "%") if dl_data is not None and dl_epoch
                 else "–")
        rows.append({"env": env, "device": device, "dl_data": seconds(dl_data),
                     "dl_share": share, "res_data": seconds(res_data),
                     "dl_epoch": seconds(dl_epoch), "res_epoch": seconds(res_epoch),
                     "gain": "–" if est is None else num(est.value, 3, "×"),
                     "gain_ci": "" if est is None else ratio_interval(est)})
    return rows


def _sweep_medians(summary):
    cells = summary[(summary["experiment"] == "sweep") & (summary["status"] == "ok")]
    cells = cells.dropna(subset=["samples_per_s"])
    if cells.empty:
        return cells
    return cells.groupby(["env", "device", "precision", "loader", "batch_size"])[
        "samples_per_s"].median().reset_index()


def _best_throughput(summary):
    med = _sweep_medians(summary)
    rows = []
    if med.empty:
        return rows
    for (env, device), group in med.groupby(["env", "device"], sort=True):
        best = group.loc[group["samples_per_s"].idxmax()]
        at128 = group[(group["batch_size"] == 128) & (group["precision"] == "fp32")]
        rows.append({"env": env, "device": device,
                     "best": num(best["samples_per_s"], 3, "samples/s"),
                     "where": f"batch {count(best['batch_size'])}, {best['precision']}, "
                              f"{best['loader']} loader",
                     "at128": ", ".join(f"{num(r.samples_per_s, 3)} ({r.loader})"
                                        for r in at128.itertuples()) or "–"})
    return rows


def _convergence_rows(summary):
    cells = summary[(summary["experiment"] == "convergence") & (summary["status"] == "ok")]
    rows = []
    for (env, device, loader), group in cells.groupby(["env", "device", "loader"], sort=True):
        rows.append({
            "env": env, "device": device, "loader": loader, "n": str(len(group)),
            "final_acc": _spread(_col(group, "final_test_acc"), lambda v: num(v, 4, "%")),
            "best_acc": _spread(_col(group, "best_test_acc"), lambda v: num(v, 4, "%")),
            "best_epoch": _spread(_col(group, "best_epoch"), count),
            "final_loss": _spread(_col(group, "final_test_loss"), lambda v: num(v, 3)),
        })
    return rows


def _cpu_power(cells) -> list[float]:
    """Mean CPU package power of each cell, W: RAPL energy over the timed epochs / their
    duration."""
    out = []
    for energy, timed in zip(cells["cpu_energy_j"].tolist(), cells["timed_s"].tolist(),
                             strict=True):
        if not _missing(energy) and not _missing(timed) and timed > 0:
            out.append(float(energy) / float(timed))
    return out


def _resource_rows(cells):
    rows = []
    for (env, device, loader), group in cells.groupby(["env", "device", "loader"], sort=True):
        def med(column, unit, digits=3, group=group):
            return num(_median(_col(group, column)), digits, unit)
        rows.append({
            "env": env, "device": device, "loader": loader, "n": str(len(group)),
            "cpu_mean": med("cpu_pct_mean", "%"), "cpu_peak": med("cpu_pct_peak", "%"),
            "rss": med("peak_rss_mb", "MiB"), "gpu_mean": med("gpu_util_mean", "%"),
            "gpu_peak": med("gpu_util_peak", "%"), "gpu_mem": med("peak_cuda_mem_mb", "MiB"),
            "power": med("gpu_power_mean_w", "W"),
            "cpu_power": num(_median(_cpu_power(group)), 3, "W"),
            "busy": _busy_note(group),
        })
    return rows


def _runs(value: float) -> str:
    if math.isinf(value):
        return "never (the GPU run is not cheaper)"
    if value == 0:
        return "0 (the GPU machine costs no more)"
    return f"{value:,.0f} runs"


def _waiting_share(row: cost.CostRow) -> float | None:
    if row.total.value and row.waiting.value is not None and row.total.value > 0:
        return row.waiting.value / row.total.value
    return None


def _cost_context(result: cost.CostReport, model: cost.CostModel):
    cur = model.currency

    def fig(figure: cost.Figure, kind: str) -> dict:
        if kind == "money":
            value = money(figure.value, cur)
        elif kind == "seconds":
            value = seconds(figure.value) if figure.value is not None else "not reached"
        else:
            value = num(figure.value, 3, "Wh")
        if kind == "money" and figure.value is None:
            value = "not reached"
        return {"value": value, "basis": figure.basis}

    rows = []
    for r in result.rows:
        rows.append({
            "env": r.env, "device": r.device, "loader": r.loader, "n": str(r.n),
            "run": fig(r.run_s, "seconds"), "energy": fig(r.energy_wh, "energy"),
            "energy_note": r.energy_note, "electricity": fig(r.electricity, "money"),
            "hardware": fig(r.hardware, "money"), "waiting": fig(r.waiting, "money"),
            "total": fig(r.total, "money"), "total_n": fig(r.total_n, "money"),
            "target": fig(r.target_s, "seconds"),
            "target_epoch": count(r.target_epoch),
            "target_cost": fig(r.target_cost, "money"),
        })
    breakeven = [{"env": b.env, "loader": b.loader, "extra": money(b.extra_price, cur),
                  "save_el": money(b.saving_electricity, cur),
                  "runs_el": _runs(b.runs_electricity),
                  "save_all": money(b.saving_with_waiting, cur),
                  "runs_all": _runs(b.runs_with_waiting)} for b in result.break_even]
    notes = list(result.notes)
    waiting = [(r, share) for r in result.rows
               if (share := _waiting_share(r)) is not None and share > 0.5]
    multi = len({r.env for r in result.rows}) > 1
    if waiting:
        listed = "; ".join(f"{r.device} ({r.loader}{', ' + r.env if multi else ''}): "
                           f"{num(100 * share, 2, '%')}" for r, share in waiting)
        notes.append(f"Waiting dominates the cost of these runs (its share of the total): "
                     f"{listed}. The time you wait is worth more than the electricity and the "
                     "hardware it uses; set wait_value_per_hour to 0 to cost the machine "
                     "alone.")
    inputs = [{"key": k, "value": v, "meaning": m} for k, v, m in model.as_rows()]
    energy = sorted({(r.device, r.energy_note) for r in result.rows})
    energy_notes = [f"{device}: {note}" for device, note in energy]
    return rows, breakeven, notes, inputs, energy_notes


def _sort_key(column):
    """Sort key of a mixed column: numbers numerically, text after them."""
    def key(value):
        if _missing(value):
            return (2, 0.0, "")
        try:
            return (0, float(value), "")
        except (TypeError, ValueError):
            return (1, 0.0, str(value))
    return column.map(key)


def _non_ok(summary):
    bad = summary[summary["status"] != "ok"]
    order = ["env", "experiment", "device", "precision", "loader", "batch_size", "repeat"]
    bad = bad.sort_values(order, key=_sort_key)
    rows = [{"env": r.env, "experiment": r.experiment, "cell": r.cell, "device": r.device,
             "precision": r.precision, "loader": r.loader,
             "batch": count(r.batch_size), "repeat": count(r.repeat),
             "status": r.status, "reason": r.reason or "(no reason recorded)"}
            for r in bad.itertuples()]
    groups = []
    if not bad.empty:
        counted = bad.assign(reason=bad["reason"].fillna("(no reason recorded)")).groupby(
            ["status", "reason"]).size().sort_values(ascending=False)
        groups = [{"status": s, "reason": r, "count": str(c)} for (s, r), c in counted.items()]
    return rows, groups


def _env_table(summary, envs):
    rows = []
    for field, (unit, description) in schema.ENV_FIELDS.items():
        values = []
        for env in envs:
            values.append(", ".join(_values(summary[summary["env"] == env], field)) or "–")
        if all(v == "–" for v in values) and field.startswith("slurm"):
            continue
        rows.append({"field": field, "unit": unit, "description": description,
                     "per_env": values})
    return rows


def _settings(summary):
    rows = []
    skip = {*schema.ID_COLUMNS}
    params = {**schema.PARAM_FIELDS}
    if TIP_COLUMN in summary.columns and TIP_COLUMN not in params:
        params[TIP_COLUMN] = ("", "the tips experiment's lever")
    for experiment, group in summary.groupby("experiment", sort=True):
        shown = []
        for key, (unit, _) in params.items():
            if key in skip or key not in group.columns:
                continue
            values = sorted({v for v in group[key].tolist() if not _missing(v)},
                            key=lambda v: (isinstance(v, str), v))
            shown.append({"key": key, "unit": unit,
                          "shown": ", ".join(_plain(v) for v in values) or "–"})
        rows.append({"experiment": experiment, "cells": str(len(group)), "params": shown})
    return rows


# ---------------------------------------------------------------------------- phases

_PHASE_NAMES = {"data": "data loading", "forward": "the forward pass",
                "backward": "the backward pass", "optimizer": "the optimizer step",
                "eval": "the test-set evaluation", "other": "the loop's own overhead"}


def _phases(group) -> dict[str, float] | None:
    """Median seconds per epoch of each phase (and "other": the rest of the epoch) over the
    cells of ``group``; None without complete phase times."""
    cols = [f"{p}_s" for p in schema.PHASES]
    group = group.dropna(subset=[*cols, "epochs", "epoch_s_median"])
    if group.empty:
        return None
    out = {p: _median(_per_epoch(group, f"{p}_s")) for p in schema.PHASES}
    epoch = _median(_col(group, "epoch_s_median"))
    out["other"] = max(0.0, epoch - sum(out.values()))
    out["epoch"] = epoch
    return out


# ---------------------------------------------------------------------------- findings

def _speed_sentence(cells, env_prefix, env) -> str | None:
    parts = []
    for loader in sorted(set(cells.loc[cells["env"] == env, "loader"]),
                         key=lambda x: x != blog.BLOG_LOADER):
        est = _speedup(cells, env, loader)
        if est is not None:
            parts.append(f"{num(est.value, 3, '×')} with the {loader} loader "
                         f"({ratio_interval(est)})")
    if not parts:
        return None
    return f"{env_prefix}the GPU trains an epoch faster than the CPU by " + " and ".join(parts)


def _phase_sentence(cells, env) -> str | None:
    loaders = sorted(set(cells.loc[(cells["env"] == env) & (cells["device"] == "cuda"),
                                   "loader"]), key=lambda x: x != blog.BLOG_LOADER)
    for loader in loaders:
        sel = (cells["env"] == env) & (cells["loader"] == loader)
        cpu = _phases(cells[sel & (cells["device"] == "cpu")])
        gpu = _phases(cells[sel & (cells["device"] == "cuda")])
        if cpu is None or gpu is None:
            continue
        saved = {p: cpu[p] - gpu[p] for p in (*schema.PHASES, "other")}
        total = cpu["epoch"] - gpu["epoch"]
        phase = max(saved, key=saved.get)
        if total <= 0:
            return (f"With the {loader} loader the GPU saves no time per epoch "
                    f"({seconds(cpu['epoch'])} on the CPU, {seconds(gpu['epoch'])} on the GPU)")
        return (f"{_PHASE_NAMES[phase][0].upper()}{_PHASE_NAMES[phase][1:]} explains most of "
                f"it: {seconds(cpu[phase])} per epoch on the CPU against {seconds(gpu[phase])} "
                f"on the GPU, {num(100 * saved[phase] / total, 2, '%')} of the "
                f"{seconds(total)} per epoch the GPU saves ({loader} loader)")
    return None


def _loader_sentence(cells, env, device="cpu") -> str | None:
    sel = (cells["env"] == env) & (cells["device"] == device)
    dl = cells[sel & (cells["loader"] == "dataloader")]
    res = cells[sel & (cells["loader"] == "resident")]
    if dl.empty or res.empty:
        only = sorted(set(cells.loc[sel, "loader"]))
        return (f"Only the {only[0]} loader ran on the {DEVICE_NAMES.get(device, device)}: no "
                "loader effect measured"
                if only else None)
    est = stats.ratio_ci(_col(dl, "epoch_s_median"), _col(res, "epoch_s_median"))
    dl_data, res_data = _median(_per_epoch(dl, "data_s")), _median(_per_epoch(res, "data_s"))
    return (f"On the {DEVICE_NAMES.get(device, device)}, resident data makes an epoch "
            f"{ratio_phrase(est)} faster than the "
            f"DataLoader: data loading takes {seconds(dl_data)} of the DataLoader's "
            f"{seconds(_median(_col(dl, 'epoch_s_median')))} epoch against "
            f"{seconds(res_data)} with resident data")


def _precision_sentence(summary, env, device="cpu") -> str | None:
    cells = summary[(summary["experiment"] == "sweep") & (summary["status"] == "ok")
                    & (summary["env"] == env) & (summary["device"] == device)]
    med = _sweep_medians(cells)
    parts = []
    if not med.empty:
        others = sorted(set(med["precision"]) - {"fp32"})
        fp32 = cells[cells["precision"] == "fp32"]
        for prec in others:
            other = cells[cells["precision"] == prec]
            common = sorted(set(fp32["batch_size"]) & set(other["batch_size"]))
            if not common:
                continue
            batch = 128 if 128 in common else common[-1]
            loader = sorted(set(fp32.loc[fp32["batch_size"] == batch, "loader"])
                            & set(other.loc[other["batch_size"] == batch, "loader"]))[-1]

            def pick(frame, batch=batch, loader=loader):
                return frame[(frame["batch_size"] == batch) & (frame["loader"] == loader)]
            est = stats.ratio_ci(_col(pick(other), "samples_per_s"),
                                 _col(pick(fp32), "samples_per_s"))
            parts.append(f"{prec} gives {ratio_phrase(est)} the fp32 throughput at batch "
                         f"{count(batch)} ({loader} loader)")
        best = med.loc[med["samples_per_s"].idxmax()]
        parts.append(f"the best throughput is {num(best['samples_per_s'], 3, 'samples/s')} at "
                     f"batch {count(best['batch_size'])} ({best['precision']}, "
                     f"{best['loader']} loader)")
    if not parts:
        return None
    return f"In the sweep on the {DEVICE_NAMES.get(device, device)}, " + "; ".join(parts)


def _cost_sentence(result: cost.CostReport, env, model) -> str | None:
    rows = [r for r in result.rows if r.env == env]
    if not rows:
        return None
    cur = model.currency
    loaders = sorted({r.loader for r in rows}, key=lambda x: x != blog.BLOG_LOADER)
    loader = loaders[0]
    parts = [f"{money(r.total.value, cur)} on the {DEVICE_NAMES.get(r.device, r.device)}"
             for r in rows if r.loader == loader]
    text = (f"One training run at the blog's settings ({loader} loader, the whole process) "
            f"costs {' and '.join(parts)}")
    cpu = next((r for r in rows if r.loader == loader and r.device == "cpu"), None)
    share = _waiting_share(cpu) if cpu else None
    if share is not None:
        text += (f", of which waiting is {num(100 * share, 2, '%')} on the CPU"
                 + (" (waiting dominates)" if share > 0.5 else ""))
    be = next((b for b in result.break_even if b.env == env and b.loader == loader), None)
    if be is not None:
        text += (f"; the GPU machine's extra {money(be.extra_price, cur)} pays for itself after "
                 f"{_runs(be.runs_with_waiting)} counting waiting "
                 f"({_runs(be.runs_electricity)} on electricity alone)")
    return text


def _accuracy_sentence(cells, env) -> str | None:
    part = cells[(cells["env"] == env) & (cells["experiment"] == "convergence")]
    if part.empty:
        return None
    spread = _seed_spread(part)
    spread_text = ("one repeat per cell, so no seed-to-seed spread" if spread is None
                   else f"the seed-to-seed spread measured here is {points(spread, False)}")
    loaders = sorted(set(part["loader"]), key=lambda x: x != blog.BLOG_LOADER)
    loader = loaders[0]
    cpu = part[(part["device"] == "cpu") & (part["loader"] == loader)]
    gpu = part[(part["device"] == "cuda") & (part["loader"] == loader)]
    if not cpu.empty and not gpu.empty:
        diff = stats.diff_ci(_col(gpu, "final_test_acc"), _col(cpu, "final_test_acc"))
        within = spread is not None and abs(diff.value) <= spread
        return (f"Final test accuracy is {num(_median(_col(cpu, 'final_test_acc')), 4, '%')} "
                f"on the CPU and {num(_median(_col(gpu, 'final_test_acc')), 4, '%')} on the "
                f"GPU ({loader} loader), a difference of {points(diff.value)} "
                f"({points_interval(diff)}); {spread_text}"
                + ("" if spread is None else
                   (", so the difference lies within it" if within
                    else ", so the difference exceeds it")))
    devices = sorted(set(part["device"]))
    accs = ", ".join(f"{num(_median(_col(part[part['device'] == d], 'final_test_acc')), 4, '%')}"
                     f" on the {DEVICE_NAMES.get(d, d)}" for d in devices)
    return f"Final test accuracy is {accs} ({loader} loader); {spread_text}"


def _seed_spread(cells) -> float | None:
    """The seed-to-seed spread of final test accuracy (points): the largest max - min over
    repeats of any (env, device, loader) group of ``cells``; None without 2 repeats."""
    spreads = [r for _, g in cells.groupby(["env", "device", "loader"])
               if (r := _range(_col(g, "final_test_acc"))) is not None]
    return max(spreads) if spreads else None


def _no_gpu_sentence(summary, envs) -> str:
    why = {env: _absent_reason(summary, env, "cuda") for env in envs}
    reasons = ("; ".join(f"{env}: {text}" for env, text in why.items())
               if len(set(why.values())) > 1 else next(iter(why.values())))
    return (f"This study has no GPU ({reasons}), so there is no GPU/CPU speed-up; to add one, "
            "copy another machine's results/runs/ENV folder into results/runs/ and rerun "
            "(snakemake --cores all), run the study in the CUDA image (docker run --gpus all "
            "mnistbench:cuda), or run the cuda cells on a SLURM GPU partition "
            "(snakemake --profile profiles/slurm)")


def _scheduled(summary, env) -> bool:
    """Whether ``env``'s cells ran in a container or as SLURM jobs (not the local runner)."""
    part = summary[summary["env"] == env]
    return any(str(v) for column in ("container", "slurm_partition") if column in part.columns
               for v in part[column].fillna(""))


def _primary_env(summary) -> str:
    """The environment the findings describe when none has a GPU: the one with the most ok
    cells (the full study, not a container's part of it), then the local runner's, then the
    first by name."""
    ok = summary[summary["status"] == "ok"]
    return min(summary["env"].unique(), key=lambda env: (
        -int((ok["env"] == env).sum()), _scheduled(summary, env), env))


def _findings(summary, epochs, model):
    """Three to six sentences, computed from the quiet cells (busy ones left out where a
    quiet repeat exists)."""
    quiet, dropped = discount_busy(summary)
    cells, _ = blog.blog_cells(quiet)
    envs = sorted(summary["env"].unique())
    multi = len(envs) > 1
    gpu_envs = _envs_with_gpu(cells)
    subset = blog.subset(cells)
    at = "At the blog's settings (batch 128, fp32" + (f"; {subset}" if subset else "") + "), "
    sentences = []
    if gpu_envs:
        speed = [s for env in gpu_envs
                 if (s := _speed_sentence(cells, f"on {env} " if multi else "", env))]
        if speed:
            sentences.append(at + "; ".join(speed))
        env = gpu_envs[0]
        phase = _phase_sentence(cells, env)
        if phase:
            sentences.append(phase)
    else:
        ran = summary[(summary["device"] == "cuda") & (summary["status"] == "ok")]
        sentences.append(_no_gpu_sentence(summary, envs) if ran.empty else
                         "No GPU cell ran at the blog's settings (batch 128, fp32), so there is "
                         "no GPU/CPU speed-up at them; the sweep compares the devices at other "
                         "settings")
        env = _primary_env(summary)
        loader = _loader_sentence(cells, env)
        if loader:
            sentences.append(loader)
        precision = _precision_sentence(quiet, env)
        if precision:
            sentences.append(precision)
    result = cost.compute(quiet, epochs, model)
    cost_text = _cost_sentence(result, env, model)
    if cost_text:
        sentences.append(cost_text)
    accuracy = _accuracy_sentence(cells, env)
    if accuracy:
        sentences.append(accuracy)
    hardware = "Hardware: " + "; ".join(
        (f"{e}: " if multi else "") + _hardware_line(summary, e) for e in envs)
    busy = int(busy_mask(summary).sum())
    if busy:
        hardware += (f"; {plural(busy, 'cell')} ran on a busy machine (others used more than "
                     f"{BUSY_SHARE_PCT} % of it), {dropped} of them left out of these findings")
    return [s.rstrip(".") + "." for s in [*sentences[:5], hardware]]


# ---------------------------------------------------------------------------- the blog, checked

def _verdict_row(title, claim, verdict, numbers):
    assert verdict in blog.VERDICTS, verdict
    return {"title": title, "claim": claim, "verdict": verdict,
            "verdict_class": verdict.replace(" ", "-"), "numbers": numbers}


def _per_loader(cells, device, column, fmt, per_epoch=False, multi=False) -> str:
    parts = []
    for (env, loader), group in cells[cells["device"] == device].groupby(["env", "loader"]):
        values = _per_epoch(group, column) if per_epoch else _col(group, column)
        parts.append(f"{env + ' ' if multi else ''}{loader}: {fmt(_median(values))}")
    return "; ".join(parts) or f"no ok {device} cell"


def _tips_cells(summary):
    """The cells of the tips experiment that name their tip (always with a ``tip`` column)."""
    if TIP_COLUMN not in summary.columns:
        return summary.iloc[0:0].assign(**{TIP_COLUMN: None})
    return summary[(summary["experiment"] == TIPS_EXPERIMENT)
                   & summary[TIP_COLUMN].map(lambda v: isinstance(v, str) and bool(v))]


def usd(value: float) -> str:
    """A dollar amount of the blog's cost table: as printed ($0.37, $0.10) from a cent up,
    else 3 significant digits ($0.0367)."""
    return f"${value:.2f}" if value >= 0.1 else f"${num(value, 3)}"


def _blog_side(summary, cells, result: cost.CostReport, model: cost.CostModel, note: str):
    """The blog's tables, row by row, beside this study's numbers."""
    B = blog.BLOG
    multi = summary["env"].nunique() > 1
    envs = sorted(summary["env"].unique())
    cur = model.currency
    ten = B["cost_runs"]

    def ours(device, column, fmt, per_epoch=False):
        if cells[cells["device"] == device].empty:
            return f"no ok {device} cell" if device == "cpu" else "no GPU in this study"
        return _per_loader(cells, device, column, fmt, per_epoch, multi)

    def hardware(column, none):
        return "; ".join((f"{e}: " if multi else "")
                         + (", ".join(_values(summary[summary["env"] == e], column)) or none)
                         for e in envs)

    speeds = []
    for env in _envs_with_gpu(cells):
        for loader in sorted(set(cells.loc[cells["env"] == env, "loader"])):
            est = _speedup(cells, env, loader)
            if est is not None:
                speeds.append(f"{env + ' ' if multi else ''}{loader}: {ratio_phrase(est)}")
    acc = "CPU " + ours("cpu", "final_test_acc", lambda v: num(v, 4, "%"))
    if not cells[cells["device"] == "cuda"].empty:
        acc += "; GPU " + ours("cuda", "final_test_acc", lambda v: num(v, 4, "%"))
    spread = _seed_spread(cells)
    if spread is not None:
        acc += f"; seed-to-seed spread {points(spread, False)}"

    def cost_ours(device):
        power = B["cpu_power_w" if device == "cpu" else "gpu_power_w"]
        parts = []
        for r in result.rows:
            if r.device != device:
                continue
            at_blog = blog.energy_cost(power, ten * r.run_s.value, B["price_per_kwh"])
            parts.append(f"{r.env + ' ' if multi else ''}{r.loader}: electricity "
                         f"{money(ten * r.electricity.value, cur)}, in all "
                         f"{money(ten * r.total.value, cur)}; at the blog's "
                         f"{as_printed(power, 'W')} and {usd(B['price_per_kwh'])}/kWh: "
                         f"{usd(at_blog)}")
        return "; ".join(parts) or f"no ok {device} convergence cell"

    epochs = blog.BLOG_SETTINGS["epochs"]

    def row(what, printed, here, row_note=note):
        return {"what": what, "blog": printed, "ours": here, "note": row_note}

    return [
        {"table": "Hardware", "rows": [
            row("CPU", B["cpu"], hardware("cpu_model", "–"), "another machine"),
            row("GPU", B["gpu"], hardware("gpu_name", "none"), "another machine")]},
        {"table": "Time per epoch and total", "rows": [
            row("CPU, per epoch", as_printed(B["cpu_epoch_s"], "s"),
                ours("cpu", "epoch_s_median", seconds)),
            row("GPU, per epoch", as_printed(B["gpu_epoch_s"], "s"),
                ours("cuda", "epoch_s_median", seconds)),
            row(f"CPU, total ({plural(epochs, 'epoch')})",
                f"{num(epochs * B['cpu_epoch_s'], 3, 's')} (implied: {epochs} × the epoch)",
                ours("cpu", "total_s", seconds)),
            row(f"GPU, total ({plural(epochs, 'epoch')})",
                f"{num(epochs * B['gpu_epoch_s'], 3, 's')} (implied: {epochs} × the epoch)",
                ours("cuda", "total_s", seconds)),
            row("GPU/CPU speed-up", as_printed(B["speedup"], "×"),
                "; ".join(speeds) or "no GPU in this study")]},
        {"table": "Data loading and backprop, per epoch", "rows": [
            row("CPU, data loading", as_printed(B["cpu_data_s"], "s"),
                ours("cpu", "data_s", seconds, True)),
            row("CPU, backprop", as_printed(B["cpu_backward_s"], "s"),
                ours("cpu", "backward_s", seconds, True)),
            row("GPU, data loading", as_printed(B["gpu_data_s"], "s"),
                ours("cuda", "data_s", seconds, True)),
            row("GPU, backprop", as_printed(B["gpu_backward_s"], "s"),
                ours("cuda", "backward_s", seconds, True))]},
        {"table": "Resources", "rows": [
            row("CPU use (100 % = one core)", as_printed(B["cpu_util_pct"]),
                ours("cpu", "cpu_pct_mean", lambda v: num(v, 3, "%"))),
            row("peak memory", as_printed(B["memory_mb"]),
                ours("cpu", "peak_rss_mb", lambda v: num(v, 3, "MiB"))),
            row("GPU utilisation", as_printed(B["gpu_util_pct"]),
                ours("cuda", "gpu_util_mean", lambda v: num(v, 3, "%")))]},
        {"table": "Accuracy, best epoch, final loss", "rows": [
            row("final test accuracy",
                f"CPU {as_printed(B['cpu_accuracy_pct'])}; GPU "
                f"{as_printed(B['gpu_accuracy_pct'])}; gap "
                f"{as_printed(B['accuracy_gap_points'], 'points')}", acc),
            row("best epoch", as_printed(B["best_epoch"]), ours("cpu", "best_epoch", count)),
            row("final test loss", as_printed(B["final_loss"]),
                ours("cpu", "final_test_loss", lambda v: num(v, 3)))]},
        {"table": f"Cost of {ten} trainings", "rows": [
            row("CPU", f"{usd(B['cpu_cost'])} (printed)", cost_ours("cpu")),
            row("GPU", f"{usd(B['gpu_cost'])} (printed)", cost_ours("cuda"))]},
    ]


def _check_model():
    B = blog.BLOG
    one_pool, two_pools = blog.flattened_features(False), blog.flattened_features(True)
    return _verdict_row(
        "The model",
        f"The printed forward() (a max-pool after each convolution) feeds fc1 = "
        f"Linear({B['fc1_in_features']}, 128).",
        blog.CONFIRMED if two_pools == B["fc1_in_features"] else blog.CONTRADICTED,
        f"Two 3x3 convolutions and one 2x2 pool leave 28 → 26 → 24 → 12: 12 × 12 × 64 = "
        f"{one_pool:,} features; a pool after each convolution leaves 28 → 26 → 13 → 11 → 5: "
        f"5 × 5 × 64 = {two_pools:,}, which fc1 cannot take, so the printed code fails. This "
        f"study trains the network the layer sizes describe ({one_pool:,} features).")


def _check_electricity():
    B = blog.BLOG
    ten, epochs = B["cost_runs"], blog.BLOG_SETTINGS["epochs"]
    checks = []
    for key, name in (("cpu", "CPU"), ("gpu", "GPU")):
        secs = blog.training_seconds(B[f"{key}_epoch_s"])
        power = B[f"{key}_power_w"]
        right = blog.energy_cost(power, secs, B["price_per_kwh"])
        printed = B[f"{key}_cost"]
        factor = printed / right
        implied = f" ({blog.IMPLIED[f'{key}_power_w']})" if f"{key}_power_w" in blog.IMPLIED \
            else ""
        hours = (f"; the blog's {as_printed(B['cpu_hours'], 'h')} is {ten} runs × {epochs} "
                 f"epochs × {as_printed(B['cpu_epoch_s'], 's')} = {num(secs, 4, 's')}"
                 if key == "cpu" else
                 f"; {num(secs / 3600, 3, 'h')} is {ten} runs × {epochs} epochs × "
                 f"{as_printed(B['gpu_epoch_s'], 's')} = {num(secs, 3, 's')}")
        checks.append(_verdict_row(
            f"Electricity of {ten} {name} trainings",
            f"{ten} trainings on the {name} cost {usd(printed)} in electricity.",
            blog.CONFIRMED if abs(factor - 1) < 0.05 else blog.CONTRADICTED,
            f"{as_printed(power, 'W')}{implied} × {num(secs / 3600, 3, 'h')} × "
            f"{usd(B['price_per_kwh'])}/kWh = {usd(right)}, not {usd(printed)} "
            f"({num(factor, 3, '×')} too high){hours}."))
    return checks


def _check_unexplained(cells, note):
    B = blog.BLOG
    unexplained = B["cpu_unexplained_s"]
    numbers = (f"The blog's data-loading and backprop times leave about "
               f"{as_printed(unexplained, 's')} ({num(100 * unexplained / B['cpu_epoch_s'], 2)} "
               f"%) of its {as_printed(B['cpu_epoch_s'], 's')} CPU epoch unexplained.")
    phases = _phases(cells[(cells["device"] == "cpu") & (cells["loader"] == blog.BLOG_LOADER)])
    if phases is not None:
        rest = phases["epoch"] - phases["data"] - phases["backward"]
        numbers += (f" Here (CPU, {blog.BLOG_LOADER} loader) data loading "
                    f"{seconds(phases['data'])} and backprop {seconds(phases['backward'])} "
                    f"leave {seconds(rest)} ({num(100 * rest / phases['epoch'], 2)} %) of the "
                    f"{seconds(phases['epoch'])} epoch: the forward pass "
                    f"{seconds(phases['forward'])}, the optimizer {seconds(phases['optimizer'])}"
                    f", the test-set evaluation {seconds(phases['eval'])} and the loop "
                    f"{seconds(phases['other'])}, which the blog's table leaves out"
                    + (f" ({note})." if note else "."))
    else:
        numbers += f" This study has no ok CPU cell with the {blog.BLOG_LOADER} loader."
    return _verdict_row(
        "What the CPU epoch's phases leave unexplained",
        f"Data loading and backprop account for the {as_printed(B['cpu_epoch_s'], 's')} CPU "
        "epoch.", blog.CONTRADICTED, numbers)


def _check_speedups(summary, cells, note):
    B = blog.BLOG
    multi = summary["env"].nunique() > 1
    title = as_printed(B["speedup"], "×")
    claim = f"A GPU trains this model {title} faster than a CPU."
    tips = _tips_cells(summary)
    tuned = tips[(tips["status"] == "ok") & (tips[TIP_COLUMN] == "tuned")]
    variants = [("as written (its loader, fp32, eager)", cells, blog.BLOG_LOADER),
                ("with resident data", cells, "resident"),
                ("with tuned code", tuned.assign(loader="tuned"), "tuned")]
    checks = []
    for label, frame, loader in variants:
        envs = [e for e in _envs_with_gpu(frame)
                if not frame[(frame["env"] == e) & (frame["device"] == "cpu")
                             & (frame["loader"] == loader)].empty]
        if not envs:
            why = (f"No GPU and CPU cells with the {loader} loader in this study"
                   + (" (no GPU: the findings say how to add one)."
                      if cells[cells["device"] == "cuda"].empty else "."))
            if loader == "tuned":
                why = ("Not measured in this study: the tips experiment has no ok 'tuned' "
                       "cells on both devices.")
            checks.append(_verdict_row(f"{title}, {label}", claim, blog.NOT_CHECKABLE, why))
            continue
        env = envs[0]
        est = _speedup(frame, env, loader)
        verdict, why = blog.verdict_in_interval(B["speedup"], est)
        numbers = (f"Here{' on ' + env if multi else ''}: {ratio_phrase(est)} "
                   f"({_hardware(summary, env, 'cuda')} against "
                   f"{_hardware(summary, env, 'cpu')}); {title} is {why}")
        if note and loader != "tuned":
            verdict, numbers = blog.NOT_CHECKABLE, f"{numbers}; {note}"
        checks.append(_verdict_row(f"{title}, {label}", claim, verdict, numbers + "."))
    return checks


def _check_epochs(cells, note):
    B = blog.BLOG
    checks = []
    for device, key, column, marker in (("cpu", "cpu_epoch_s", "cpu_model", "12700K"),
                                        ("cuda", "gpu_epoch_s", "gpu_name", "4090")):
        name = B["cpu" if device == "cpu" else "gpu"]
        title = f"The {'CPU' if device == 'cpu' else 'GPU'} epoch on the blog's hardware"
        claim = f"An epoch takes {as_printed(B[key], 's')} on the {name}."
        mine = cells[(cells["device"] == device) & (cells["loader"] == blog.BLOG_LOADER)]
        same = mine[mine[column].map(lambda v, m=marker: m in str(v))] \
            if column in mine.columns else mine.iloc[0:0]
        if same.empty:
            here = ", ".join(_values(cells[cells["device"] == device], column)) \
                if column in cells.columns else ""
            checks.append(_verdict_row(
                title, claim, blog.NOT_CHECKABLE,
                f"This study has no ok {device} cell on the blog's {name} with its loader"
                + (f" (here: {here}): another machine's epoch says nothing about it."
                   if here else ".")))
            continue
        est = stats.median_ci(_col(same, "epoch_s_median"))
        verdict, why = blog.verdict_in_interval(B[key], est)
        numbers = (f"Here, on the same {'CPU' if device == 'cpu' else 'GPU'} model: "
                   f"{seconds(est.value)} ({interval(est, 's')}); {as_printed(B[key], 's')} "
                   f"is {why}")
        if note:
            verdict, numbers = blog.NOT_CHECKABLE, f"{numbers}; {note}"
        checks.append(_verdict_row(title, claim, verdict, numbers + "."))
    return checks


def _check_accuracy(cells, note):
    gap = blog.BLOG["accuracy_gap_points"]
    spread = _seed_spread(cells)
    diff = None
    for env in _envs_with_gpu(cells):
        sel = (cells["env"] == env) & (cells["loader"] == blog.BLOG_LOADER)
        c, g = cells[sel & (cells["device"] == "cpu")], cells[sel & (cells["device"] == "cuda")]
        if not c.empty and not g.empty:
            diff = stats.diff_ci(_col(g, "final_test_acc"), _col(c, "final_test_acc"))
            break
    verdict, why = blog.verdict_accuracy_gap(gap, spread, diff)
    numbers = (f"The blog's devices differ by {as_printed(gap, 'points')}. Here the "
               + (f"seed-to-seed spread (max − min over repeats) is {points(spread, False)}"
                  if spread is not None else "cells have one repeat each")
               + ("" if diff is None else
                  f", and the GPU minus the CPU is {points(diff.value)} "
                  f"({points_interval(diff)})")
               + f": {why}")
    if note and verdict != blog.NOT_CHECKABLE:
        verdict, numbers = blog.NOT_CHECKABLE, f"{numbers}; {note}"
    return _verdict_row("The accuracy gap", f"The devices differ in accuracy by "
                        f"{as_printed(gap, 'points')}.", verdict, numbers + ".")


def _blog_check(summary, cells, result: cost.CostReport, model: cost.CostModel):
    """(the blog's tables beside this study's numbers, every check with its verdict, the
    subset note, its detail): every comparison with the blog says "subset: N samples, not
    comparable" when this study's cells at the blog's settings are a subset."""
    note = blog.subset(cells) or ""
    side = _blog_side(summary, cells, result, model, note)
    checks = [_check_model(), *_check_electricity(), _check_unexplained(cells, note),
              *_check_speedups(summary, cells, note), *_check_epochs(cells, note),
              _check_accuracy(cells, note)]
    return side, checks, note, blog.subset_detail(cells) or ""


# ---------------------------------------------------------------------------- tips

_VERDICT_CLASS = {blog.PAYS_OFF: "good", blog.SLOWER: "bad", blog.COSTS_ACCURACY: "bad",
                  blog.WITHIN_NOISE: "noise", blog.UNCLEAR: "noise"}


def _tip_cell(device, rule, base, group, spread) -> dict:
    """One tip on one device: speed-up over the baseline with its interval, accuracy effect,
    verdict; or why there is none."""
    empty = {"speed": "", "ci": "", "acc": "", "busy": "", "note": "", "span": True}
    not_applicable = study.not_applicable_reason(rule, device)
    if not_applicable:
        measured = ""
        if group is not None and not group.empty:
            est = stats.ratio_ci(_col(base, "epoch_s_median"), _col(group, "epoch_s_median"))
            if est is not None:
                measured = f" (measured anyway: {ratio_phrase(est)})"
        return {**empty, "verdict": "n/a", "cls": "na",
                "note": not_applicable + measured}
    if group is None or group.empty:
        return {**empty, "verdict": "not measured", "cls": "na", "note": ""}
    ok = group[group["status"] == "ok"]
    if ok.empty:
        status = group["status"].iloc[0]
        reason = group["reason"].dropna()
        return {**empty, "verdict": status, "cls": "bad",
                "note": str(reason.iloc[0]) if not reason.empty else "(no reason recorded)"}
    if base is None or base.empty:
        return {**empty, "verdict": "no baseline", "cls": "na",
                "note": f"no ok baseline cell on the {device}"}
    quiet_base, _ = discount_busy(base)
    quiet, _ = discount_busy(ok)
    if rule.name == blog.BASELINE:
        acc = _median(_col(quiet, "final_test_acc"))
        return {**empty, "span": False, "speed": "1× (baseline)", "verdict": "baseline",
                "cls": "na",
                "acc": f"{num(acc, 4, '%')}" + ("" if spread is None else
                                                f" (seed spread {points(spread, False)})"),
                "busy": _busy_note(ok)}
    est = stats.ratio_ci(_col(quiet_base, "epoch_s_median"), _col(quiet, "epoch_s_median"))
    diff = stats.diff_ci(_col(quiet, "final_test_acc"), _col(quiet_base, "final_test_acc"))
    drop = None if diff is None else -diff.value
    verdict = blog.tip_verdict(est, drop, spread)
    acc = "–"
    if diff is not None:
        acc = points(diff.value)
        if spread is not None:
            acc += (" (within the seed spread)" if abs(diff.value) <= spread
                    else f" (beyond the seed spread of {points(spread, False)})")
    return {**empty, "span": False, "speed": "–" if est is None else num(est.value, 3, "×"),
            "ci": "" if est is None else ratio_interval(est), "acc": acc,
            "verdict": verdict, "cls": _VERDICT_CLASS.get(verdict, "na"),
            "busy": _busy_note(ok)}


def _tips(summary):
    """(devices, rows, why there are none): each tip's speed-up over the baseline per device,
    accuracy effect and verdict."""
    cells = _tips_cells(summary)
    if cells.empty:
        why = ("Not measured in this study: no cells of the tips experiment"
               + ("" if TIP_COLUMN in summary.columns else
                  f" (the summary has no '{TIP_COLUMN}' column)") + ".")
        return [], [], why
    devices = [d for d in _devices(cells) if d in set(cells["device"]) or d in DEVICES]
    rows = []
    for env in sorted(cells["env"].unique()):
        part = cells[cells["env"] == env]
        bases = {d: part[(part["device"] == d) & (part[TIP_COLUMN] == blog.BASELINE)
                         & (part["status"] == "ok")] for d in devices}
        spreads = {d: _range(_col(discount_busy(b)[0], "final_test_acc"))
                   for d, b in bases.items()}
        for name in blog.tip_order(part[TIP_COLUMN]):
            rule = blog.tip(name)
            per_device = []
            for device in devices:
                group = part[(part["device"] == device) & (part[TIP_COLUMN] == name)]
                per_device.append(_tip_cell(device, rule, bases[device], group,
                                            spreads[device]))
            rows.append({"env": env, "tip": name,
                         "change": rule.change or "–", "devices": per_device})
    return devices, rows, ""


# ---------------------------------------------------------------------------- runtimes

#: What makes two cells of different environments the same measurement: a group but its env.
_SAME_CELL = [c for c in _GROUP if c != "env"]


def _reference_env(envs, part) -> str:
    """The environment the others of one hardware are compared with: the local runner's
    (cells neither in a container nor SLURM jobs), else the one with most cells, else the
    first by name."""
    return min(envs, key=lambda env: (_scheduled(part, env), -int((part["env"] == env).sum()),
                                      env))


def _runtimes(summary):
    """(rows, sentences, why there are none): the same cells run in two environments of the
    same hardware (a container or SLURM jobs beside the local runner): each other
    environment's median epoch time over the reference's (:func:`_reference_env`), with its
    95 % interval."""
    if "hardware" not in summary.columns or "container" not in summary.columns:
        return [], [], "Not measured: the summary has no hardware or container column."
    cells, _ = discount_busy(summary[summary["status"] == "ok"])
    keys = _SAME_CELL + ([TIP_COLUMN] if TIP_COLUMN in cells.columns else [])
    cells = cells.assign(**{k: cells[k].fillna("") for k in [*keys, "hardware"]
                            if k != "batch_size"})
    rows, sentences = [], []
    for hardware, part in cells.groupby("hardware", sort=True):
        envs = sorted(part["env"].unique())
        if len(envs) < 2:
            continue
        ref = _reference_env(envs, part)
        reference = dict(iter(part[part["env"] == ref].groupby(keys)))
        for env in [e for e in envs if e != ref]:
            ratios = []
            for key, group in part[part["env"] == env].groupby(keys, sort=True):
                match = reference.get(key)
                times = _col(group, "epoch_s_median")
                ref_times = [] if match is None else _col(match, "epoch_s_median")
                est = stats.ratio_ci(times, ref_times)
                if est is None:
                    continue
                ratios.append(est.value)
                what = dict(zip(keys, key, strict=True))
                rows.append({
                    "env": env, "ref": ref, "experiment": what["experiment"],
                    "device": what["device"], "precision": what["precision"],
                    "loader": what["loader"], "batch": count(what["batch_size"]),
                    "tip": what.get(TIP_COLUMN) or "",
                    "ref_s": seconds(_median(ref_times)), "env_s": seconds(_median(times)),
                    "ratio": ratio_phrase(est),
                    "repeats": f"{len(group)} / {len(match)}",
                })
            if ratios:
                median = _median(ratios)
                sentences.append(
                    f"On {hardware}, {env} took {num(median, 3, '×')} the epoch time of {ref} "
                    f"(median over {plural(len(ratios), 'matched setting')}; "
                    f"{num(min(ratios), 3, '×')} to {num(max(ratios), 3, '×')}): "
                    + ("no measurable cost." if 0.98 <= median <= 1.02 else
                       f"{abs(median - 1) * 100:.1f} % "
                       + ("slower." if median > 1 else "faster.")))
    if not rows:
        return [], [], ("Not measured: no cells of the same settings ran in two environments "
                        "of the same hardware (e.g. runner: docker beside runner: local).")
    return rows, sentences, ""


# ---------------------------------------------------------------------------- recommendations

def _hourly(row: cost.CostRow) -> float | None:
    if row.total.value is None or not row.run_s.value:
        return None
    return row.total.value / row.run_s.value * 3600


def _recommendations(summary, result: cost.CostReport, model: cost.CostModel):
    """The blog's "when to use a CPU / a GPU", rebuilt from the data: each recommendation with
    the numbers behind it."""
    cur = model.currency
    recs = []
    be = sorted(result.break_even, key=lambda b: (b.loader != blog.BLOG_LOADER, b.env))
    rows = {(r.env, r.device, r.loader): r for r in result.rows}
    if be:
        b = be[0]
        cpu, gpu = rows[(b.env, "cpu", b.loader)], rows[(b.env, "cuda", b.loader)]
        numbers = [f"a run takes {seconds(cpu.run_s.value)} on the CPU and "
                   f"{seconds(gpu.run_s.value)} on the GPU ({b.loader} loader)",
                   f"a run costs {money(cpu.total.value, cur)} on the CPU and "
                   f"{money(gpu.total.value, cur)} on the GPU (electricity, hardware, waiting)",
                   f"the GPU machine costs {money(b.extra_price, cur)} more"]
        share = _waiting_share(cpu)
        if share is not None:
            numbers.append(f"waiting is {num(100 * share, 2, '%')} of the CPU run's cost"
                           + (": it dominates" if share > 0.5 else ""))
        if math.isinf(b.runs_with_waiting):
            text = ("The CPU suffices however much you train: a GPU run is not cheaper than a "
                    "CPU run here, even counting the time you wait.")
        elif b.runs_with_waiting == 0:
            text = "The GPU pays off from the first run: its machine costs no more."
        else:
            n = b.runs_with_waiting
            text = (f"The CPU suffices below {n:,.0f} training runs over the machines' life: "
                    f"{seconds(n * cpu.run_s.value)} of CPU training, or "
                    f"{money(n * cpu.total.value, cur)} at this cost model. Beyond that the "
                    "GPU machine's extra price is paid back by what each run saves.")
        recs.append({"title": "When the CPU suffices", "text": text, "numbers": numbers})
    else:
        recs.append({"title": "When the CPU suffices",
                     "text": "Not computable from this study: it needs ok convergence cells on "
                             "both the CPU and the GPU.",
                     "numbers": [note for note in result.notes] or ["no break-even"]})
    recs.append(_batch_recommendation(summary, result, model))
    if be:
        b = be[0]
        recs.append({
            "title": "Break-even in runs",
            "text": f"The GPU machine pays for itself after {_runs(b.runs_with_waiting)} "
                    f"counting the time you wait, after {_runs(b.runs_electricity)} on "
                    "electricity alone.",
            "numbers": [f"extra price {money(b.extra_price, cur)}",
                        f"saving per run: {money(b.saving_with_waiting, cur)} with waiting, "
                        f"{money(b.saving_electricity, cur)} in electricity",
                        f"{b.loader} loader"
                        + (f", {b.env}" if summary["env"].nunique() > 1 else "")]})
    else:
        extra = (model.devices["cuda"].hardware_price
                 - model.devices["cpu"].hardware_price)
        recs.append({"title": "Break-even in runs",
                     "text": "Not computable: no ok convergence cells on both devices.",
                     "numbers": [f"the GPU machine costs {money(extra, cur)} more (assumed)"]})
    return recs


def _batch_recommendation(summary, result, model):
    title = "From which batch size the GPU pays off"
    sweep = summary[(summary["experiment"] == "sweep") & (summary["status"] == "ok")]
    cpu = sweep[(sweep["device"] == "cpu") & (sweep["precision"] == "fp32")]
    gpu = sweep[(sweep["device"] == "cuda") & (sweep["precision"] == "fp32")]
    if cpu.empty or gpu.empty:
        return {"title": title, "text": "Not measured: the sweep needs ok fp32 cells on both "
                "the CPU and the GPU.", "numbers": ["no GPU sweep cells" if gpu.empty
                                                    else "no CPU fp32 sweep cells"]}
    rows = {(r.env, r.device, r.loader): r for r in result.rows}
    for env in sorted(set(gpu["env"]) & set(cpu["env"])):
        for loader in sorted(set(gpu["loader"]) & set(cpu["loader"]),
                             key=lambda x: x != blog.BLOG_LOADER):
            c_row, g_row = rows.get((env, "cpu", loader)), rows.get((env, "cuda", loader))
            if c_row is not None and g_row is not None and _hourly(c_row) and _hourly(g_row):
                c_rate, g_rate, basis = _hourly(c_row), _hourly(g_row), "this study's runs"
            else:
                c_dev, g_dev = model.devices["cpu"], model.devices["cuda"]
                c_rate = (c_dev.system_power_w / 1000 * model.price_per_kwh
                          + c_dev.hardware_per_hour + model.wait_value_per_hour)
                g_rate = (g_dev.system_power_w / 1000 * model.price_per_kwh
                          + g_dev.hardware_per_hour + model.wait_value_per_hour)
                basis = "the cost model's assumed powers"
            need = g_rate / c_rate
            batches = sorted(set(cpu.loc[(cpu["env"] == env) & (cpu["loader"] == loader),
                                         "batch_size"])
                             & set(gpu.loc[(gpu["env"] == env) & (gpu["loader"] == loader),
                                           "batch_size"]))
            if not batches:
                continue
            ests = {}
            for batch in batches:
                def pick(frame, batch=batch, env=env, loader=loader):
                    return frame[(frame["env"] == env) & (frame["loader"] == loader)
                                 & (frame["batch_size"] == batch)]
                ests[batch] = stats.ratio_ci(_col(pick(gpu), "samples_per_s"),
                                             _col(pick(cpu), "samples_per_s"))
            start = None
            for batch in reversed(batches):
                est = ests[batch]
                if est is not None and (est.low if est.has_interval else est.value) > need:
                    start = batch
                else:
                    break
            numbers = [f"an hour costs {money(g_rate, model.currency)} on the GPU and "
                       f"{money(c_rate, model.currency)} on the CPU ({basis}), so the GPU must "
                       f"be {num(need, 3, '×')} faster to cost less per sample"]
            numbers += [f"batch {count(b)}: {ratio_phrase(e)}" for b, e in ests.items()]
            on_env = f", {env}" if summary["env"].nunique() > 1 else ""
            where = f" ({loader} loader, fp32{on_env})"
            if start is None:
                best = max(ests, key=lambda b: ests[b].value if ests[b] else 0)
                text = (f"At no batch size measured ({count(batches[0])}–{count(batches[-1])})"
                        f"{where} is the GPU fast enough to pay for its dearer hour: it needs "
                        f"{num(need, 3, '×')}, the best is {ratio_phrase(ests[best])} at batch "
                        f"{count(best)}.")
            elif start == batches[0]:
                text = (f"The GPU pays off at every batch size measured{where}, from "
                        f"{count(start)}: its speed-up exceeds the {num(need, 3, '×')} its "
                        "dearer hour needs.")
            else:
                text = (f"The GPU pays off from batch size {count(start)}{where}: from there "
                        f"its speed-up ({ratio_phrase(ests[start])}) exceeds the "
                        f"{num(need, 3, '×')} its dearer hour needs.")
            return {"title": title, "text": text, "numbers": numbers}
    return {"title": title, "text": "Not measured: no batch size ran on both devices with the "
            "same loader.", "numbers": ["–"]}


# ---------------------------------------------------------------------------- charts

def _chart_views(figures: dict[str, bytes | None]) -> dict[str, dict]:
    """Per chart: its title, PNG data URI (None without data) with its CSS size (half its
    pixels: sharp on HiDPI screens), the no-data sentence, alt text."""
    from mnistbench.report import plots

    views = {}
    for chart in plots.CHARTS:
        png = figures.get(chart.key)
        width, height = plots.css_size(png) if png else (0, 0)
        why = chart.why_absent
        views[chart.key] = {
            "title": chart.title,
            "uri": None if png is None else
            "data:image/png;base64," + base64.b64encode(png).decode("ascii"),
            "width": str(width), "height": str(height),
            "why": why[:1].upper() + why[1:] + ("" if why.endswith(".") else "."),
            "alt": chart.title,
        }
    return views


def build_context(tables: aggregate.Tables, model: cost.CostModel, *, command: str | None,
                  results: Path, figures: dict[str, bytes | None]) -> dict:
    """The template's flat context: every value preformatted as text (or lists of rows)."""
    summary, epochs = tables.summary, tables.epochs
    envs = sorted(summary["env"].unique())
    multi_env = len(envs) > 1
    cells, source = blog.blog_cells(summary)
    (headline, headline_notes, headline_source, headline_settings,
     headline_epochs) = _headline(summary, cells, source)
    result = cost.compute(summary, epochs, model)
    cost_rows, breakeven, cost_notes, cost_inputs, energy_notes = _cost_context(result, model)
    non_ok, non_ok_groups = _non_ok(summary)
    counts = summary["status"].value_counts()
    charts = _chart_views(figures)
    keys = ["env", "experiment", "device", "precision", "loader", "batch_size"]
    repeats = summary.groupby(keys + ([TIP_COLUMN] if TIP_COLUMN in summary.columns else []),
                              dropna=False).size()
    blog_side, blog_checks, blog_subset, blog_detail = _blog_check(summary, cells, result,
                                                                   model)
    tip_devices, tip_rows, tips_absent = _tips(summary)
    runtime_rows, runtime_sentences, runtimes_absent = _runtimes(summary)
    return {
        "title": "mnistbench: CPU vs GPU training of an MNIST CNN",
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "version": __version__,
        "command": readable_command(command) if command else "",
        "results_dir": readable_command(str(results)),
        "envs": envs,
        "multi_env": multi_env,
        "n_cells": str(len(summary)),
        "status_counts": [{"status": s, "count": str(int(counts.get(s, 0)))}
                          for s in schema.STATUSES],
        "repeats": plural(f"{int(repeats.min())}" if repeats.min() == repeats.max()
                          else f"{int(repeats.min())}–{int(repeats.max())}", "repeat"),
        "findings": _findings(summary, epochs, model),
        "headline_rows": headline,
        "headline_notes": headline_notes,
        "headline_source": headline_source,
        "headline_settings": headline_settings,
        "headline_epochs": headline_epochs,
        "blog_cpu": blog.BLOG["cpu"],
        "blog_gpu": blog.BLOG["gpu"],
        "blog_cpu_epoch": as_printed(blog.BLOG["cpu_epoch_s"], "s"),
        "blog_gpu_epoch": as_printed(blog.BLOG["gpu_epoch_s"], "s"),
        "blog_speedup": as_printed(blog.BLOG["speedup"], "×"),
        "blog_subset": blog_subset,
        "blog_subset_detail": blog_detail,
        "blog_side": blog_side,
        "blog_checks": blog_checks,
        "time_rows": _time_table(cells),
        "loader_rows": _loader_contrast(cells),
        "best_rows": _best_throughput(summary),
        "convergence_rows": _convergence_rows(summary),
        "resource_rows": _resource_rows(cells),
        "chart_phases": charts["phases"],
        "chart_throughput": charts["throughput"],
        "chart_speedup": charts["speedup"],
        "chart_precision": charts["precision"],
        "chart_convergence": charts["convergence"],
        "chart_resources": charts["resources"],
        "chart_status": charts["status"],
        "currency": model.currency,
        "cost_runs": str(model.runs),
        "cost_target": num(model.target_accuracy, 4, "%"),
        "cost_source": readable_command(model.source) if "/" in model.source
        else model.source,  # a path: relative, or the "built-in default"
        "cost_rows": cost_rows,
        "breakeven_rows": breakeven,
        "cost_notes": cost_notes,
        "cost_inputs": cost_inputs,
        "cost_energy_notes": energy_notes,
        "tip_devices": tip_devices,
        "tip_rows": tip_rows,
        "tips_absent": tips_absent,
        "runtime_rows": runtime_rows,
        "runtime_sentences": runtime_sentences,
        "runtimes_absent": runtimes_absent,
        "recommendations": _recommendations(summary, result, model),
        "non_ok_rows": non_ok,
        "non_ok_groups": non_ok_groups,
        "env_rows": _env_table(summary, envs),
        "settings": _settings(summary),
        "columns": aggregate.column_rows(),
        # The methodology's prose lives in the template; only its numbers come from here.
        "boot_resamples": f"{stats.N_BOOT:,}",
        "boot_seed": str(stats.SEED),
        "busy_share": f"{BUSY_SHARE_PCT} %",
    }


def render_html(context: dict) -> str:
    """Render the report template with ``context`` (one environment, one render call)."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(loader=PackageLoader("mnistbench.report", "templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.get_template("report.html.j2").render(**context)


def draw_charts(tables: aggregate.Tables) -> dict[str, bytes | None]:
    """PNG bytes of every chart of :data:`mnistbench.report.plots.CHARTS` (None: no data)."""
    from mnistbench.report import plots

    return {chart.key: chart.render(tables) for chart in plots.CHARTS}


def render_report(results: Path, out: Path, *, cost_model_path: Path | None = None,
                  figures_dir: Path | None = None, command: str | None = None) -> Path:
    """Render ``results``' aggregated tables into the single HTML file ``out``.

    ``figures_dir``: also write every chart there as ``{key}.png`` (a short "no data" image
    for a chart without data), for the workflow's report registration. Raises
    :class:`ReportError` for missing/invalid tables or cost model; nothing is written then.
    """
    results, out = Path(results), Path(out)
    try:
        model = cost.load_model(cost_model_path)
    except cost.CostError as exc:
        raise ReportError(str(exc)) from None
    try:
        tables = aggregate.load_tables(results)
    except aggregate.AggregateError as exc:
        raise ReportError(str(exc)) from None
    return write_report(tables, out, model=model, results=results, figures_dir=figures_dir,
                        command=command)


def write_report(tables: aggregate.Tables, out: Path, *, model: cost.CostModel | None = None,
                 results: Path = Path("results"), figures_dir: Path | None = None,
                 command: str | None = None) -> Path:
    """Render already loaded ``tables`` into ``out`` (and ``figures_dir``): the second half of
    :func:`render_report`, also used on tables built in memory."""
    from mnistbench.report import plots

    out = Path(out)
    model = model or cost.load_model(None)
    # one block per column (as read from CSV) makes every added column slow: consolidate
    tables = aggregate.Tables(tables.summary.copy(), tables.epochs.copy(),
                              tables.resources.copy())
    if tables.summary.empty:
        raise ReportError(f"{Path(results) / aggregate.SUMMARY_CSV} has no cells. Run the "
                          "study and `mnistbench aggregate` again.")
    figures = draw_charts(tables)
    html = render_html(build_context(tables, model, command=command, results=Path(results),
                                     figures=figures))
    try:
        if figures_dir is not None:
            figures_dir = Path(figures_dir)
            for chart in plots.CHARTS:
                png = figures[chart.key] or plots.placeholder(chart.title, chart.why_absent)
                with atomic.atomic_open(figures_dir / chart.filename, "wb") as handle:
                    handle.write(png)
        atomic.write_text(out, html)
    except OSError as exc:
        raise ReportError(f"cannot write the report to {out}: {exc}. Check that the folder "
                          "is writable, or pass another --out.") from None
    return out
