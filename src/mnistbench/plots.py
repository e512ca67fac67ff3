"""The report's charts, as PNG bytes (embedded as data URIs, and written to --figures-dir).

Every chart function takes the aggregated DataFrames (:func:`mnistbench.aggregate.load_tables`)
and returns PNG bytes, or None when its data are absent; :data:`CHARTS` says, per chart,
what is missing then. Figures are :class:`matplotlib.figure.Figure` objects drawn with the
Agg canvas, never registered with pyplot, so there is no global state and nothing to close
(they are freed with their last reference). Seaborn supplies the style and palette through
an ``rc_context``. Every axis label carries its unit.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass

import matplotlib as mpl
import numpy as np
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator

from . import schema, stats
from .blog import blog_cells

DPI = 100  # pixels per inch of the PNGs
WIDTH = 11.0  # inches: 1100 px, the report's content width
MAX_POINTS = 400  # points per time-series line (longer series are thinned)
STATUS_COLORS = {"ok": "#4a9c5d", "oom": "#e69f00", "unavailable": "#b8b8b8",
                 "failed": "#d1495b"}
#: Phases of the stacked bars, in stacking order, and their colours.
PHASE_LABELS = {"data": "data loading", "forward": "forward", "backward": "backward",
                "optimizer": "optimizer", "eval": "evaluation", "other": "other (loop)"}


def _rc() -> dict:
    rc = dict(sns.axes_style("whitegrid"))
    rc.update(sns.plotting_context("notebook", font_scale=0.85))
    rc.update({"figure.dpi": DPI, "savefig.dpi": DPI, "axes.titleweight": "bold",
               "legend.frameon": False, "font.family": ["DejaVu Sans"]})
    return rc


def text(value: object, limit: int = 48) -> str:
    """Safe chart text: matplotlib's mathtext ``$`` escaped, long names shortened."""
    s = str(value).replace("\n", " ")
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return s.replace("$", r"\$")


def _figure(height: float, width: float = WIDTH) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, facecolor="white")
    return buffer.getvalue()


def placeholder(title: str, why: str) -> bytes:
    """A small PNG saying a chart has no data and why (for --figures-dir)."""
    with mpl.rc_context(_rc()):
        fig = _figure(1.2, 8.0)
        fig.text(0.5, 0.62, text(title, 90), ha="center", va="center", weight="bold")
        fig.text(0.5, 0.3, text(f"no data: {why}", 110), ha="center", va="center")
        return _png(fig)


def _series(frame, keys: list[str], multi_env: bool) -> list[str]:
    """Label of each row: the values of ``keys``, with the env in front when there are
    several environments."""
    columns = (["env"] if multi_env else []) + keys
    return [" · ".join(str(v) for v in row) for row in frame[columns].itertuples(index=False)]


def _palette(labels) -> dict[str, tuple]:
    labels = list(dict.fromkeys(labels))
    colors = sns.color_palette("colorblind", max(len(labels), 1))
    if len(labels) > 10:
        colors = sns.color_palette("husl", len(labels))
    return dict(zip(labels, colors, strict=True))


def _log2_batch_axis(ax, batch_sizes) -> None:
    ax.set_xscale("log", base=2)
    ticks = sorted({int(b) for b in batch_sizes})
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{int(v)}"))
    if len(ticks) > 8:
        ax.tick_params(axis="x", labelrotation=45)
    ax.set_xlabel("batch size (samples, log₂ scale)")


def _legend_below(fig: Figure, handles, labels, ncol: int) -> None:
    fig.legend(handles, labels, loc="outside lower center", ncols=max(1, min(ncol, 4)))


def phase_bars(summary) -> bytes | None:
    """Time per epoch split into phases, per (env,) device and loader, at the blog's
    settings: absolute seconds on the left, share of the epoch on the right."""
    cells, _ = blog_cells(summary)
    phase_cols = [f"{p}_s" for p in schema.PHASES]
    cells = cells.dropna(subset=[*phase_cols, "epochs", "total_s"])
    if cells.empty:
        return None
    cells = cells.assign(**{p: cells[f"{p}_s"] / cells["epochs"] for p in schema.PHASES})
    cells = cells.assign(other=(cells["total_s"] / cells["epochs"]
                                - cells[list(schema.PHASES)].sum(axis=1)).clip(lower=0))
    phases = [*schema.PHASES, "other"]
    multi = cells["env"].nunique() > 1
    table = cells.groupby(["env", "device", "loader"], sort=True)[phases].median().reset_index()
    labels = _series(table, ["device", "loader"], multi)
    values = table[phases].to_numpy(dtype=float)
    shares = values / values.sum(axis=1, keepdims=True) * 100.0
    colors = sns.color_palette("colorblind", len(phases))
    with mpl.rc_context(_rc()):
        fig = _figure(1.6 + 0.42 * len(labels))
        left, right = fig.subplots(1, 2, sharey=True)
        y = np.arange(len(labels))
        for ax, data in ((left, values), (right, shares)):
            base = np.zeros(len(labels))
            for i, phase in enumerate(phases):
                ax.barh(y, data[:, i], left=base, color=colors[i], height=0.65,
                        label=PHASE_LABELS[phase])
                base += data[:, i]
        totals = values.sum(axis=1)
        for yi, total in zip(y, totals, strict=True):
            left.text(total, yi, f" {total:.3g} s", va="center", fontsize=8)
        left.set_xlim(0, totals.max() * 1.18)
        left.set_yticks(y, [text(s) for s in labels])
        left.invert_yaxis()
        left.set_xlabel("time per epoch (s)")
        left.set_title("Seconds per epoch by phase")
        right.set_xlim(0, 100)
        right.set_xlabel("share of the epoch (%)")
        right.set_title("Share of the epoch by phase")
        handles, names = left.get_legend_handles_labels()
        _legend_below(fig, handles, names, len(phases))
        fig.legends[0].set_ncols(len(phases))
        return _png(fig)


def _sweep(summary):
    ok = summary[(summary["experiment"] == "sweep") & (summary["status"] == "ok")]
    return ok.dropna(subset=["samples_per_s", "batch_size"])


def _grid(fig: Figure, rows: list, cols: list, *, sharey: bool = True):
    """A rows x cols grid of axes (always 2-D)."""
    return fig.subplots(len(rows), len(cols), sharex=True, sharey=sharey, squeeze=False)


def _plain(value: float, _=None) -> str:
    """Tick label of a count: 500, 2k, 15k, 1.2M."""
    if value >= 1e6:
        return f"{value / 1e6:g}M"
    if value >= 1e3:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


def _throughput_axis(ax, values) -> bool:
    """A log y axis with plain 1-2-5 labels when the values span more than a factor of 10,
    else a linear axis from 0; returns whether it is logarithmic."""
    finite = values[np.isfinite(values) & (values > 0)]
    if finite.empty or finite.max() / finite.min() <= 10:
        # every panel shares this axis: the limits come from all values, not this panel's
        ax.set_ylim(0, (finite.max() if not finite.empty else 1.0) * 1.08)
        ax.yaxis.set_major_formatter(FuncFormatter(_plain))
        return False
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    return True


def throughput(summary) -> bytes | None:
    """Training samples/s vs batch size (log₂), one line per device and precision, one panel
    per loader (and environment); the band is the min-max over repeats."""
    cells = _sweep(summary)
    if cells.empty:
        return None
    envs = sorted(cells["env"].unique())
    loaders = sorted(cells["loader"].unique())
    cells = cells.assign(series=cells["device"] + " " + cells["precision"])
    colors = _palette(sorted(cells["series"].unique()))
    with mpl.rc_context(_rc()):
        fig = _figure(1.2 + 3.3 * len(envs))
        axes = _grid(fig, envs, loaders)
        for r, env in enumerate(envs):
            for c, loader in enumerate(loaders):
                ax = axes[r][c]
                part = cells[(cells["env"] == env) & (cells["loader"] == loader)]
                for series, group in part.groupby("series", sort=True):
                    g = group.groupby("batch_size")["samples_per_s"].agg(
                        ["median", "min", "max"]).sort_index()
                    ax.plot(g.index, g["median"], marker="o", ms=4, color=colors[series],
                            label=series)
                    ax.fill_between(g.index, g["min"], g["max"], color=colors[series],
                                    alpha=0.18, lw=0)
                log = _throughput_axis(ax, cells["samples_per_s"])
                _log2_batch_axis(ax, cells["batch_size"])
                title = f"{loader} loader" + (f" — {env}" if len(envs) > 1 else "")
                ax.set_title(text(title, 70))
                if c == 0:
                    ax.set_ylabel("training throughput\n(samples/s"
                                  + (", log scale)" if log else ")"))
        handles = [Line2D([], [], color=colors[s], marker="o", label=s)
                   for s in colors]
        _legend_below(fig, handles, list(colors), len(colors))
        return _png(fig)


def speedup(summary) -> bytes | None:
    """GPU samples/s ÷ CPU fp32 samples/s at the same batch size and loader, per GPU
    precision, with the bootstrap 95 % interval of the ratio of medians as a band."""
    cells = _sweep(summary)
    cpu = cells[(cells["device"] == "cpu") & (cells["precision"] == "fp32")]
    gpu = cells[cells["device"] == "cuda"]
    if cpu.empty or gpu.empty:
        return None
    rows = []
    for (env, loader, precision, batch), group in gpu.groupby(
            ["env", "loader", "precision", "batch_size"], sort=True):
        base = cpu[(cpu["env"] == env) & (cpu["loader"] == loader)
                   & (cpu["batch_size"] == batch)]["samples_per_s"]
        est = stats.ratio_ci(group["samples_per_s"], base, n_boot=2000)
        if est is not None:
            rows.append((env, loader, precision, batch, est.value,
                         est.low if est.has_interval else est.value,
                         est.high if est.has_interval else est.value))
    if not rows:
        return None
    import pandas as pd

    table = pd.DataFrame(rows, columns=["env", "loader", "precision", "batch_size", "ratio",
                                       "low", "high"])
    envs = sorted(table["env"].unique())
    loaders = sorted(table["loader"].unique())
    colors = _palette(sorted(table["precision"].unique()))
    with mpl.rc_context(_rc()):
        fig = _figure(1.2 + 3.2 * len(envs))
        axes = _grid(fig, envs, loaders, sharey=False)
        for r, env in enumerate(envs):
            for c, loader in enumerate(loaders):
                ax = axes[r][c]
                part = table[(table["env"] == env) & (table["loader"] == loader)]
                for precision, g in part.groupby("precision", sort=True):
                    g = g.sort_values("batch_size")
                    ax.plot(g["batch_size"], g["ratio"], marker="o", ms=4,
                            color=colors[precision], label=f"cuda {precision}")
                    ax.fill_between(g["batch_size"], g["low"], g["high"],
                                    color=colors[precision], alpha=0.2, lw=0)
                ax.axhline(1.0, color="0.3", lw=1, ls="--")
                _log2_batch_axis(ax, table["batch_size"])
                ax.set_ylim(bottom=0)
                title = f"{loader} loader" + (f" — {env}" if len(envs) > 1 else "")
                ax.set_title(text(title, 70))
                if c == 0:
                    ax.set_ylabel("speed-up: GPU ÷ CPU fp32\n(× samples/s)")
        handles = [Line2D([], [], color=colors[p], marker="o",
                                           label=f"cuda {p}") for p in colors]
        handles.append(Line2D([], [], color="0.3", ls="--",
                                               label="1× (no speed-up)"))
        _legend_below(fig, handles, [h.get_label() for h in handles], len(handles))
        return _png(fig)


def precision(summary) -> bytes | None:
    """Throughput of each precision relative to fp32 on the same device, loader and batch
    size, one panel per device (and environment)."""
    cells = _sweep(summary)
    med = cells.groupby(["env", "device", "loader", "precision", "batch_size"])[
        "samples_per_s"].median().reset_index()
    base = med[med["precision"] == "fp32"].drop(columns="precision").rename(
        columns={"samples_per_s": "fp32"})
    rel = med[med["precision"] != "fp32"].merge(base, on=["env", "device", "loader",
                                                          "batch_size"])
    if rel.empty:
        return None
    rel = rel.assign(ratio=rel["samples_per_s"] / rel["fp32"])
    envs = sorted(rel["env"].unique())
    devices = sorted(rel["device"].unique())
    colors = _palette(sorted(rel["precision"].unique()))
    styles = {loader: style for loader, style in zip(
        sorted(rel["loader"].unique()), ["-", "--", ":", "-."], strict=False)}
    with mpl.rc_context(_rc()):
        fig = _figure(1.3 + 3.0 * len(envs))
        axes = _grid(fig, envs, devices)
        for r, env in enumerate(envs):
            for c, device in enumerate(devices):
                ax = axes[r][c]
                part = rel[(rel["env"] == env) & (rel["device"] == device)]
                for (prec, loader), g in part.groupby(["precision", "loader"], sort=True):
                    g = g.sort_values("batch_size")
                    ax.plot(g["batch_size"], g["ratio"], marker="o", ms=4, color=colors[prec],
                            ls=styles[loader])
                ax.axhline(1.0, color="0.55", lw=3, alpha=0.6)
                _log2_batch_axis(ax, rel["batch_size"])
                title = f"{device}" + (f" — {env}" if len(envs) > 1 else "")
                ax.set_title(text(title, 70))
                if c == 0:
                    ax.set_ylabel("throughput relative to fp32\n(× fp32 samples/s)")
        handles = [Line2D([], [], color=colors[p], marker="o", label=p)
                   for p in colors]
        handles += [Line2D([], [], color="0.3", ls=s, label=f"{loader} loader")
                    for loader, s in styles.items()]
        handles.append(Line2D([], [], color="0.55", lw=3, alpha=0.6, label="fp32 (= 1×)"))
        _legend_below(fig, handles, [h.get_label() for h in handles], len(handles))
        return _png(fig)


def _ok_rows(rows, summary):
    """``rows`` of cells whose status is ok in ``summary`` (all rows when it is None)."""
    if summary is None:
        return rows
    ok = summary.loc[summary["status"] == "ok", ["env", "experiment", "cell"]]
    return rows.merge(ok, on=["env", "experiment", "cell"], how="inner")


def convergence(epochs, summary=None) -> bytes | None:
    """Test loss and test accuracy per epoch of the ok convergence runs (all runs without
    ``summary``), per (env,) device and loader: median over repeats, band = min-max."""
    rows = _ok_rows(epochs[epochs["experiment"] == "convergence"], summary).dropna(
        subset=["epoch", "test_loss", "test_acc"])
    if rows.empty:
        return None
    multi = rows["env"].nunique() > 1
    rows = rows.assign(series=_series(rows, ["device", "loader"], multi))
    colors = _palette(sorted(rows["series"].unique()))
    with mpl.rc_context(_rc()):
        fig = _figure(4.4)
        loss_ax, acc_ax = fig.subplots(1, 2)
        for series, group in rows.groupby("series", sort=True):
            agg = group.groupby("epoch")[["test_loss", "test_acc"]].agg(["median", "min",
                                                                         "max"])
            for ax, col in ((loss_ax, "test_loss"), (acc_ax, "test_acc")):
                ax.plot(agg.index, agg[(col, "median")], marker="o", ms=3.5,
                        color=colors[series], label=text(series))
                ax.fill_between(agg.index, agg[(col, "min")], agg[(col, "max")],
                                color=colors[series], alpha=0.18, lw=0)
        epochs_seen = sorted(int(e) for e in rows["epoch"].unique())
        for ax in (loss_ax, acc_ax):
            ax.set_xlabel("epoch (1-based)")
            step = max(1, len(epochs_seen) // 12)
            ax.set_xticks(epochs_seen[::step])
        loss_ax.set_ylabel("test loss (mean cross-entropy, nats)")
        loss_ax.set_title("Test loss")
        acc_ax.set_ylabel("test accuracy (%)")
        acc_ax.set_title("Test accuracy")
        handles, labels = loss_ax.get_legend_handles_labels()
        _legend_below(fig, handles, labels, len(labels))
        return _png(fig)


def resources(res, summary=None) -> bytes | None:
    """Process CPU %, RSS and GPU utilisation over time of one repeat (the lowest) of each
    ok convergence run (all runs without ``summary``), one column per device."""
    rows = _ok_rows(res[res["experiment"] == "convergence"], summary).dropna(subset=["t_s"])
    if rows.empty:
        return None
    first = rows.groupby(["env", "device", "loader"])["repeat"].transform("min")
    rows = rows[rows["repeat"] == first]
    multi = rows["env"].nunique() > 1
    rows = rows.assign(series=_series(rows, ["device", "loader"], multi))
    colors = _palette(sorted(rows["series"].unique()))
    metrics = [("proc_cpu_pct", "process CPU\n(%, 100 = one core)"),
               ("rss_mb", "resident memory\n(MiB)")]
    if rows["gpu_util_pct"].notna().any():
        metrics.append(("gpu_util_pct", "GPU utilisation\n(%)"))
    devices = sorted(rows["device"].unique())
    with mpl.rc_context(_rc()):
        fig = _figure(1.0 + 2.1 * len(metrics))
        axes = fig.subplots(len(metrics), len(devices), sharex="col", squeeze=False)
        for c, device in enumerate(devices):
            part = rows[rows["device"] == device]
            for r, (col, label) in enumerate(metrics):
                ax = axes[r][c]
                for series, g in part.groupby("series", sort=True):
                    g = g.dropna(subset=[col]).sort_values("t_s")
                    if len(g) > MAX_POINTS:  # thin long series: the chart is 500 px wide
                        g = g.iloc[:: len(g) // MAX_POINTS + 1]
                    if not g.empty:
                        ax.plot(g["t_s"], g[col], lw=1.1, color=colors[series],
                                label=text(series))
                if c == 0:
                    ax.set_ylabel(label)
                if r == 0:
                    ax.set_title(f"{device} runs")
                if r == len(metrics) - 1:
                    ax.set_xlabel("time since the cell started (s)")
                if col == "gpu_util_pct":
                    ax.set_ylim(0, 105)
                else:
                    ax.set_ylim(bottom=0)
        handles = [Line2D([], [], color=colors[s], label=text(s))
                   for s in colors]
        _legend_below(fig, handles, [h.get_label() for h in handles], len(handles))
        return _png(fig)


_SEVERITY = {"ok": 0, "unavailable": 1, "oom": 2, "failed": 3}


def status_heatmap(summary) -> bytes | None:
    """Every cell's status: one row per (env,) experiment, device, precision and loader, one
    column per batch size; the colour is the worst status over repeats, the text (where not
    every repeat is ok) the number of ok repeats out of all."""
    from matplotlib.colors import ListedColormap

    if summary.empty:
        return None
    multi = summary["env"].nunique() > 1
    frame = summary.assign(
        row=_series(summary, ["experiment", "device", "precision", "loader"], multi),
        severity=summary["status"].map(_SEVERITY).fillna(3),
        is_ok=(summary["status"] == "ok").astype(int),
        batch=summary["batch_size"].fillna(-1).astype(int))
    grid = frame.groupby(["row", "batch"]).agg(severity=("severity", "max"),
                                               ok=("is_ok", "sum"), n=("is_ok", "size"))
    row_names = sorted(frame["row"].unique())
    batches = sorted(frame["batch"].unique())
    values = np.full((len(row_names), len(batches)), np.nan)
    with mpl.rc_context(_rc()):
        fig = _figure(1.6 + 0.3 * len(row_names),
                      width=min(WIDTH, max(7.5, 4.5 + 0.75 * len(batches))))
        ax = fig.subplots()
        cmap = ListedColormap([STATUS_COLORS[s] for s in _SEVERITY])
        for (row, batch), rec in grid.iterrows():
            i, j = row_names.index(row), batches.index(batch)
            values[i, j] = rec["severity"]
            if rec["ok"] < rec["n"]:
                ax.text(j, i, f"{int(rec['ok'])}/{int(rec['n'])}", ha="center",
                        va="center", fontsize=8, color="black")
        ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=-0.5, vmax=3.5,
                  aspect="auto", interpolation="nearest")
        ax.set_xticks(range(len(batches)), [str(b) if b >= 0 else "?" for b in batches])
        ax.set_yticks(range(len(row_names)), [text(r, 60) for r in row_names])
        ax.set_xlabel("batch size (samples)")
        ax.set_ylabel("")
        ax.grid(False)
        ax.set_xticks(np.arange(-0.5, len(batches)), minor=True)
        ax.set_yticks(np.arange(-0.5, len(row_names)), minor=True)
        ax.grid(which="minor", color="white", lw=1.5)
        ax.tick_params(which="minor", length=0)
        ax.set_title("Status of every cell")
        handles = [Patch(color=STATUS_COLORS[s], label=s) for s in _SEVERITY]
        fig.legend(handles, list(_SEVERITY), loc="outside lower center", ncols=len(handles),
                   title="colour: the worst repeat; text: ok / all repeats where not all are ok",
                   title_fontsize=8.5)
        return _png(fig)


@dataclass(frozen=True)
class Chart:
    """A chart of the report: its file name, title, the tables it is drawn from, and the note
    shown when it has no data."""

    key: str
    title: str
    sources: tuple[str, ...]
    draw: Callable
    why_absent: str

    @property
    def filename(self) -> str:
        """File name under --figures-dir."""
        return f"{self.key}.png"

    def render(self, tables) -> bytes | None:
        """PNG bytes of this chart from the aggregated tables, None when it has no data."""
        return self.draw(*(getattr(tables, name) for name in self.sources))


#: Every chart of the report, in order. ``sources``: the tables (attributes of
#: :class:`mnistbench.aggregate.Tables`) passed to its function.
CHARTS = (
    Chart("phases", "Where the time goes: seconds per epoch by phase", ("summary",),
          phase_bars,
          "no ok cells at the blog's settings (convergence, or sweep at batch 128 fp32)"),
    Chart("throughput", "Throughput vs batch size", ("summary",), throughput,
          "no ok cells of the sweep experiment"),
    Chart("speedup", "GPU speed-up vs batch size", ("summary",), speedup,
          "the sweep needs ok cells on both cpu (fp32) and cuda at the same batch size "
          "and loader"),
    Chart("precision", "Precision comparison", ("summary",), precision,
          "the sweep needs ok cells at fp32 and at another precision on the same device"),
    Chart("convergence", "Convergence: test loss and accuracy per epoch",
          ("epochs", "summary"), convergence, "no epoch rows from ok convergence cells"),
    Chart("resources", "Resources over time (convergence runs)", ("resources", "summary"),
          resources, "no resource samples from ok convergence cells"),
    Chart("status", "Status of every cell", ("summary",), status_heatmap, "no cells at all"),
)
