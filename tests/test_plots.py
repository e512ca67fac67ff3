"""Tests of mnistbench.plots: every chart draws from a full study, labels carry units, tick
labels do not overlap, and charts without data return None."""

from __future__ import annotations

import io
import itertools
import re

import numpy as np
import pytest
from fakes import cell_id, make_study
from PIL import Image

from mnistbench import aggregate, plots

UNIT = re.compile(r"\((?:[^()]*)\)")  # "(s)", "(samples/s, log scale)", "(%)"


def _tables(tmp_path, **study):
    make_study(tmp_path / "runs", **study)
    aggregate.aggregate(tmp_path / "runs", tmp_path / "out")
    return aggregate.load_tables(tmp_path / "out")


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """A GPU study with both experiments, every precision and loader, two repeats."""
    return _tables(tmp_path_factory.mktemp("full"), repeats=2, batch_sizes=(32, 256, 4096),
                   convergence_epochs=4)


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
    out = {chart.key: _capture(chart, full) for chart in plots.CHARTS}
    assert all(out.values()), [k for k, v in out.items() if v is None]
    return out


@pytest.fixture(scope="module")
def figures(drawn):
    """The Figure of every chart."""
    return {key: fig for key, (fig, _) in drawn.items()}


def test_every_chart_is_a_readable_png(drawn):
    """Each chart returns a PNG about the report's width and of sensible height."""
    for key, (_, png) in drawn.items():
        assert png[:8] == b"\x89PNG\r\n\x1a\n", key
        width, height = Image.open(io.BytesIO(png)).size
        assert 700 <= width <= 1150 and 150 <= height <= 3000, (key, width, height)


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


def test_cpu_only_study_degrades_gracefully(tmp_path):
    """Without GPU cells the speed-up chart is absent; the others still draw, with every
    point inside its (shared, linear) axes."""
    tables = _tables(tmp_path, devices=("cpu",), repeats=1, batch_sizes=(64, 128),
                     convergence_epochs=2)
    drawn = {c.key: _capture(c, tables) for c in plots.CHARTS}
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
    for chart in plots.CHARTS:
        assert chart.render(empty) is None, chart.key


def test_only_fp32_gives_no_precision_chart(tmp_path):
    """A sweep with fp32 alone has nothing to compare precisions against."""
    tables = _tables(tmp_path, precisions=("fp32",), experiments=("sweep",), repeats=1,
                     batch_sizes=(64, 128))
    assert plots.precision(tables.summary) is None
    assert plots.convergence(tables.epochs) is None
    assert plots.resources(tables.resources) is None
    assert plots.phase_bars(tables.summary) is not None  # sweep at batch 128 fp32


def test_hostile_names_are_plain_chart_text(tmp_path):
    """Env names with mathtext dollars or markup draw as plain text instead of failing."""
    tables = _tables(tmp_path, envs=("$\\frac{a}$", "<script>x</script>"), repeats=1,
                     precisions=("fp32", "bf16"), loaders=("resident",), batch_sizes=(128,),
                     convergence_epochs=2)
    for chart in plots.CHARTS:
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
    fig, _ = _capture(plots.CHARTS[5], tables)
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == ["cpu runs"]
    fig, _ = _capture(plots.CHARTS[4], tables)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels and not any("cuda" in label for label in labels)
