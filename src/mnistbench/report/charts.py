"""The report's charts as the template shows them: each chart of :data:`CHARTS` (the
registry: key, title, source tables, the :mod:`mnistbench.report.plots` function that draws
it) drawn to PNG (:func:`draw`), then as a view for the
template (:func:`context`): its title, a data URI at twice its CSS size (sharp on HiDPI
screens), or the sentence that says why it has no data, or that it was not drawn (a report
rendered with ``charts=False``, for tests that read only its text)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mnistbench.results import aggregate

#: A function of :mod:`mnistbench.report.plots`: the chart's tables in, PNG bytes out (None:
#: no data).
PlotFunction = Callable[..., bytes | None]


class _Deferred:
    """:mod:`mnistbench.report.plots` as :data:`CHARTS` names it: ``plots.headline`` is a
    function that imports the module (and matplotlib with it) when it is called, and calls the
    module's own; a report rendered without charts never loads matplotlib."""

    def __getattr__(self, name: str) -> PlotFunction:
        if name.startswith("_"):
            raise AttributeError(name)

        def deferred(*tables):
            from mnistbench.report import plots as module

            return getattr(module, name)(*tables)

        deferred.__name__ = deferred.__qualname__ = name
        return deferred


# The type checker reads the plot functions themselves (a chart naming one that does not exist
# is a type error); the interpreter defers them until a chart is drawn.
if TYPE_CHECKING:
    from mnistbench.report import plots
else:
    plots = _Deferred()


@dataclass(frozen=True)
class Chart:
    """A chart of the report: its file name, title, the tables it is drawn from, and the note
    shown when it has no data."""

    key: str
    title: str
    sources: tuple[str, ...]
    draw: PlotFunction  # the function of mnistbench.report.plots that draws it
    why_absent: str
    numbers: str = "the tables of its section"  # where a reader without the image finds them

    @property
    def filename(self) -> str:
        """File name under --figures-dir."""
        return f"{self.key}.png"

    def render(self, tables) -> bytes | None:
        """PNG bytes of this chart from the aggregated tables, None when it has no data
        (matplotlib is imported when a chart is drawn, not with this module: a report rendered
        without charts never loads it)."""
        return self.draw(*(getattr(tables, name).copy() for name in self.sources))


#: Every chart of the report, in order. ``sources``: the tables (attributes of
#: :class:`mnistbench.results.aggregate.Tables`) passed to its function of
#: :mod:`mnistbench.report.plots`.
CHARTS = (
    Chart("headline", "The headline: seconds per epoch, the blog's machine and this study's",
          ("summary",), plots.headline, "no cells at all"),
    Chart("phases", "Where the time goes: seconds per epoch by phase", ("summary",),
          plots.phase_bars,
          "no ok cells at the blog's settings (convergence, or sweep at batch 128 fp32)",
          "the phase table beside it (the same medians)"),
    Chart("throughput", "Throughput vs batch size", ("summary",), plots.throughput,
          "no ok cells of the sweep experiment", "data/summary.csv, the sweep experiment's rows"),
    Chart("speedup", "GPU speed-up vs batch size", ("summary",), plots.speedup,
          "the sweep needs ok cells on both cpu (fp32) and cuda at the same batch size "
          "and loader", "data/summary.csv, the sweep's rows of both devices"),
    Chart("precision", "Precision comparison", ("summary",), plots.precision,
          "the sweep needs ok cells at fp32 and at another precision on the same device",
          "the precision table under the charts"),
    Chart("why", "Why: each device against its measured limit", ("summary",),
          plots.against_limit, "no ok sweep or scale cells with an achieved GFLOP/s",
          "the tables of this section (each device's limit and share of it)"),
    Chart("convergence", "Convergence: test loss and accuracy per epoch",
          ("epochs", "summary"), plots.convergence, "no epoch rows from ok convergence cells",
          "the accuracy table below it, every epoch in data/epochs.csv"),
    Chart("resources", "Resources over time (convergence runs)", ("resources", "summary"),
          plots.resources, "no resource samples from ok convergence cells",
          "the resources table above it, every sample in data/resources.csv"),
    Chart("status", "Status of every cell", ("summary",), plots.status_heatmap, "no cells at all",
          "the matrix's tables below it"),
)


#: What a chart shows in a report rendered without charts.
NOT_DRAWN = "this report was rendered without charts (charts=False)"


def draw(tables: aggregate.Tables) -> dict[str, bytes | None]:
    """PNG bytes of every chart of :data:`CHARTS` (None: no data)."""
    return {chart.key: chart.render(tables) for chart in CHARTS}


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def views(figures: dict[str, bytes | None] | None) -> dict[str, dict]:
    """Per chart: its title, PNG data URI (None without data) with its CSS size (half its
    pixels: sharp on HiDPI screens), the state and sentence shown without an image, alt
    text. ``figures`` None: none was drawn."""
    out = {}
    for chart in CHARTS:
        png = None if figures is None else figures.get(chart.key)
        width, height = _css_size(png) if png else (0, 0)
        out[chart.key] = {
            "title": chart.title,
            "uri": None if png is None else
            "data:image/png;base64," + base64.b64encode(png).decode("ascii"),
            "width": str(width), "height": str(height),
            "state": "not drawn" if figures is None else "no data",
            "why": _sentence(NOT_DRAWN if figures is None else chart.why_absent),
            "alt": f"{chart.title} (its numbers: {chart.numbers})",
        }
    return out


def context(figures: dict[str, bytes | None] | None) -> dict:
    """``chart_KEY`` -> the view of every chart."""
    return {f"chart_{key}": view for key, view in views(figures).items()}


def _css_size(png: bytes) -> tuple[int, int]:
    from mnistbench.report import plots

    return plots.css_size(png)
