"""The report's charts as the template shows them: each chart of
:data:`mnistbench.report.plots.CHARTS` drawn to PNG (:func:`draw`), then as a view for the
template (:func:`context`): its title, a data URI at twice its CSS size (sharp on HiDPI
screens), or the sentence that says why it has no data, or that it was not drawn (a report
rendered with ``charts=False``, for tests that read only its text)."""

from __future__ import annotations

import base64

from mnistbench.results import aggregate

#: What a chart shows in a report rendered without charts.
NOT_DRAWN = "this report was rendered without charts (charts=False)"


def draw(tables: aggregate.Tables) -> dict[str, bytes | None]:
    """PNG bytes of every chart of :data:`mnistbench.report.plots.CHARTS` (None: no data)."""
    from mnistbench.report import plots

    return {chart.key: chart.render(tables) for chart in plots.CHARTS}


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def views(figures: dict[str, bytes | None] | None) -> dict[str, dict]:
    """Per chart: its title, PNG data URI (None without data) with its CSS size (half its
    pixels: sharp on HiDPI screens), the state and sentence shown without an image, alt
    text. ``figures`` None: none was drawn."""
    from mnistbench.report import plots

    out = {}
    for chart in plots.CHARTS:
        png = None if figures is None else figures.get(chart.key)
        width, height = plots.css_size(png) if png else (0, 0)
        out[chart.key] = {
            "title": chart.title,
            "uri": None if png is None else
            "data:image/png;base64," + base64.b64encode(png).decode("ascii"),
            "width": str(width), "height": str(height),
            "state": "not drawn" if figures is None else "no data",
            "why": _sentence(NOT_DRAWN if figures is None else chart.why_absent),
            "alt": chart.title,
        }
    return out


def context(figures: dict[str, bytes | None] | None) -> dict:
    """``chart_KEY`` -> the view of every chart."""
    return {f"chart_{key}": view for key, view in views(figures).items()}
