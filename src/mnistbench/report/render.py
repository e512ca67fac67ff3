"""The published report: one self-contained HTML file (CSS inline, charts as PNG data URIs at
twice the CSS resolution) that opens offline.

This module is the entry: :func:`render_report` (from a results folder), :func:`write_report`
(from tables in memory), :func:`build_context` and :class:`ReportError`. The page is built by
section: each module of :mod:`mnistbench.report.sections` computes its part of the template's
context from the shared :class:`~mnistbench.report.selections.Inputs`, and each section has
its partial under ``templates/`` that ``templates/report.html.j2`` includes (with
``templates/report.css`` in its ``<style>``).

One autoescaped Jinja2 environment, one render call with a flat, explicit context of
preformatted strings: every value that comes from the results (host names, error messages,
env names) is escaped by Jinja, nothing is marked safe. Every number is computed by the
sections from the aggregated tables (and :mod:`mnistbench.report.blog`'s reference figures);
the templates hold prose only.
"""

from __future__ import annotations

import re
from pathlib import Path

from mnistbench.core import atomic
from mnistbench.report import charts as chart_views
from mnistbench.report.comparison import headline_bars
from mnistbench.report.sections import (
    answer,
    blog_check,
    caveats,
    convergence,
    costs,
    findings,
    gpu,
    headline,
    matrix,
    methodology,
    page,
    phases,
    recommendations,
    resources,
    runtimes,
    threads,
    throughput,
    tips,
    training_time,
    verdict,
    why,
)
from mnistbench.report.selections import Inputs
from mnistbench.results import aggregate, cost

#: The modules that build the context, in the order of the page; each ``context(inputs)``
#: returns its own keys (the charts come from :mod:`mnistbench.report.charts`).
SECTIONS = (page, verdict, caveats, answer, findings, headline, blog_check, training_time,
            phases, throughput, threads, why, convergence, resources, costs, tips,
            recommendations, gpu, matrix, runtimes, methodology)


class ReportError(Exception):
    """The report cannot be rendered; the message names the input and the fix."""


def build_context(tables: aggregate.Tables, model: cost.CostModel, *, command: str | None,
                  results: Path, figures: dict[str, bytes | None] | None = None,
                  checks: dict | None = None) -> dict:
    """The template's flat context: every value preformatted as text (or lists of rows), each
    section's keys from its module. ``figures``: the charts' PNGs (:func:`draw_charts`); None
    renders every chart as not drawn. ``checks``: a publication's checks (the caveats)."""
    inputs = Inputs(tables, model, command=command, results=Path(results), checks=checks)
    context = chart_views.context(figures)
    # the headline chart's alt text carries its numbers (a reader without the image, or a
    # screen reader, gets every bar)
    _, bars = headline_bars(inputs.summary)
    headline = context["chart_headline"]
    headline["alt"] = f"{headline['title']}: " + "; ".join(f"{b.label}: {b.text}" for b in bars)
    for section in SECTIONS:
        part = section.context(inputs)
        clash = context.keys() & part.keys()
        assert not clash, f"{section.__name__} sets {sorted(clash)} again"
        context.update(part)
    return context


def render_html(context: dict) -> str:
    """Render the report template with ``context`` (one environment, one render call)."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(loader=PackageLoader("mnistbench.report", "templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return anchor_headings(env.get_template("report.html.j2").render(**context))


_HEADING = re.compile(r"<(h[234])>(.*?)</\1>", re.S)


def anchor_headings(html: str) -> str:
    """``html`` with an anchor on every heading (h2 to h4) that has no attributes: right before
    it, a link to itself with an ``id`` from the heading's text (unique on the page), its mark
    drawn by the CSS (``a.anchor::after``), so that the heading and the page's text stay as
    they are and any part can be linked to."""
    seen: set[str] = set()

    def one(match: re.Match) -> str:
        inner = match.group(2)
        text = re.sub(r"<[^>]+>|&[a-z#0-9]+;", " ", inner).lower()
        slug = "-".join(re.findall(r"[a-z0-9]+", text))[:60].strip("-") or "section"
        base, n = slug, 2
        while slug in seen:
            slug, n = f"{base}-{n}", n + 1
        seen.add(slug)
        return (f'<a class="anchor" id="h-{slug}" href="#h-{slug}" '
                f'aria-label="link to this heading"></a>{match.group(0)}')

    return _HEADING.sub(one, html)


def draw_charts(tables: aggregate.Tables) -> dict[str, bytes | None]:
    """PNG bytes of every chart of :data:`mnistbench.report.charts.CHARTS` (None: no data)."""
    return chart_views.draw(tables)


def render_report(results: Path, out: Path, *, cost_model_path: Path | None = None,
                  figures_dir: Path | None = None, command: str | None = None,
                  charts: bool = True) -> Path:
    """Render ``results``' aggregated tables into the single HTML file ``out``.

    ``figures_dir``: also write every chart there as ``{key}.png`` (a short "no data" image
    for a chart without data), for the workflow's report registration. ``charts=False``
    draws none (each says it was not drawn): for checks that read only the text. Raises
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
    from mnistbench.report.sections import caveats

    return write_report(tables, out, model=model, results=results, figures_dir=figures_dir,
                        command=command, charts=charts, checks=caveats.read_checks(results))


def write_report(tables: aggregate.Tables, out: Path, *, model: cost.CostModel | None = None,
                 results: Path = Path("results"), figures_dir: Path | None = None,
                 command: str | None = None, charts: bool = True,
                 checks: dict | None = None) -> Path:
    """Render already loaded ``tables`` into ``out`` (and ``figures_dir``): the second half of
    :func:`render_report`, also used on tables built in memory. ``checks``: a publication's
    checks (its manifest's), for the caveats; :func:`render_report` reads them from the
    manifest beside the tables."""
    if figures_dir is not None and not charts:
        raise ValueError("figures_dir needs the charts: pass charts=True")
    out = Path(out)
    if figures_dir is not None:  # before the charts are drawn, and never blamed on --out
        _check_figures_dir(Path(figures_dir))
    model = model or cost.load_model(None)
    # one block per column (as read from CSV) makes every added column slow: consolidate
    tables = aggregate.Tables(tables.summary.copy(), tables.epochs.copy(),
                              tables.resources.copy())
    if tables.summary.empty:
        raise ReportError(f"{Path(results) / aggregate.SUMMARY_CSV} has no cells. Run the "
                          "study and `mnistbench aggregate` again.")
    figures = draw_charts(tables) if charts else None
    html = render_html(build_context(tables, model, command=command, results=Path(results),
                                     figures=figures, checks=checks))
    if figures_dir is not None and figures is not None:  # figures_dir: charts drawn
        try:
            _write_figures(figures, Path(figures_dir))
        except OSError as exc:
            raise ReportError(f"cannot write the charts into {figures_dir}: "
                              f"{exc.strerror or exc}. Pass --figures-dir a folder that can "
                              "be written; the report was not written.") from None
    try:
        atomic.write_text(out, html)
    except OSError as exc:
        raise ReportError(f"cannot write the report to {out}: {exc}. Check that the folder "
                          "is writable, or pass another --out.") from None
    return out


def _check_figures_dir(folder: Path) -> None:
    """:class:`ReportError` naming ``--figures-dir`` when ``folder`` exists but is no folder,
    or lies under a file: the charts could not be written there."""
    for place in (folder, *folder.parents):
        if place.exists() or place.is_symlink():
            if not place.is_dir():
                raise ReportError(f"cannot write the charts into {folder}: {place} is a file, "
                                  "not a folder. Pass --figures-dir a folder (or move that "
                                  "file out of the way); nothing was written.")
            return


def _write_figures(figures: dict[str, bytes | None], folder: Path) -> None:
    """Every chart as ``folder/{key}.png``; a chart without data as a short "no data" PNG."""
    from mnistbench.report import plots

    for chart in chart_views.CHARTS:
        png = figures[chart.key] or plots.placeholder(chart.title, chart.why_absent)
        with atomic.atomic_open(folder / chart.filename, "wb") as handle:
            handle.write(png)
