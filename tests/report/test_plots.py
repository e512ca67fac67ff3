"""Tests of mnistbench.report.plots: every chart draws from a full study, labels carry units, tick
labels do not overlap, charts without data return None, a series keeps its colour across
charts, PNGs are HiDPI, time series are trimmed and one epoch draws as points with bars."""

from __future__ import annotations

import io
import itertools
import re

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex
from PIL import Image

from mnistbench.report import charts, plots
from mnistbench.results import aggregate
from tests.fakes import cell_id, make_study

UNIT = re.compile(r"\((?:[^()]*)\)")  # "(s)", "(samples/s, log scale)", "(%)"


def _tables(tmp_path, **study):
    make_study(tmp_path / "runs", **study)
    aggregate.aggregate(tmp_path / "runs", tmp_path / "out")
    tables = aggregate.load_tables(tmp_path / "out")
    # as the report passes them: consolidated (read from CSV, a frame has a block per column)
    return aggregate.Tables(*(frame.copy() for frame in (tables.summary, tables.epochs,
                                                         tables.resources)))


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """A GPU study with both experiments, every precision and loader, two repeats."""
    return _tables(tmp_path_factory.mktemp("full"), repeats=2, batch_sizes=(32, 256, 4096),
                   convergence_epochs=4)


def _chart(key):
    """The chart of :data:`mnistbench.report.charts.CHARTS` called ``key``."""
    return next(chart for chart in charts.CHARTS if chart.key == key)


def _capture(chart, tables):
    """(Figure, PNG bytes) of one chart, the Figure captured as it becomes PNG; None when
    the chart has no data."""
    captured = []
    original = plots._png
    plots._png = lambda fig: captured.append(fig) or original(fig)
    try:
        png = chart.render(tables)
    finally:
        plots._png = original
    return None if png is None else (captured[0], png)


@pytest.fixture(scope="module")
def drawn(full):
    """(Figure, PNG bytes) of every chart of the full study."""
    out = {chart.key: _capture(chart, full) for chart in charts.CHARTS}
    assert all(out.values()), [k for k, v in out.items() if v is None]
    return out


@pytest.fixture(scope="module")
def figures(drawn):
    """The Figure of every chart."""
    return {key: fig for key, (fig, _) in drawn.items()}


def test_every_chart_is_a_readable_png(drawn):
    """Each chart returns a PNG of twice the report's width in pixels (HiDPI) and of sensible
    height, and css_size gives the size it is shown at."""
    for key, (_, png) in drawn.items():
        assert png[:8] == b"\x89PNG\r\n\x1a\n", key
        width, height = Image.open(io.BytesIO(png)).size
        assert 1400 <= width <= 2300 and 300 <= height <= 6000, (key, width, height)
        assert plots.css_size(png) == (width // 2, height // 2)
        assert Image.open(io.BytesIO(png)).info["dpi"][0] == pytest.approx(200, abs=1)


def test_every_axis_label_has_a_unit(figures):
    """Every labelled data axis names its unit in parentheses (the status grid's axes are
    categories, its batch-size axis has samples)."""
    for key, fig in figures.items():
        for ax in fig.axes:
            for label in (ax.get_xlabel(), ax.get_ylabel()):
                if label:
                    assert UNIT.search(label), (key, label)
        assert any(ax.get_xlabel() for ax in fig.axes), key


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 - 0.5 and b.x0 < a.x1 - 0.5 and a.y0 < b.y1 - 0.5 and b.y0 < a.y1 - 0.5


def _shown_tick_labels(axis):
    """Tick labels matplotlib actually draws: visible, non-empty, inside the view limits."""
    low, high = sorted(axis.get_view_interval())
    span = (high - low) * 1e-9
    return [tick.label1 for tick in axis.get_major_ticks()
            if tick.label1.get_visible() and tick.label1.get_text()
            and low - span <= tick.get_loc() <= high + span]


def test_tick_labels_and_axis_labels_do_not_overlap(figures):
    """No two drawn tick labels of an axis overlap, axis labels clear their tick labels, and
    every drawn text lies inside the figure."""
    for key, fig in figures.items():
        renderer = fig.canvas.get_renderer()
        fig.draw(renderer)
        texts = []
        for ax in fig.axes:
            texts += [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
            for axis in (ax.xaxis, ax.yaxis):
                labels = _shown_tick_labels(axis)
                texts += labels
                boxes = [t.get_window_extent(renderer) for t in labels]
                for a, b in itertools.combinations(boxes, 2):
                    assert not _overlap(a, b), (key, "tick labels overlap")
                if axis.label.get_text():
                    box = axis.label.get_window_extent(renderer)
                    assert not any(_overlap(box, b) for b in boxes), (key, axis.label.get_text())
        for legend in fig.legends:
            texts += legend.get_texts()
        for text in texts:
            if text.get_visible() and text.get_text():
                box = text.get_window_extent(renderer)
                assert box.x0 >= -1 and box.x1 <= fig.bbox.x1 + 1, (key, text.get_text())
                assert box.y0 >= -1 and box.y1 <= fig.bbox.y1 + 1, (key, text.get_text())


def test_charts_leave_no_pyplot_figures(full):
    """Charts are drawn without pyplot, so nothing accumulates in its figure registry."""
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    plots.status_heatmap(full.summary)
    assert plt.get_fignums() == before


def _assert_data_inside_axes(key, fig):
    for ax in fig.axes:
        (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
        for line in ax.get_lines():
            if line.get_transform() != ax.transData:  # axhline: x in axes coordinates
                continue
            xs = np.asarray(line.get_xdata(), dtype=float)
            ys = np.asarray(line.get_ydata(), dtype=float)
            ok = np.isfinite(xs) & np.isfinite(ys)
            assert np.all((xs[ok] >= x0) & (xs[ok] <= x1)), (key, line.get_label(), "x")
            assert np.all((ys[ok] >= y0) & (ys[ok] <= y1)), (key, line.get_label(), "y")


def test_every_data_point_is_inside_its_axes(figures):
    """No line of the full study's charts runs outside the visible limits."""
    for key, fig in figures.items():
        _assert_data_inside_axes(key, fig)


@pytest.mark.slow
def test_cpu_only_study_degrades_gracefully(tmp_path):
    """Without GPU cells the speed-up chart is absent; the others still draw, with every
    point inside its (shared, linear) axes."""
    tables = _tables(tmp_path, devices=("cpu",), repeats=1, batch_sizes=(64, 128),
                     convergence_epochs=2)
    drawn = {c.key: _capture(c, tables) for c in charts.CHARTS}
    assert drawn["speedup"] is None
    for key in ("phases", "throughput", "precision", "convergence", "resources", "status"):
        assert drawn[key] is not None, key
        _assert_data_inside_axes(key, drawn[key][0])


def test_every_gpu_cell_unavailable(tmp_path):
    """A machine without a GPU: no speed-up chart, and the status grid still draws."""
    tables = _tables(tmp_path, gpu=False, repeats=1, batch_sizes=(64,), convergence_epochs=2)
    assert plots.speedup(tables.summary) is None
    assert plots.status_heatmap(tables.summary) is not None


def test_empty_tables_give_none(full):
    """Every chart returns None for tables without rows."""
    empty = aggregate.Tables(full.summary.iloc[0:0], full.epochs.iloc[0:0],
                             full.resources.iloc[0:0])
    for chart in charts.CHARTS:
        assert chart.render(empty) is None, chart.key


def test_only_fp32_gives_no_precision_chart(tmp_path):
    """A sweep with fp32 alone has nothing to compare precisions against."""
    tables = _tables(tmp_path, precisions=("fp32",), experiments=("sweep",), repeats=1,
                     batch_sizes=(64, 128))
    assert plots.precision(tables.summary) is None
    assert plots.convergence(tables.epochs) is None
    assert plots.resources(tables.resources) is None
    assert plots.phase_bars(tables.summary) is not None  # sweep at batch 128 fp32


@pytest.mark.slow
def test_hostile_names_are_plain_chart_text(tmp_path):
    """Env names with mathtext dollars or markup draw as plain text instead of failing."""
    tables = _tables(tmp_path, envs=("$\\frac{a}$", "<script>x</script>"), repeats=1,
                     precisions=("fp32", "bf16"), loaders=("resident",), batch_sizes=(128,),
                     convergence_epochs=2)
    for chart in charts.CHARTS:
        assert chart.render(tables) is not None, chart.key
    assert plots.text("a$b") == r"a\$b"
    assert len(plots.text("x" * 100)) == 48


def test_placeholder_is_a_png():
    """The "no data" placeholder for --figures-dir is a small PNG."""
    png = plots.placeholder("Throughput", "no ok cells of the sweep experiment")
    assert png[:4] == b"\x89PNG"
    assert Image.open(io.BytesIO(png)).size[0] >= 600


def test_time_series_leave_out_cells_that_did_not_run(tmp_path):
    """Resource samples of failed cells (written until the crash) do not become a panel."""
    failed = {cell_id("cuda", "fp32", loader, 128, 0): ("failed", "RuntimeError: boom")
              for loader in ("dataloader", "resident")}
    tables = _tables(tmp_path, experiments=("convergence",), repeats=1, convergence_epochs=2,
                     overrides=failed)
    assert set(tables.resources["device"]) == {"cpu", "cuda"}  # failed cells sampled too
    fig, _ = _capture(_chart("resources"), tables)
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == ["cpu runs"]
    fig, _ = _capture(_chart("convergence"), tables)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels and not any("cuda" in label for label in labels)


def _line_colors(fig) -> dict[str, str]:
    """label -> colour (hex) of every labelled line of a figure, legends included."""
    from matplotlib.colors import to_hex

    out = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            if not line.get_label().startswith("_"):
                out.setdefault(line.get_label(), to_hex(line.get_color()))
    for legend in fig.legends:
        for handle, text in zip(legend.legend_handles, legend.get_texts(), strict=True):
            if hasattr(handle, "get_color"):
                out.setdefault(text.get_text(), to_hex(handle.get_color()))
    return out


def test_a_series_keeps_its_colour_across_charts(figures):
    """cuda fp32 (and every other device and precision) has one colour in the throughput,
    speed-up, precision, convergence and resource charts."""
    seen: dict[str, set[str]] = {}
    for key in ("throughput", "speedup", "precision", "convergence", "resources"):
        for label, color in _line_colors(figures[key]).items():
            match = re.match(r"(cpu|cuda)[ ·]+(fp32|tf32|bf16|fp16)", label)
            if match:
                seen.setdefault(f"{match[1]} {match[2]}", set()).add(color)
    assert {"cpu fp32", "cuda fp32", "cuda bf16", "cpu bf16"} <= set(seen)
    for series, colors in seen.items():
        device, precision = series.split()
        assert colors == {plots.series_color(device, precision)}, (series, colors)
    assert len({plots.series_color(*k) for k in plots.SERIES_COLORS}) == len(
        plots.SERIES_COLORS)


def test_resource_series_are_trimmed_and_name_their_repeat(full):
    """A stage-switch spike (2118.9 % over 5 ms) and the closing drop to 0 stay out of the
    resource chart, whose legend names the repeat drawn."""
    res = full.resources
    cell = res[(res["experiment"] == "convergence") & (res["device"] == "cpu")
               & (res["repeat"] == 0)]
    last = cell[cell["stage"] == "train"].sort_values("t_s").iloc[-1]
    spike = last.copy()
    spike["t_s"] = last["t_s"] + 0.005
    spike["proc_cpu_pct"] = 2118.9
    drop = last.copy()
    drop["t_s"], drop["stage"], drop["proc_cpu_pct"] = last["t_s"] + 0.5, "done", 0.0
    tables = aggregate.Tables(full.summary, full.epochs,
                              pd.concat([res, pd.DataFrame([spike, drop])], ignore_index=True))
    fig, _ = _capture(_chart("resources"), tables)
    cpu_ax = fig.axes[0]
    ys = np.concatenate([line.get_ydata() for line in cpu_ax.get_lines()])
    assert np.nanmax(ys) < 1500 and cpu_ax.get_ylim()[1] < 1500
    trimmed = plots.trim_series(pd.concat([cell, pd.DataFrame([spike, drop])]))
    assert "done" not in set(trimmed["stage"]) and trimmed["proc_cpu_pct"].max() < 1500
    assert len(trimmed) == len(cell[cell["stage"] != "done"])  # the spike merged, not added
    labels = fig.legends[0].get_texts()
    assert labels and all(", repeat 0" in t.get_text() for t in labels)


def test_one_epoch_draws_points_with_bars(tmp_path):
    """With a single epoch the convergence chart draws each series as a point with min-max
    error bars, not a line with a band."""
    from matplotlib.collections import PolyCollection
    from matplotlib.container import ErrorbarContainer

    tables = _tables(tmp_path, experiments=("convergence",), repeats=2, convergence_epochs=1)
    fig, _ = _capture(_chart("convergence"), tables)
    for ax in fig.axes:
        bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
        assert len(bars) == 4  # cpu and cuda x two loaders
        assert not any(isinstance(c, PolyCollection) for c in ax.collections)
    _assert_data_inside_axes("convergence", fig)


def test_legends_name_each_series_once_with_one_look(figures):
    """Every chart's legend lies inside its figure (test_tick_labels_and_axis_labels_do_not_
    overlap) and names each series once, each entry with its own colour and line style, and
    loaders by their names (the DataLoader, data held in memory), never "dataloader loader"."""
    for key, fig in figures.items():
        for legend in fig.legends:
            labels = [t.get_text() for t in legend.get_texts()]
            assert len(labels) == len(set(labels)), (key, labels)
            looks = []
            for handle in legend.legend_handles:
                if hasattr(handle, "get_linestyle") and hasattr(handle, "get_color"):
                    looks.append((to_hex(handle.get_color()), str(handle.get_linestyle()),
                                  str(getattr(handle, "get_marker", lambda: "")())))
                elif hasattr(handle, "get_facecolor"):
                    looks.append((to_hex(handle.get_facecolor()), str(handle.get_hatch()),
                                  str(handle.get_linestyle())))
            assert len(looks) == len(set(looks)), (key, labels)
            assert not any("loader" in label for label in labels), (key, labels)
        for ax in fig.axes:
            assert "loader" not in ax.get_title(), (key, ax.get_title())


def test_headline_chart_sets_the_blog_beside_this_study(tmp_path):
    """The headline chart's bars: the blog's CPU and GPU epochs (hatched, "the blog, another
    machine"), this study's CPU for the blog's code as written (a placeholder where it did
    not run) and this project's best, and a placeholder for the GPU that was not measured."""
    from mnistbench.report import comparison

    tables = _tables(tmp_path, devices=("cpu",), experiments=("convergence",), repeats=2,
                     convergence_epochs=2)
    env, bars = comparison.headline_bars(tables.summary)
    assert env == "alpha"
    assert [(b.whose, b.seconds is None) for b in bars[:2]] == [("blog", False)] * 2
    assert [b.seconds for b in bars[:2]] == [58.7, 5.2]
    labels = {b.label: b for b in bars}
    assert labels["this study, CPU: the blog's code"].whose == "placeholder"  # fakes: tuned
    assert labels["this study, CPU: this project's best"].whose == "cpu"
    assert labels["this study, GPU"].text == "not measured: no GPU in this study"
    fig, png = _capture(_chart("headline"), tables)
    assert png[:4] == b"\x89PNG"
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["the blog, another machine", "this study: CPU", "not measured"]
    hatched = [p for p in fig.axes[0].patches if p.get_hatch()]
    assert len(hatched) == 2
