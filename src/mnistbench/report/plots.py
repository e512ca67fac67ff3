"""The report's charts, as PNG bytes (embedded as data URIs, and written to --figures-dir).

Every chart function takes the aggregated DataFrames
(:func:`mnistbench.results.aggregate.load_tables`) and returns PNG bytes, or None when its
data are absent; :data:`CHARTS` says, per chart, what is missing then. Figures are
:class:`matplotlib.figure.Figure` objects drawn with the Agg canvas, never registered with
pyplot, so there is no global state and nothing to close (they are freed with their last
reference). Seaborn supplies the style and palette through an ``rc_context``. Every axis
label carries its unit.

The PNGs have :data:`SCALE` (2) pixels per CSS pixel, so they stay sharp on HiDPI screens; the
report shows them at :func:`css_size`. A series keeps one look across every chart: its colour
comes from its device and precision (:func:`series_color`), its line style from its loader
(:data:`LOADER_STYLES`), and, with several environments, its marker from the environment.
"""

from __future__ import annotations

import io
import struct
import zlib
from typing import TypedDict

import matplotlib as mpl
import numpy as np
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator
from matplotlib.typing import LineStyleType

from mnistbench.core import schema
from mnistbench.report.blog import blog_cells
from mnistbench.report.formatting import seconds
from mnistbench.report.selections import CODE, RUN, code_short, loader_name, with_code
from mnistbench.report.selections import phases as phase_medians
from mnistbench.results import stats

SCALE = 2  # PNG pixels per CSS pixel: sharp on HiDPI screens
CSS_DPI = 100  # CSS pixels per inch of a chart as the report shows it
DPI = CSS_DPI * SCALE  # pixels per inch of the PNGs
WIDTH = 11.0  # inches: 1100 CSS px, the report's content width
MAX_POINTS = 400  # points per time-series line (longer series are thinned)
STATUS_COLORS = {"ok": "#4a9c5d", "oom": "#e69f00", "unavailable": "#b8b8b8",
                 "failed": "#d1495b"}
#: Colour of each (device, precision) series, the same in every chart (seaborn's colorblind
#: palette); any other series gets a colour of :data:`SPARE_COLORS` picked by its name.
SERIES_COLORS = {
    ("cpu", "fp32"): "#0173b2", ("cpu", "bf16"): "#56b4e9",
    ("cuda", "fp32"): "#029e73", ("cuda", "tf32"): "#ca9161",
    ("cuda", "bf16"): "#de8f05", ("cuda", "fp16"): "#d55e00",
}
SPARE_COLORS = ("#cc78bc", "#949494", "#fbafe4", "#8c564b", "#7f7f7f", "#17becf")
#: Line style of each loader, the same in every chart.
LOADER_STYLES: dict[str, LineStyleType] = {"dataloader": "-", "resident": "--"}
SPARE_STYLES: tuple[LineStyleType, ...] = (":", "-.")
#: Markers of the environments, in sorted order (cycled).
ENV_MARKERS = ("o", "s", "^", "D", "v", "P")
#: Palette of the phases: unlike the series' colours, so no phase reads as a device.
PHASE_PALETTE = "Set2"
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


#: Colours of a chart's PNG (a median-cut palette): lines, bands and text kept, about a third
#: of the bytes of full colour. 64, not 256: the study of 5 environments (420 cells) drew
#: 1,027 KB of charts with 256 colours, 871 KB with 64 (32: 773 KB, its bands' shades begin
#: to merge), and the page must stay under 1.5 MB.
PALETTE_COLOURS = 64


def _png(fig: Figure) -> bytes:
    from PIL import Image
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, facecolor="white")
    image = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")
    out = io.BytesIO()
    image.quantize(colors=PALETTE_COLOURS, method=Image.Quantize.MEDIANCUT).save(
        out, format="PNG", optimize=True, dpi=(DPI, DPI))
    return out.getvalue()


def placeholder(title: str, why: str) -> bytes:
    """A small PNG saying a chart has no data and why (for --figures-dir)."""
    with mpl.rc_context(_rc()):
        fig = _figure(1.2, 8.0)
        fig.text(0.5, 0.62, text(title, 90), ha="center", va="center", weight="bold")
        fig.text(0.5, 0.3, text(f"no data: {why}", 110), ha="center", va="center")
        return _png(fig)


def series_color(device: str, precision: str) -> str:
    """The colour of a device and precision in every chart (:data:`SERIES_COLORS`)."""
    known = SERIES_COLORS.get((str(device), str(precision)))
    if known is not None:
        return known
    return SPARE_COLORS[zlib.crc32(f"{device} {precision}".encode()) % len(SPARE_COLORS)]


def loader_style(loader: str) -> LineStyleType:
    """The line style of a loader in every chart (:data:`LOADER_STYLES`)."""
    known = LOADER_STYLES.get(str(loader))
    if known is not None:
        return known
    return SPARE_STYLES[zlib.crc32(str(loader).encode()) % len(SPARE_STYLES)]


def _env_markers(envs) -> dict[str, str]:
    return {env: ENV_MARKERS[i % len(ENV_MARKERS)] for i, env in enumerate(sorted(set(envs)))}


def css_size(png: bytes) -> tuple[int, int]:
    """(width, height) in CSS pixels at which the report shows ``png``: its pixel size over
    :data:`SCALE`, read from the PNG header."""
    width, height = struct.unpack(">II", png[16:24])
    return width // SCALE, height // SCALE


def _series(frame, keys: list[str], multi_env: bool) -> list[str]:
    """Label of each row: the values of ``keys``, with the env in front when there are
    several environments."""
    columns = (["env"] if multi_env else []) + keys
    named = [columns.index("loader")] if "loader" in columns else []
    return [" · ".join(loader_name(v) if i in named else str(v) for i, v in enumerate(row))
            for row in frame[columns].itertuples(index=False)]


def _log2_batch_axis(ax, batch_sizes) -> None:
    ax.set_xscale("log", base=2)
    ticks = sorted({int(b) for b in batch_sizes})
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{int(v)}"))
    if len(ticks) > 8:
        ax.tick_params(axis="x", labelrotation=45)
    ax.set_xlabel("batch size (samples, log₂ scale)")


#: Inches a legend entry takes per character of its label, and for its handle and gaps.
LEGEND_CHAR_IN = 0.072
LEGEND_ENTRY_IN = 0.75


def legend_columns(labels, width_in: float, most: int = 4) -> int:
    """How many columns of ``labels`` fit across ``width_in`` inches (at most ``most``), so
    that the legend stays inside its figure."""
    longest = max((len(str(label)) for label in labels), default=1)
    fits = int(width_in // (LEGEND_CHAR_IN * longest + LEGEND_ENTRY_IN))
    return max(1, min(most, len(labels), fits))


def _legend_below(fig: Figure, handles, labels, ncol: int) -> None:
    width = fig.get_size_inches()[0]
    fig.legend(handles, labels, loc="outside lower center",
               ncols=legend_columns(labels, width, max(1, min(ncol, 4))))


#: The looks of the headline chart's bars: the blog's (another machine) and placeholders.
class BarStyle(TypedDict, total=False):
    """How a bar (and its legend patch) is drawn: matplotlib's keyword arguments."""

    facecolor: str
    edgecolor: str
    hatch: str
    linestyle: LineStyleType


class Look(TypedDict):
    """How a series is drawn in every chart: its colour, line style and marker."""

    color: str
    ls: LineStyleType
    marker: str


BLOG_BAR: BarStyle = {"facecolor": "#f3e6bd", "edgecolor": "#8a6d1f", "hatch": "///"}
PLACEHOLDER_BAR: BarStyle = {"facecolor": "none", "edgecolor": "0.5", "linestyle": "--"}


def headline(summary) -> bytes | None:
    """Seconds per epoch at the blog's settings: the blog's CPU and GPU (hatched: another
    machine), this study's devices for the blog's code as written and this project's best
    (and other settings where they ran), and a dashed placeholder for what was not measured
    (:func:`mnistbench.report.comparison.headline_bars`)."""
    from mnistbench.report.comparison import headline_bars

    if summary.empty:
        return None
    shown, bars = headline_bars(summary)
    top = max(b.seconds for b in bars if b.seconds is not None)
    with mpl.rc_context(_rc()):
        fig = _figure(1.5 + 0.36 * len(bars))
        ax = fig.subplots()
        for y, bar in enumerate(bars):
            if bar.seconds is None:  # the placeholder
                ax.barh(y, 0.4 * top, height=0.62, **PLACEHOLDER_BAR)
            elif bar.whose == "blog":
                ax.barh(y, bar.seconds, height=0.62, **BLOG_BAR)
            else:
                ax.barh(y, bar.seconds, height=0.62, color=series_color(bar.whose, "fp32"))
            end = 0.0 if bar.seconds is None else bar.seconds
            ax.text(end + 0.01 * top, y, text(bar.text, 70), va="center", fontsize=8.5,
                    color="0.35" if bar.seconds is None else "0.1")
        ax.set_yticks(range(len(bars)), [text(b.label, 60) for b in bars])
        ax.invert_yaxis()
        ax.set_xlim(0, top * 1.3)
        ax.set_xlabel("time per epoch at the blog's settings (s)")
        ax.grid(axis="y", visible=False)
        ax.set_title(text("Seconds per epoch: the blog's machine and this study's", 90) + "\n"
                     + text(f"({shown})", 90))
        handles = [Patch(label="the blog, another machine", **BLOG_BAR)]
        for device in ("cpu", "cuda"):
            if any(b.whose == device for b in bars):
                handles.append(Patch(color=series_color(device, "fp32"),
                                     label=f"this study: {'CPU' if device == 'cpu' else 'GPU'}"))
        if any(b.whose == "placeholder" for b in bars):
            handles.append(Patch(label="not measured", **PLACEHOLDER_BAR))
        _legend_below(fig, handles, [h.get_label() for h in handles], len(handles))
        return _png(fig)


def phase_bars(summary) -> bytes | None:
    """Time per epoch split into phases, per (env,) device, loader and kind of code, at the
    blog's settings: absolute seconds on the left, share of the epoch on the right. The
    medians are the phase table's (:func:`mnistbench.report.selections.phases`): a bar's
    label is the table's epoch."""
    summary = summary if CODE in summary.columns else with_code(summary)
    cells, _ = blog_cells(summary)
    found = [(key, p, code_short(group)) for key, group in cells.groupby(list(RUN), sort=True)
             if (p := phase_medians(group)) is not None]
    if not found:
        return None
    phases = [*schema.PHASES, "other"]
    multi = len({key[0] for key, _, _ in found}) > 1
    labels = [" · ".join(([key[0]] if multi else []) + [key[1], loader_name(key[2]), code])
              for key, _, code in found]
    values = np.array([[p[k] for k in phases] for _, p, _ in found], dtype=float)
    epochs = [p["epoch"] for _, p, _ in found]
    shares = values / values.sum(axis=1, keepdims=True) * 100.0
    colors = sns.color_palette(PHASE_PALETTE, len(phases))
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
        for yi, total, epoch in zip(y, totals, epochs, strict=True):
            left.text(total, yi, f" {seconds(epoch)}", va="center", fontsize=8)
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
        fig.legends[0].set_ncols(legend_columns(names, WIDTH, len(phases)))
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
    colors = {f"{d} {p}": series_color(d, p) for d, p in sorted(
        set(zip(cells["device"], cells["precision"], strict=True)))}
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
                            ls=loader_style(loader), label=series)
                    ax.fill_between(g.index, g["min"], g["max"], color=colors[series],
                                    alpha=0.18, lw=0)
                log = _throughput_axis(ax, cells["samples_per_s"])
                _log2_batch_axis(ax, cells["batch_size"])
                title = loader_name(loader) + (f" — {env}" if len(envs) > 1 else "")
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
    precision, with the interval of the ratio of medians (mnistbench.results.stats) as a band."""
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
        est = stats.ratio_ci(group["samples_per_s"], base)
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
    colors = {p: series_color("cuda", p) for p in sorted(table["precision"].unique())}
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
                title = loader_name(loader) + (f" — {env}" if len(envs) > 1 else "")
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
    colors = {(d, p): series_color(d, p) for d, p in sorted(
        set(zip(rel["device"], rel["precision"], strict=True)))}
    styles = {loader: loader_style(loader) for loader in sorted(rel["loader"].unique())}
    with mpl.rc_context(_rc()):
        fig = _figure(1.3 + 3.0 * len(envs))
        axes = _grid(fig, envs, devices)
        for r, env in enumerate(envs):
            for c, device in enumerate(devices):
                ax = axes[r][c]
                part = rel[(rel["env"] == env) & (rel["device"] == device)]
                for (prec, loader), g in part.groupby(["precision", "loader"], sort=True):
                    g = g.sort_values("batch_size")
                    ax.plot(g["batch_size"], g["ratio"], marker="o", ms=4,
                            color=colors[(device, prec)], ls=styles[loader],
                            label=f"{device} {prec}, {loader_name(loader)}")
                ax.axhline(1.0, color="0.55", lw=3, alpha=0.6)
                _log2_batch_axis(ax, rel["batch_size"])
                title = f"{device}" + (f" — {env}" if len(envs) > 1 else "")
                ax.set_title(text(title, 70))
                if c == 0:
                    ax.set_ylabel("throughput relative to fp32\n(× fp32 samples/s)")
        handles = [Line2D([], [], color=colors[k], marker="o", label=f"{k[0]} {k[1]}")
                   for k in colors]
        handles += [Line2D([], [], color="0.3", ls=s, label=loader_name(loader))
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


def _looks(rows) -> tuple[dict[str, Look], list[Line2D]]:
    """Per series label of ``rows`` (columns env, device, precision, loader, series): its
    colour, line style and marker; and the legend handles, one per series."""
    markers = _env_markers(rows["env"])
    looks: dict[str, Look] = {}
    handles: list[Line2D] = []
    keys = rows[["series", "env", "device", "precision", "loader"]].drop_duplicates("series")
    for series, env, device, prec, loader in sorted(keys.itertuples(index=False, name=None)):
        look: Look = {"color": series_color(device, prec), "ls": loader_style(loader),
                      "marker": markers[env]}
        looks[series] = look
        handles.append(Line2D([], [], label=text(series), **look))
    return looks, handles


def one_env_per_hardware(rows, summary, keys: list[str]):
    """``rows`` (epochs or resource samples), where they draw more than :data:`MAX_SERIES`
    series (``keys``), of one environment per hardware only: of environments whose cells ran
    the same hardware (a machine locally, in a container, as SLURM jobs) the one with the most
    cells; all of them otherwise, or without ``summary``'s hardware column."""
    if (summary is None or "hardware" not in summary.columns
            or len(rows.drop_duplicates(keys)) <= MAX_SERIES):
        return rows
    counts = summary["env"].value_counts()
    machines = summary.dropna(subset=["hardware"]).groupby("env")["hardware"].agg(
        lambda h: tuple(sorted(set(h))))
    kept: dict[tuple, str] = {}
    for env in sorted(set(rows["env"]), key=lambda e: (-int(counts.get(e, 0)), e)):
        kept.setdefault(machines.get(env, (env,)), env)
    return rows[rows["env"].isin(set(kept.values()))]


def convergence(epochs, summary=None) -> bytes | None:
    """Test loss and test accuracy per epoch of the ok convergence runs (all runs without
    ``summary``), per (env,) device and loader: median over repeats, band = min-max. With a
    single epoch, points with min-max error bars (a line through one point says nothing)."""
    rows = _ok_rows(epochs[epochs["experiment"] == "convergence"], summary).dropna(
        subset=["epoch", "test_loss", "test_acc"])
    rows = one_env_per_hardware(rows, summary, ["env", "device", "precision", "loader"])
    if rows.empty:
        return None
    multi = rows["env"].nunique() > 1
    rows = rows.assign(series=_series(rows, ["device", "precision", "loader"], multi))
    looks, handles = _looks(rows)
    epochs_seen = sorted(int(e) for e in rows["epoch"].unique())
    single = len(epochs_seen) == 1
    with mpl.rc_context(_rc()):
        fig = _figure(4.4)
        loss_ax, acc_ax = fig.subplots(1, 2)
        n_series = len(looks)
        for index, (series, group) in enumerate(rows.groupby("series", sort=True)):
            agg = group.groupby("epoch")[["test_loss", "test_acc"]].agg(["median", "min",
                                                                         "max"])
            look = looks[series]
            for ax, col in ((loss_ax, "test_loss"), (acc_ax, "test_acc")):
                med, low, high = (agg[(col, k)].to_numpy(dtype=float)
                                  for k in ("median", "min", "max"))
                if single:  # side by side around the epoch, each with its min-max bar
                    x = agg.index.to_numpy(dtype=float) + (
                        0.0 if n_series == 1 else 0.3 * (index / (n_series - 1) - 0.5))
                    ax.errorbar(x, med, yerr=[med - low, high - med], fmt=look["marker"],
                                ms=5, capsize=4, color=look["color"], label=text(series))
                else:
                    ax.plot(agg.index, med, ms=3.5, label=text(series), **look)
                    ax.fill_between(agg.index, low, high, color=look["color"], alpha=0.18,
                                    lw=0)
        for ax in (loss_ax, acc_ax):
            ax.set_xlabel("epoch (1-based)")
            step = max(1, len(epochs_seen) // 12)
            ax.set_xticks(epochs_seen[::step])
            if single:
                ax.set_xlim(epochs_seen[0] - 0.5, epochs_seen[0] + 0.5)
                ax.margins(y=0.25)
        loss_ax.set_ylabel("test loss (mean cross-entropy, nats)")
        loss_ax.set_title("Test loss" + (" after the only epoch" if single else ""))
        acc_ax.set_ylabel("test accuracy (%)")
        acc_ax.set_title("Test accuracy" + (" after the only epoch" if single else ""))
        _legend_below(fig, handles, [h.get_label() for h in handles], len(handles))
        return _png(fig)


#: Resource columns that are rates over the interval a sample closes (short intervals make
#: them coarse: a 5 ms interval at a stage switch can read 2000 %).
_RATE_COLUMNS = ("proc_cpu_pct", "sys_cpu_pct", "gpu_util_pct", "gpu_power_w")


def trim_series(cell, interval: float | None = None):
    """One cell's resource samples as the chart draws them: sorted by time, the ``done``
    stage (the sampler's last row after training, which drops to 0) left out, and samples
    closing less than half an interval (taken at a stage switch, whose rates spike) merged,
    time-weighted, into their neighbours, the way the summary's peaks are computed."""
    cell = cell.sort_values("t_s")
    cell = cell[cell["stage"].astype(str) != "done"] if "stage" in cell else cell
    t = cell["t_s"].to_numpy(dtype=float)
    if t.size < 3:
        return cell
    dt = np.diff(t, prepend=np.nan)
    if interval is None:
        interval = float(np.nanmedian(dt[1:])) if t.size > 1 else 0.0
    if not np.isfinite(interval) or interval <= 0:
        return cell
    rates = [c for c in _RATE_COLUMNS if c in cell]
    values = cell[rates].to_numpy(dtype=float)
    keep, merged = [], []
    acc = np.zeros(len(rates))
    weight = np.zeros(len(rates))
    acc_dt = 0.0
    for i in range(t.size):
        d = dt[i]
        if not np.isfinite(d) or d <= 0:  # the first row: no interval before it
            keep.append(i)
            merged.append(values[i])
            continue
        ok = np.isfinite(values[i])
        acc[ok] += values[i][ok] * d
        weight[ok] += d
        acc_dt += d
        if acc_dt >= 0.5 * interval:
            keep.append(i)
            merged.append(np.where(weight > 0, acc / np.where(weight > 0, weight, 1), np.nan))
            acc[:] = 0
            weight[:] = 0
            acc_dt = 0.0
    if acc_dt > 0 and len(keep) > 1:  # a short remainder joins the last window
        last = merged[-1]
        prev_dt = t[keep[-1]] - t[keep[-2]]
        ok = np.isfinite(last) & (weight > 0)
        last[ok] = (last[ok] * prev_dt + acc[ok]) / (prev_dt + weight[ok])
    out = cell.iloc[keep].copy()
    out[rates] = np.vstack(merged) if merged else values[:0]
    return out


def resources(res, summary=None) -> bytes | None:
    """Process CPU %, RSS and GPU utilisation over time of one repeat (the lowest, named in
    the legend) of each ok convergence run (all runs without ``summary``), one column per
    device; each series trimmed by :func:`trim_series`."""
    rows = _ok_rows(res[res["experiment"] == "convergence"], summary).dropna(subset=["t_s"])
    rows = one_env_per_hardware(rows, summary, ["env", "device", "precision", "loader"])
    if rows.empty:
        return None
    first = rows.groupby(["env", "device", "loader"])["repeat"].transform("min")
    rows = rows[rows["repeat"] == first]
    multi = rows["env"].nunique() > 1
    rows = rows.assign(series=[f"{label}, repeat {int(r)}" for label, r in zip(
        _series(rows, ["device", "precision", "loader"], multi), rows["repeat"],
        strict=True)])
    import pandas as pd

    rows = pd.concat([trim_series(cell) for _, cell in
                      rows.groupby(["env", "experiment", "cell"], sort=False)])
    looks, handles = _looks(rows)
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
                    g = g.dropna(subset=[col])
                    if len(g) > MAX_POINTS:  # thin long series: the chart is 500 px wide
                        g = g.iloc[:: len(g) // MAX_POINTS + 1]
                    if not g.empty:
                        look = looks[series]
                        ax.plot(g["t_s"], g[col], lw=1.1, color=look["color"], ls=look["ls"],
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
        handles = [Line2D([], [], color=h.get_color(), ls=h.get_linestyle(),
                          label=h.get_label()) for h in handles]
        _legend_below(fig, handles, [h.get_label() for h in handles], len(handles))
        return _png(fig)


def _limit_rows(summary):
    """The rows :func:`against_limit` draws: ok sweep and scale cells with an achieved
    GFLOP/s, each with its share of the measured limit (``share``, %, NaN where none was
    measured), its limit (``limit``, GFLOP/s) and its FLOPs per sample in GFLOP (``gflop``)."""
    from mnistbench.report.selections import SCALE_EXPERIMENT, limit_share, numeric_column

    rows = summary[summary["experiment"].isin(["sweep", SCALE_EXPERIMENT])
                   & (summary["status"] == "ok")]
    rows = rows.assign(achieved=numeric_column(rows, "achieved_gflops"),
                       share=limit_share(rows), limit=numeric_column(rows, "limit_gflops"),
                       gflop=numeric_column(rows, "train_flops_per_sample") / 1e9,
                       width=numeric_column(rows, "width"))
    return rows[np.isfinite(rows["achieved"]) & (rows["achieved"] > 0)]


#: The most lines a chart draws (a phone's legend and eye follow no more).
MAX_SERIES = 8


def fewest_series(rows):
    """``rows`` of at most :data:`MAX_SERIES` lines (env, device, precision, loader) where
    they had more: first data held in memory only (the DataLoader's share of the limit is its
    loading's, not the device's), then fp32 and bf16 only (the precisions every device runs),
    then one environment per hardware (the one with the most cells: the others ran the same
    hardware in a container or as SLURM jobs)."""
    def lines(frame) -> int:
        return len(frame.drop_duplicates(["env", "device", "precision", "loader"]))
    if lines(rows) > MAX_SERIES and (rows["loader"] == "resident").any():
        rows = rows[rows["loader"] == "resident"]
    if lines(rows) > MAX_SERIES and rows["precision"].isin(["fp32", "bf16"]).any():
        rows = rows[rows["precision"].isin(["fp32", "bf16"])]
    if lines(rows) > MAX_SERIES and "hardware" in rows.columns:
        kept = rows.groupby("hardware")["env"].agg(lambda e: e.value_counts().index[0])
        rows = rows[rows["env"].isin(set(kept))]
    return rows


def _efficiency_axis(ax, values, share: bool) -> None:
    """A log y axis with plain 1-2-5 labels over ``values`` (and, for shares, up to the
    limit's 100 %), the same on every panel."""
    values = np.asarray(values, dtype=float)
    finite = values[np.isfinite(values) & (values > 0)]
    low = float(finite.min()) if finite.size else 1.0
    high = float(finite.max()) if finite.size else 10.0
    if share:
        high = max(high, 100.0)
    ax.set_yscale("log")
    ax.set_ylim(low / 1.6, high * 1.6)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(_plain))


def _flops_axis(ax, rows) -> None:
    """The scale panel's x axis: FLOPs per training sample (GFLOP, log scale), a tick at
    each width measured, labelled with its FLOPs and width."""
    ax.set_xscale("log")
    ticks = rows.groupby("width")["gflop"].median().sort_values()
    ax.xaxis.set_major_locator(FixedLocator(ticks.to_numpy(dtype=float)))
    ax.xaxis.set_minor_locator(NullLocator())
    labels = {float(g): f"{g:.3g}\nwidth {int(w) if float(w).is_integer() else w}"
              for w, g in ticks.items()}
    ax.xaxis.set_major_formatter(FuncFormatter(
        lambda v, _: labels.get(float(v), f"{v:.3g}")))
    ax.set_xlim(float(ticks.min()) / 1.6, float(ticks.max()) * 1.6)
    ax.set_xlabel("model FLOPs per training sample (GFLOP, log scale)")


def against_limit(summary) -> bytes | None:
    """Why: each device against its measured limit. The share of the limit (%, log scale;
    the limit at 100 %) of every ok sweep cell against its batch size (left) and of every
    ok scale cell against the model's FLOPs per sample (right), one line per (env,) device,
    precision and loader, median over repeats with the min-max band. Where a plotted cell
    has no measured limit, both panels draw achieved GFLOP/s instead, with each measured
    limit as a dotted line of its series' colour."""
    from mnistbench.report.selections import SCALE_EXPERIMENT

    rows = fewest_series(_limit_rows(summary))
    if rows.empty:
        return None
    share = bool(rows["share"].notna().all())
    value = "share" if share else "achieved"
    multi = rows["env"].nunique() > 1
    rows = rows.assign(series=_series(rows, ["device", "precision", "loader"], multi))
    looks, handles = _looks(rows)
    panels = ((rows[rows["experiment"] == "sweep"].dropna(subset=["batch_size"]),
               "batch_size", "Against batch size (sweep)", "no ok sweep cells"),
              (rows[rows["experiment"] == SCALE_EXPERIMENT].dropna(subset=["gflop",
                                                                          "width"]),
               "gflop", "Against model size (scale)", "no ok cells of the scale experiment"))
    with mpl.rc_context(_rc()):
        fig = _figure(4.6)
        axes = fig.subplots(1, 2, sharey=True)
        for ax, (part, x, title, empty) in zip(axes, panels, strict=True):
            for series, group in part.groupby("series", sort=True):
                g = group.groupby(x)[value].agg(["median", "min", "max"]).sort_index()
                look = looks[series]
                ax.plot(g.index, g["median"], ms=4, label=text(series), **look)
                ax.fill_between(g.index, g["min"], g["max"], color=look["color"],
                                alpha=0.18, lw=0)
            if x == "batch_size":
                _log2_batch_axis(ax, part["batch_size"] if not part.empty else [128])
            elif not part.empty:
                _flops_axis(ax, part)
            else:
                ax.set_xscale("log")
                ax.set_xlabel("model FLOPs per training sample (GFLOP, log scale)")
            if part.empty:
                ax.set_xticks([])
                ax.text(0.5, 0.5, text(empty, 60), transform=ax.transAxes, ha="center",
                        va="center", color="0.35")
            ax.set_title(text(title, 70))
            if share:
                ax.axhline(100.0, color="0.55", lw=2, ls=":")
            else:
                for (device, prec), limit in rows.dropna(subset=["limit"]).groupby(
                        ["device", "precision"])["limit"].median().items():
                    ax.axhline(limit, color=series_color(device, prec), lw=1.2, ls=":")
            _efficiency_axis(ax, rows[value] if share else
                             np.concatenate([rows[value], rows["limit"]]), share)
        axes[0].set_ylabel("share of the measured limit\n(%, log scale)" if share else
                           "achieved training arithmetic\n(GFLOP/s, log scale)")
        if share:
            handles.append(Line2D([], [], color="0.55", lw=2, ls=":",
                                  label="the measured limit (100 %)"))
        elif rows["limit"].notna().any():
            handles.append(Line2D([], [], color="0.55", lw=1.2, ls=":",
                                  label="a measured limit (its series' colour)"))
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
        fig = _figure(1.6 + 0.2 * len(row_names),
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
