"""Tests of mnistbench.report.render, the report as a whole: one self-contained HTML file
with its charts (embedded at half their pixels, the same PNGs in --figures-dir), its sections
in order, hostile text escaped, the CLI, the switch that renders without charts, the
templates (one partial per section) and the errors. The sections have their own test
modules: tests/report/test_report_findings.py, test_report_blog_check.py, test_report_sections.py;
the wording: tests/report/test_report_formatting.py."""

from __future__ import annotations

import base64
import csv
import re
import struct
import subprocess
import sys
import textwrap
from importlib import resources
from pathlib import Path

import pytest

from mnistbench import cli, publish
from mnistbench.report import charts, selections
from mnistbench.report import render as report
from mnistbench.results import aggregate, cost
from tests.report.test_report_phone import MAX_PAGE_BYTES
from tests.report.test_report_studies import (
    OPTIONAL_SECTIONS,
    PARTIALS,
    ROOT,
    SECTIONS,
    results_of,
    section_of,
    visible,
)


def test_report_is_one_self_contained_file(full_charts):
    """CSS inline, every chart a PNG data URI, no scripts, no external references."""
    html = full_charts["html"]
    assert html.count("<style>") == 1 and "<link" not in html
    assert "<script" not in html.lower()
    assert html.count('<img src="data:image/png;base64,') == len(charts.CHARTS)
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "url(" not in html


def test_a_study_with_every_chart_weighs_under_the_limit(full_charts):
    """The fake full study with all its charts weighs under 1.5 MB, as the published page
    must (test_report_phone.py): about 0.85 MB, the charts' PNGs in 256 colours; in full
    colour 1.9 MB."""
    size = len(full_charts["html"].encode())
    assert size < MAX_PAGE_BYTES, size


def test_charts_are_shown_at_half_their_pixels_for_hidpi_screens(full_charts):
    """Every chart's width and height attributes are half its PNG's pixels, so a 2x screen
    gets one pixel per device pixel."""
    images = re.findall(r'<img src="data:image/png;base64,([^"]+)" width="(\d+)" '
                        r'height="(\d+)"', full_charts["html"])
    assert len(images) == len(charts.CHARTS)
    for data, width, height in images:
        png = base64.b64decode(data)
        px_w, px_h = struct.unpack(">II", png[16:24])
        assert (int(width), int(height)) == (px_w // 2, px_h // 2)
        assert int(width) >= 700


def test_figures_dir_holds_every_chart_as_embedded(full_charts):
    """--figures-dir gets one PNG per chart, byte-identical to the embedded image."""
    html = full_charts["html"]
    for chart in charts.CHARTS:
        png = (full_charts["figures"] / chart.filename).read_bytes()
        assert base64.b64encode(png).decode() in html, chart.key


def test_sections_appear_in_order(full):
    """The sections appear, in order, each with its anchor in the navigation."""
    html = full["html"]
    positions = [html.index(f'<section id="{s}">') for s in SECTIONS]
    assert positions == sorted(positions)
    for section in SECTIONS:
        assert f'href="#{section}"' in html


def test_hostile_text_is_escaped(full):
    """A failure reason with markup, and the command, appear escaped, never as markup."""
    html = full["html"]
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &#34;quotes&#34;" in html
    assert "<script>alert" not in html
    assert "make study &amp;&amp; echo &#34;&lt;done&gt;&#34;" in html


@pytest.mark.slow
def test_cpu_only_study_via_the_cli(tmp_path, capsys):
    """A CPU-only study renders through `mnistbench report`, saying there is no GPU (and
    why, in the headline's cuda row) and replacing the speed-up chart with a note."""
    results = results_of(tmp_path, devices=("cpu",), repeats=2, batch_sizes=(64, 128),
                     convergence_epochs=3)
    out = tmp_path / "site" / "index.html"
    figures = tmp_path / "figs"
    assert cli.main(["report", "--results", str(results), "--out", str(out),
                     "--figures-dir", str(figures)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    html = out.read_text(encoding="utf-8")
    headline = visible(section_of(html, "headline"))
    assert "cuda" in headline and "not in this study: no cuda cells" in headline
    assert "This study has no GPU" in visible(section_of(html, "findings"))
    assert "GPU speed-up vs batch size: no data.</strong> The sweep needs ok cells" in html
    for after in re.findall(r"no data\.</strong> (.)", html):
        assert after.isupper()
    assert "no ok GPU (cuda) convergence cells" in html
    assert "Break-even: when" not in html
    assert (figures / "speedup.png").read_bytes()[:4] == b"\x89PNG"  # placeholder
    assert "No command was recorded" in html


def test_reproduce_line_is_relative_and_readable(quick):
    """The Reproduce line shows paths relative to the working folder (the quoting:
    tests/report/test_report_formatting.py)."""
    reproduce = quick["html"].split("<h3>Reproduce</h3>")[1]
    assert "snakemake --cores all --configfile config/quick.yaml" in reproduce
    assert str(ROOT) not in reproduce


def test_bad_inputs_raise_report_error_and_write_nothing(full, tmp_path):
    """Missing tables or a bad cost model are ReportErrors naming the fix; no file appears."""
    out = tmp_path / "report" / "index.html"
    with pytest.raises(report.ReportError, match="mnistbench aggregate"):
        report.render_report(tmp_path / "nothing", out)
    bad = tmp_path / "cost.yaml"
    bad.write_text("currency: EUR\nruns: 0\n")
    with pytest.raises(report.ReportError, match="key runs"):
        report.render_report(full["results"], out, cost_model_path=bad)
    assert not out.exists()
    assert cli.main(["report", "--results", str(tmp_path / "nothing"), "--out",
                     str(out)]) == 1


def test_missing_results_folder_names_the_report_command(tmp_path, capsys):
    """`report --results /nonexistent` exits 1 with one paragraph under `mnistbench report`
    (not `mnistbench None`, which --command's default used to print), naming the folder."""
    missing = tmp_path / "nonexistent"
    assert cli.main(["report", "--results", str(missing), "--out",
                     str(tmp_path / "index.html")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mnistbench report: error: ")
    assert f"{missing / 'summary.csv'} does not exist" in err[0]
    assert "mnistbench aggregate" in err[0]
    assert list(tmp_path.iterdir()) == []


def test_cell_without_precision_is_a_report_error_naming_the_file(tmp_path):
    """A summary.csv with an empty precision stops the report with a ReportError naming the
    table, not a TypeError in the charts; nothing is written."""
    results = results_of(tmp_path, repeats=1, batch_sizes=(64, 128))
    path = results / aggregate.SUMMARY_CSV
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    rows[1][rows[0].index("precision")] = ""
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    out = tmp_path / "report" / "index.html"
    with pytest.raises(report.ReportError, match="has no precision for the cell") as info:
        report.render_report(results, out)
    assert str(path) in str(info.value)
    assert not out.exists()


def test_template_ships_as_package_data():
    """The template, its partials and the CSS are package data (files right in templates/,
    which the package data's "templates/*" takes), so an installed CLI finds them anywhere."""
    folder = resources.files("mnistbench.report") / "templates"
    assert (folder / "report.html.j2").is_file() and (folder / "report.css").is_file()
    assert (folder / "macros.html.j2").is_file()
    for name in SECTIONS:
        assert (folder / f"section-{name}.html.j2").is_file(), name
    assert not [p.name for p in folder.iterdir() if p.is_dir() and p.name != "__pycache__"]
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    data = re.search(r'^"mnistbench\.report"\s*=\s*\[([^\]]*)\]', pyproject, re.M)
    assert data and '"templates/*"' in data.group(1)


def test_the_page_includes_one_partial_per_section_in_order():
    """report.html.j2 includes each section's partial once, in the page's order, and each
    partial holds its section and names the module that computes its context."""
    folder = resources.files("mnistbench.report") / "templates"
    page = (folder / "report.html.j2").read_text(encoding="utf-8")
    assert re.findall(r'{% include "section-([a-z]+)\.html\.j2" \+%}', page) == list(PARTIALS)
    assert [p for p in PARTIALS if p not in OPTIONAL_SECTIONS] == list(SECTIONS)
    assert "<section" not in page
    modules = {m.__name__.rpartition(".")[2] for m in report.SECTIONS}
    for name in PARTIALS:
        partial = (folder / f"section-{name}.html.j2").read_text(encoding="utf-8")
        assert partial.count(f'<section id="{name}">') == 1, name
        module = re.search(r"mnistbench\.report\.sections\.(\w+)", partial).group(1)
        assert module in modules, (name, module)


def test_each_section_sets_its_own_keys(full):
    """The context is the union of the sections' parts (and the charts'): no key is set by
    two sections."""
    model = cost.load_model(None)
    inputs = selections.Inputs(full["tables"], model)
    seen: dict[str, str] = {f"chart_{c.key}": "charts" for c in charts.CHARTS}
    for section in report.SECTIONS:
        for key in section.context(inputs):
            assert key not in seen, f"{key}: {seen[key]} and {section.__name__}"
            seen[key] = section.__name__
    context = report.build_context(full["tables"], model, command=None,
                                   results=Path("results"))
    assert set(context) == set(seen)


def test_without_charts_the_text_is_the_same_and_every_chart_says_not_drawn(full, full_charts,
                                                                            tmp_path):
    """charts=False (for tests that read only text) draws no chart: each says so where its
    image would be, and the rest of the page is the page with its charts."""
    html = full["html"]  # rendered with charts=False (test_report_studies._full)
    assert "<img" not in html
    assert html.count(": not drawn.</strong> This report was rendered without charts") == len(
        charts.CHARTS)

    def text(page):
        return re.sub(r'<figure class="chart[^"]*">.*?</figure>', "",
                      publish.strip_stamp(page), flags=re.S)
    assert text(html) == text(full_charts["html"])
    with pytest.raises(ValueError, match="figures_dir needs the charts"):
        report.write_report(full["tables"], tmp_path / "index.html", charts=False,
                            figures_dir=tmp_path / "figures")
    assert not (tmp_path / "index.html").exists()


def test_a_figures_dir_that_is_a_file_is_named_as_such_before_any_chart(full, tmp_path,
                                                                         capsys):
    """Weak case of the sweep of issue 41: `report --figures-dir FILE` drew every chart, then
    failed blaming --out ("cannot write the report to index.html: File exists: FILE"). Now
    it names --figures-dir and the file in the way before a chart is drawn; nothing is
    written."""
    in_the_way = tmp_path / "figures"
    in_the_way.write_text("not a folder")
    for figures in (in_the_way, in_the_way / "sub"):
        with pytest.raises(report.ReportError) as info:
            report.write_report(full["tables"], tmp_path / "index.html", charts=True,
                                figures_dir=figures)
        message = str(info.value)
        assert f"cannot write the charts into {figures}: {in_the_way} is a file" in message
        assert "--figures-dir" in message and "index.html" not in message
    assert not (tmp_path / "index.html").exists()
    assert in_the_way.read_text() == "not a folder"


def test_without_charts_matplotlib_is_never_imported(full, tmp_path):
    """The charts' registry holds the plot functions without importing them: a report
    rendered without charts, in a fresh interpreter, never loads matplotlib; a chart drawn
    there loads it and gives a PNG."""
    code = textwrap.dedent("""
        import sys
        from pathlib import Path
        from mnistbench.report import charts, render
        from mnistbench.results import aggregate
        results, out = Path(sys.argv[1]), Path(sys.argv[2])
        render.render_report(results, out, charts=False)
        assert "matplotlib" not in sys.modules, "loaded by a report without charts"
        png = charts.CHARTS[-1].render(aggregate.load_tables(results))
        assert "matplotlib" in sys.modules and png[:4] == b"\\x89PNG"
        """)
    out = tmp_path / "index.html"
    proc = subprocess.run([sys.executable, "-c", code, str(full["results"]), str(out)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "This report was rendered without charts" in out.read_text(encoding="utf-8")


def test_docs_give_the_run_time_with_the_warmup():
    """docs/report.md gives the time per run as the code computes it, warm-up included."""
    docs = (ROOT / "docs" / "report.md").read_text(encoding="utf-8")
    assert "`timed_s + warmup_s + overhead_s`" in docs
    assert "`timed_s + overhead_s`" not in docs
