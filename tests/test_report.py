"""Tests of mnistbench.report: the self-contained HTML report, its sections and figures, and
its robustness (CPU only, one repeat, no GPU, failures, two machines, hostile text)."""

from __future__ import annotations

import base64
import csv
import re
from importlib import resources
from pathlib import Path

import pytest
from fakes import cell_id, make_study

from mnistbench import aggregate, cli, plots, report, stats

SECTIONS = ("headline", "time", "phases", "throughput", "convergence", "resources", "cost",
            "matrix", "methodology")
HOSTILE = "<script>alert('x')</script> & \"quotes\""
COMMAND = 'make study && echo "<done>"'


def _study(tmp_path: Path, **options) -> Path:
    make_study(tmp_path / "runs", **options)
    aggregate.aggregate(tmp_path / "runs", tmp_path / "results")
    return tmp_path / "results"


def _render(results: Path, **kwargs) -> str:
    out = results.parent / "report" / "index.html"
    path = report.render_report(results, out, **kwargs)
    assert path == out
    return out.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """A GPU study with three repeats, an oom and a failed cell with a hostile reason,
    rendered with --figures-dir and --command."""
    tmp = tmp_path_factory.mktemp("full")
    results = _study(tmp, repeats=3, batch_sizes=(64, 128, 1024), convergence_epochs=5,
                     overrides={cell_id("cuda", "fp16", "resident", 1024, 2): (
                                    "oom", "CUDA out of memory. Tried to allocate 4.00 GiB"),
                                cell_id("cpu", "bf16", "dataloader", 64, 0): (
                                    "failed", HOSTILE)})
    html = _render(results, figures_dir=tmp / "figures", command=COMMAND)
    return {"html": html, "results": results, "figures": tmp / "figures",
            "tables": aggregate.load_tables(results)}


def test_report_is_one_self_contained_file(full):
    """CSS inline, every chart a PNG data URI, no scripts, no external references."""
    html = full["html"]
    assert html.count("<style>") == 1 and "<link" not in html
    assert "<script" not in html.lower()
    assert html.count('<img src="data:image/png;base64,') == len(plots.CHARTS)
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "url(" not in html


def test_sections_appear_in_order(full):
    """The nine sections appear, in order, each with its anchor in the navigation."""
    html = full["html"]
    positions = [html.index(f'<section id="{s}">') for s in SECTIONS]
    assert positions == sorted(positions)
    for section in SECTIONS:
        assert f'href="#{section}"' in html


def test_headline_matches_the_data_and_shows_the_blogs_figures(full):
    """Headline seconds per epoch and speed-up are the medians of the data, next to the
    blog's figures labelled as another machine."""
    html, summary = full["html"], full["tables"].summary
    conv = summary[(summary["experiment"] == "convergence") & (summary["status"] == "ok")]
    for device in ("cpu", "cuda"):
        values = conv[(conv["device"] == device) & (conv["loader"] == "dataloader")]
        assert report.seconds(values["epoch_s_median"].median()) in html
    cpu = conv[(conv["device"] == "cpu") & (conv["loader"] == "resident")]["epoch_s_median"]
    gpu = conv[(conv["device"] == "cuda") & (conv["loader"] == "resident")]["epoch_s_median"]
    est = stats.ratio_ci(cpu, gpu)
    assert report.num(est.value, 3, "×") in html
    assert f"95 % CI {report.num(est.low, 3)}–{report.num(est.high, 3)} ×" in html
    assert "another machine" in html
    for figure in ("58.7 s", "5.20 s", "11.3 ×", "i7-12700K", "RTX 4090"):
        assert figure in html
    assert "min–max, 75 % coverage" in html  # 3 repeats: min-max interval, said so


def test_hostile_text_is_escaped(full):
    """A failure reason with markup, and the command, appear escaped, never as markup."""
    html = full["html"]
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &#34;quotes&#34;" in html
    assert "<script>alert" not in html
    assert "make study &amp;&amp; echo &#34;&lt;done&gt;&#34;" in html


def test_matrix_lists_every_non_ok_cell(full):
    """The matrix counts statuses and lists each non-ok cell with its reason."""
    html = full["html"]
    assert "CUDA out of memory. Tried to allocate 4.00 GiB" in html
    assert cell_id("cuda", "fp16", "resident", 1024, 2) in html
    assert "All 2 cells that are not ok" in html
    assert "1 oom" in html and "1 failed" in html


def test_methodology_documents_model_stats_units_and_command(full):
    """Methodology names the model fix, the warm-up policy, the CI methods, every column with
    its unit, and the reproducing command."""
    html = full["html"]
    assert "max-pooling twice" in html and "Linear(9216, 128)" in html
    assert "dropout 0.5" in html and "Adam" in html
    assert "warmup_s" in html and "restores the model and optimizer state" in html
    assert "order-statistic" in html and "percentile bootstrap" in html
    for row in aggregate.column_rows():
        assert f"<code>{row['name']}</code>" in html
    assert "<td>samples/s</td>" in html and "<td>MiB</td>" in html


def test_convergence_and_resource_tables_summarise_repeats(full):
    """Convergence rows give median (min – max) over repeats; resources give peak memory
    and mean CPU package power from the energy counter."""
    html, summary = full["html"], full["tables"].summary
    conv = summary[(summary["experiment"] == "convergence") & (summary["device"] == "cpu")
                   & (summary["loader"] == "resident")]
    acc = conv["final_test_acc"]
    expected = (f"{report.num(acc.median(), 4, '%')} ({report.num(acc.min(), 4, '%')} – "
                f"{report.num(acc.max(), 4, '%')})")
    assert expected in html
    section = html[html.index('<section id="resources">'):html.index('<section id="cost">')]
    assert "125 W" in section  # fakes: 125 W CPU package power while training on the CPU
    assert "MiB" in section and "mean GPU power" in section


def test_cost_section_tags_every_figure(full):
    """Cost rows carry measured/assumed/mixed tags and the break-even table is present."""
    html = full["html"]
    assert html.count("basis-measured") >= 4 and html.count("basis-assumed") >= 8
    assert "Break-even" in html and "extra price of the GPU machine" in html
    assert "EUR" in html and "built-in default" in html


def test_figures_dir_holds_every_chart_as_embedded(full):
    """--figures-dir gets one PNG per chart, byte-identical to the embedded image."""
    html = full["html"]
    for chart in plots.CHARTS:
        png = (full["figures"] / chart.filename).read_bytes()
        assert base64.b64encode(png).decode() in html, chart.key


def test_cpu_only_study_via_the_cli(tmp_path, capsys):
    """A CPU-only study renders through `mnistbench report`, saying there is no GPU and
    replacing the speed-up chart with a note."""
    results = _study(tmp_path, devices=("cpu",), repeats=2, batch_sizes=(64, 128),
                     convergence_epochs=3)
    out = tmp_path / "site" / "index.html"
    figures = tmp_path / "figs"
    assert cli.main(["report", "--results", str(results), "--out", str(out),
                     "--figures-dir", str(figures)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    html = out.read_text(encoding="utf-8")
    assert "No ok GPU (cuda) cell: CPU-only results" in html
    assert "GPU speed-up vs batch size: no data." in html
    assert "no ok GPU (cuda) convergence cells" in html
    assert "Break-even" not in html
    assert (figures / "speedup.png").read_bytes()[:4] == b"\x89PNG"  # placeholder
    assert "No command was recorded" in html


@pytest.mark.slow
def test_one_repeat_says_there_is_no_interval(tmp_path):
    """With one repeat the report shows no interval and says why."""
    html = _render(_study(tmp_path, repeats=1, batch_sizes=(128,), convergence_epochs=2))
    assert "no interval: 1 repeat" in html
    assert "Rows with one repeat have no confidence interval" in html
    assert "95 % CI" not in html


def test_every_gpu_cell_unavailable(tmp_path):
    """On a machine without a GPU the cuda cells are listed as unavailable with the reason."""
    results = _study(tmp_path, gpu=False, repeats=2, batch_sizes=(64,), convergence_epochs=2)
    html = _render(results)
    summary = aggregate.load_tables(results).summary
    unavailable = int((summary["status"] == "unavailable").sum())
    assert unavailable == int((summary["device"] == "cuda").sum()) > 0
    assert f"{unavailable} unavailable" in html
    assert "no CUDA GPU is visible to torch" in html
    assert "No ok GPU (cuda) cell" in html


@pytest.mark.slow
def test_two_machines_side_by_side_with_hostile_host_names(tmp_path):
    """Results merged from two machines show both envs side by side; a hostile host name
    and env name are escaped everywhere."""
    results = _study(tmp_path, envs=("alpha", "beta&<b>"), repeats=2, batch_sizes=(128,),
                     precisions=("fp32", "bf16"), convergence_epochs=2, gpu={"beta&<b>": False},
                     hostnames={"alpha": '"><img src=x onerror=alert(1)>', "beta&<b>": "b"})
    html = _render(results)
    assert "<th>field</th><th>alpha</th><th>beta&amp;&lt;b&gt;</th>" in html
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<img src=x" not in html
    assert "<th>env</th>" in html  # env column in the tables
    assert "AMD EPYC 7763" in html and "i7-12700K" in html


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


@pytest.mark.parametrize(("value", "expected"), [
    (58.7, "58.7 s"), (5.2, "5.20 s"), (0.02318, "0.0232 s"), (619.4, "619 s (10.3 min)"),
    (9000.0, "9,000 s (2.5 h)"), (None, "–"), (float("nan"), "–"),
])
def test_seconds_formatting(value, expected):
    """Durations print with three significant digits and minutes or hours when long."""
    assert report.seconds(value) == expected


def test_template_ships_as_package_data():
    """The template and CSS are package data, so an installed CLI finds them anywhere."""
    folder = resources.files("mnistbench") / "templates"
    assert (folder / "report.html.j2").is_file() and (folder / "report.css").is_file()
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(
        encoding="utf-8")
    data = re.search(r"\[tool\.setuptools\.package-data\]\s*mnistbench\s*=\s*\[([^\]]*)\]",
                     pyproject)
    assert data and '"templates/*"' in data.group(1)


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
    results = _study(tmp_path, repeats=1, batch_sizes=(64, 128))
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
