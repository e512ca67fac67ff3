"""The published report: one self-contained HTML file (CSS inline, charts as PNG data URIs)
that opens offline.

One autoescaped Jinja2 environment, one template (``templates/report.html.j2``, which
includes ``templates/report.css`` into its ``<style>``), one render call with a flat,
explicit context of preformatted strings: every value that comes from the results (host
names, error messages, env names) is escaped by Jinja, nothing is marked safe.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from . import __version__, aggregate, atomic, blog, cost, schema, stats


class ReportError(Exception):
    """The report cannot be rendered; the message names the input and the fix."""


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
    """A count or index (an epoch, a median of epochs): 6, 6.5; an en dash when missing."""
    return "–" if _missing(value) else f"{float(value):g}"


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


def _spread(values, fmt=lambda v: num(v, 4)) -> str:
    s = stats.spread(values)
    if s is None:
        return "–"
    median, low, high, n = s
    if n == 1:
        return f"{fmt(median)} (1 repeat)"
    return f"{fmt(median)} ({fmt(low)} – {fmt(high)})"


def _col(frame, name) -> list[float]:
    return [float(v) for v in frame[name].tolist() if not _missing(v)]


def _per_epoch(frame, column) -> list[float]:
    out = []
    for value, epochs in zip(frame[column].tolist(), frame["epochs"].tolist(), strict=True):
        if not _missing(value) and not _missing(epochs) and epochs > 0:
            out.append(float(value) / float(epochs))
    return out


def _median(values: Iterable[float]):
    s = stats.spread(values)
    return None if s is None else s[0]


# ---------------------------------------------------------------------------- sections

def _hardware(summary, env: str, device: str) -> str:
    cells = summary[summary["env"] == env]
    column = "gpu_name" if device == "cuda" else "cpu_model"
    names = sorted({str(v) for v in cells[column].tolist() if v})
    return ", ".join(names) if names else "–"


def _headline(summary):
    cells, source = blog.blog_cells(summary)
    rows, notes = [], []
    for (env, device, loader), group in cells.groupby(["env", "device", "loader"], sort=True):
        epoch = stats.median_ci(_col(group, "epoch_s_median"))
        total = stats.median_ci(_col(group, "total_s"))
        speed = speed_ci = "–"
        if device == "cuda":
            base = cells[(cells["env"] == env) & (cells["device"] == "cpu")
                         & (cells["loader"] == loader)]
            est = stats.ratio_ci(_col(base, "epoch_s_median"), _col(group, "epoch_s_median"))
            if est is None:
                speed, speed_ci = "–", f"no ok CPU cell with the {loader} loader to compare"
            else:
                speed = num(est.value, 3, "×")
                speed_ci = interval(est, "×")
        elif device == "cpu":
            speed, speed_ci = "1× (baseline)", ""
        rows.append({
            "env": env, "device": device, "hardware": _hardware(summary, env, device),
            "loader": loader, "n": str(epoch.n if epoch else 0),
            "epoch": seconds(epoch.value if epoch else None), "epoch_ci": interval(epoch, "s"),
            "total": seconds(total.value if total else None), "total_ci": interval(total, "s"),
            "speedup": speed, "speedup_ci": speed_ci,
        })
    if cells.empty:
        notes.append("No ok cell ran at the blog's settings: no headline. See the matrix "
                     "(section 8) for what failed.")
    else:
        if not (cells["device"] == "cuda").any():
            notes.append("No ok GPU (cuda) cell: CPU-only results, no GPU/CPU speed-up. "
                         "Cells on a machine without a GPU are 'unavailable' (section 8).")
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
    settings = {}
    for key in ("batch_size", "precision", "epochs"):
        values = sorted({str(int(v)) if isinstance(v, float) else str(v)
                         for v in cells[key].tolist() if not _missing(v)})
        settings[key] = ", ".join(values) or "–"
    text = "; ".join(f"{k.replace('_', ' ')} {v}" for k, v in settings.items())
    return rows, notes, source, text, f"{settings['epochs']} epochs"


def _time_table(summary):
    cells, _ = blog.blog_cells(summary)
    rows = []
    for (env, device, loader), group in cells.groupby(["env", "device", "loader"], sort=True):
        speed = "–"
        if device == "cpu":
            speed = "1× (baseline)"
        else:
            base = cells[(cells["env"] == env) & (cells["device"] == "cpu")
                         & (cells["loader"] == loader)]
            b, g = _median(_col(base, "epoch_s_median")), _median(_col(group, "epoch_s_median"))
            if b is not None and g:
                speed = num(b / g, 3, "×")
        rows.append({
            "env": env, "device": device, "loader": loader, "n": str(len(group)),
            "epoch": seconds(_median(_col(group, "epoch_s_median"))),
            "total": seconds(_median(_col(group, "total_s"))),
            "data": seconds(_median(_col(group, "data_s"))),
            "backward": seconds(_median(_col(group, "backward_s"))),
            "speedup": speed,
        })
    return rows


def _loader_contrast(summary):
    cells, _ = blog.blog_cells(summary)
    rows = []
    for (env, device), group in cells.groupby(["env", "device"], sort=True):
        by_loader = {loader: g for loader, g in group.groupby("loader")}
        dl, res = by_loader.get("dataloader"), by_loader.get("resident")
        dl_data = _median(_per_epoch(dl, "data_s")) if dl is not None else None
        res_data = _median(_per_epoch(res, "data_s")) if res is not None else None
        dl_epoch = _median(_col(dl, "epoch_s_median")) if dl is not None else None
        res_epoch = _median(_col(res, "epoch_s_median")) if res is not None else None
        gain = (num(dl_epoch / res_epoch, 3, "×") if dl_epoch and res_epoch else "–")
        share = (num(100 * dl_data / dl_epoch, 3, "%") if dl_data is not None and dl_epoch
                 else "–")
        rows.append({"env": env, "device": device, "dl_data": seconds(dl_data),
                     "dl_share": share, "res_data": seconds(res_data),
                     "dl_epoch": seconds(dl_epoch), "res_epoch": seconds(res_epoch),
                     "gain": gain})
    return rows


def _best_throughput(summary):
    cells = summary[(summary["experiment"] == "sweep") & (summary["status"] == "ok")]
    cells = cells.dropna(subset=["samples_per_s"])
    if cells.empty:
        return []
    med = cells.groupby(["env", "device", "precision", "loader", "batch_size"])[
        "samples_per_s"].median().reset_index()
    rows = []
    for (env, device), group in med.groupby(["env", "device"], sort=True):
        best = group.loc[group["samples_per_s"].idxmax()]
        at128 = group[(group["batch_size"] == 128) & (group["precision"] == "fp32")]
        rows.append({"env": env, "device": device,
                     "best": num(best["samples_per_s"], 3, "samples/s"),
                     "where": f"batch {int(best['batch_size'])}, {best['precision']}, "
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


def _resource_rows(summary):
    cells, _ = blog.blog_cells(summary)
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
        })
    return rows


def _cost_context(summary, epochs, model: cost.CostModel):
    result = cost.compute(summary, epochs, model)
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

    def runs(value: float) -> str:
        if math.isinf(value):
            return "never (the GPU run is not cheaper)"
        if value == 0:
            return "0 (the GPU machine costs no more)"
        return f"{value:,.0f} runs"

    breakeven = [{"env": b.env, "loader": b.loader, "extra": money(b.extra_price, cur),
                  "save_el": money(b.saving_electricity, cur),
                  "runs_el": runs(b.runs_electricity),
                  "save_all": money(b.saving_with_waiting, cur),
                  "runs_all": runs(b.runs_with_waiting)} for b in result.break_even]
    inputs = [{"key": k, "value": v, "meaning": m} for k, v, m in model.as_rows()]
    energy = sorted({(r.device, r.energy_note) for r in result.rows})
    energy_notes = [f"{device}: {note}" for device, note in energy]
    return rows, breakeven, result.notes, inputs, energy_notes


def _non_ok(summary):
    bad = summary[summary["status"] != "ok"]
    rows = [{"env": r.env, "experiment": r.experiment, "cell": r.cell, "device": r.device,
             "precision": r.precision, "loader": r.loader,
             "batch": num(r.batch_size, 6), "repeat": num(r.repeat, 3),
             "status": r.status, "reason": r.reason or "(no reason recorded)"}
            for r in bad.sort_values(["env", "experiment", "cell"]).itertuples()]
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
            seen = sorted({str(v) for v in summary.loc[summary["env"] == env, field].tolist()
                           if not _missing(v) and str(v) != ""})
            values.append(", ".join(seen) if seen else "–")
        if all(v == "–" for v in values) and field.startswith("slurm"):
            continue
        rows.append({"field": field, "unit": unit, "description": description,
                     "per_env": values})
    return rows


def _settings(summary):
    rows = []
    skip = {*schema.ID_COLUMNS}
    for experiment, group in summary.groupby("experiment", sort=True):
        params = []
        for key, (unit, _) in schema.PARAM_FIELDS.items():
            if key in skip:
                continue
            values = sorted({v for v in group[key].tolist() if not _missing(v)},
                            key=lambda v: (isinstance(v, str), v))
            shown = [num(v, 6) if isinstance(v, float) else str(v) for v in values]
            params.append({"key": key, "unit": unit, "shown": ", ".join(shown) or "–"})
        rows.append({"experiment": experiment, "cells": str(len(group)),
                     "params": params})
    return rows


def _chart_views(figures: dict[str, bytes | None]) -> dict[str, dict]:
    """Per chart: its title, PNG data URI (None without data), the no-data note, alt text."""
    from . import plots

    views = {}
    for chart in plots.CHARTS:
        png = figures.get(chart.key)
        views[chart.key] = {
            "title": chart.title,
            "uri": None if png is None else
            "data:image/png;base64," + base64.b64encode(png).decode("ascii"),
            "why": chart.why_absent,
            "alt": chart.title,
        }
    return views


def build_context(tables: aggregate.Tables, model: cost.CostModel, *, command: str | None,
                  results: Path, figures: dict[str, bytes | None]) -> dict:
    """The template's flat context: every value preformatted as text (or lists of rows)."""
    summary, epochs = tables.summary, tables.epochs
    envs = sorted(summary["env"].unique())
    multi_env = len(envs) > 1
    (headline, headline_notes, headline_source, headline_settings,
     headline_epochs) = _headline(summary)
    cost_rows, breakeven, cost_notes, cost_inputs, energy_notes = _cost_context(
        summary, epochs, model)
    non_ok, non_ok_groups = _non_ok(summary)
    counts = summary["status"].value_counts()
    charts = _chart_views(figures)
    repeats = summary.groupby(["env", "experiment", "device", "precision", "loader",
                               "batch_size"]).size()
    return {
        "title": "mnistbench: CPU vs GPU training of an MNIST CNN",
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "version": __version__,
        "command": command or "",
        "results_dir": str(results),
        "envs": envs,
        "multi_env": multi_env,
        "n_cells": str(len(summary)),
        "status_counts": [{"status": s, "count": str(int(counts.get(s, 0)))}
                          for s in schema.STATUSES],
        "repeats": (f"{int(repeats.min())}" if repeats.min() == repeats.max()
                    else f"{int(repeats.min())}–{int(repeats.max())}"),
        "headline_rows": headline,
        "headline_notes": headline_notes,
        "headline_source": headline_source,
        "headline_settings": headline_settings,
        "headline_epochs": headline_epochs,
        "blog_cpu": blog.BLOG["cpu"],
        "blog_gpu": blog.BLOG["gpu"],
        "blog_cpu_epoch": seconds(blog.BLOG["cpu_epoch_s"]),
        "blog_gpu_epoch": seconds(blog.BLOG["gpu_epoch_s"]),
        "blog_speedup": num(blog.BLOG["speedup"], 3, "×"),
        "time_rows": _time_table(summary),
        "loader_rows": _loader_contrast(summary),
        "best_rows": _best_throughput(summary),
        "convergence_rows": _convergence_rows(summary),
        "resource_rows": _resource_rows(summary),
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
        "cost_source": model.source,
        "cost_rows": cost_rows,
        "breakeven_rows": breakeven,
        "cost_notes": cost_notes,
        "cost_inputs": cost_inputs,
        "cost_energy_notes": energy_notes,
        "non_ok_rows": non_ok,
        "non_ok_groups": non_ok_groups,
        "env_rows": _env_table(summary, envs),
        "settings": _settings(summary),
        "columns": aggregate.column_rows(),
        # The methodology's prose lives in the template; only its numbers come from here.
        "boot_resamples": f"{stats.N_BOOT:,}",
        "boot_seed": str(stats.SEED),
    }


def render_html(context: dict) -> str:
    """Render the report template with ``context`` (one environment, one render call)."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(loader=PackageLoader("mnistbench", "templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.get_template("report.html.j2").render(**context)


def draw_charts(tables: aggregate.Tables) -> dict[str, bytes | None]:
    """PNG bytes of every chart of :data:`mnistbench.plots.CHARTS` (None: no data)."""
    from . import plots

    return {chart.key: chart.render(tables) for chart in plots.CHARTS}


def render_report(results: Path, out: Path, *, cost_model_path: Path | None = None,
                  figures_dir: Path | None = None, command: str | None = None) -> Path:
    """Render ``results``' aggregated tables into the single HTML file ``out``.

    ``figures_dir``: also write every chart there as ``{key}.png`` (a short "no data" image
    for a chart without data), for the workflow's report registration. Raises
    :class:`ReportError` for missing/invalid tables or cost model; nothing is written then.
    """
    from . import plots

    results, out = Path(results), Path(out)
    try:
        model = cost.load_model(cost_model_path)
    except cost.CostError as exc:
        raise ReportError(str(exc)) from None
    try:
        tables = aggregate.load_tables(results)
    except aggregate.AggregateError as exc:
        raise ReportError(str(exc)) from None
    if tables.summary.empty:
        raise ReportError(f"{results / aggregate.SUMMARY_CSV} has no cells. Run the study and "
                          "`mnistbench aggregate` again.")
    figures = draw_charts(tables)
    html = render_html(build_context(tables, model, command=command, results=results,
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
