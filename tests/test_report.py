"""Tests of mnistbench.report.render: the self-contained HTML report, its sections and figures, and
its robustness (CPU only, one repeat, no GPU, failures, two machines, hostile text), the
findings, the blog check, the tips, the recommendations, busy machines and subsets."""

from __future__ import annotations

import base64
import csv
import html as htmllib
import re
import struct
from importlib import resources
from pathlib import Path

import pandas as pd
import pytest
from fakes import cell_id, make_study, with_load, with_tips

from mnistbench import cli
from mnistbench.core import study
from mnistbench.report import blog, plots
from mnistbench.report import render as report
from mnistbench.results import aggregate, cost, stats

SECTIONS = ("findings", "headline", "blog", "time", "phases", "throughput", "convergence",
            "resources", "cost", "tips", "recommendations", "matrix", "runtimes",
            "methodology")
HOSTILE = "<script>alert('x')</script> & \"quotes\""
COMMAND = 'make study && echo "<done>"'
ROOT = Path(__file__).resolve().parents[1]
#: The quick study's shape (config/quick.yaml): a data subset, one epoch, few cells.
QUICK = {"repeats": 2, "convergence_epochs": 1, "batch_sizes": (64, 512),
         "precisions": ("fp32", "bf16"), "params": {"train_limit": 6000, "test_limit": 1000}}


def _study(tmp_path: Path, **options) -> Path:
    make_study(tmp_path / "runs", **options)
    aggregate.aggregate(tmp_path / "runs", tmp_path / "results")
    return tmp_path / "results"


def _render(results: Path, **kwargs) -> str:
    out = results.parent / "report" / "index.html"
    path = report.render_report(results, out, **kwargs)
    assert path == out
    return out.read_text(encoding="utf-8")


def _write(tables, tmp_path: Path, **kwargs) -> str:
    out = tmp_path / "report" / "index.html"
    report.write_report(tables, out, **kwargs)
    return out.read_text(encoding="utf-8")


def _section(html: str, name: str) -> str:
    start = html.index(f'<section id="{name}">')
    return html[start:html.index("</section>", start)]


def _text(fragment: str) -> str:
    """Visible text of an HTML fragment, whitespace collapsed."""
    return " ".join(htmllib.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


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


@pytest.fixture(scope="module")
def tenfold(tmp_path_factory):
    """A GPU study at the blog's full settings (10 epochs, all data) with tips cells and one
    busy CPU repeat, rendered from tables in memory."""
    tmp = tmp_path_factory.mktemp("tenfold")
    results = _study(tmp, repeats=3, batch_sizes=(32, 128, 2048), precisions=("fp32",))
    busy_cell = ("alpha", "convergence", cell_id("cpu", "fp32", "dataloader", 128, 0))
    tables = with_load(with_tips(aggregate.load_tables(results), overrides={
        ("cuda", "compile"): ("oom", "CUDA out of memory while compiling")}),
        {busy_cell: 91.0})
    return {"html": _write(tables, tmp), "tables": tables, "busy": busy_cell}


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """The quick study's shape on a machine without a GPU: a subset, one epoch."""
    tmp = tmp_path_factory.mktemp("quick")
    results = _study(tmp, gpu=False, **QUICK)
    return {"html": _render(results, command="snakemake --cores all --configfile "
                                              f"{ROOT}/config/quick.yaml"),
            "tables": aggregate.load_tables(results)}


def test_report_is_one_self_contained_file(full):
    """CSS inline, every chart a PNG data URI, no scripts, no external references."""
    html = full["html"]
    assert html.count("<style>") == 1 and "<link" not in html
    assert "<script" not in html.lower()
    assert html.count('<img src="data:image/png;base64,') == len(plots.CHARTS)
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "url(" not in html


def test_charts_are_shown_at_half_their_pixels_for_hidpi_screens(full):
    """Every chart's width and height attributes are half its PNG's pixels, so a 2x screen
    gets one pixel per device pixel."""
    images = re.findall(r'<img src="data:image/png;base64,([^"]+)" width="(\d+)" '
                        r'height="(\d+)"', full["html"])
    assert len(images) == len(plots.CHARTS)
    for data, width, height in images:
        png = base64.b64decode(data)
        px_w, px_h = struct.unpack(">II", png[16:24])
        assert (int(width), int(height)) == (px_w // 2, px_h // 2)
        assert int(width) >= 700


def test_sections_appear_in_order(full):
    """The thirteen sections appear, in order, each with its anchor in the navigation."""
    html = full["html"]
    positions = [html.index(f'<section id="{s}">') for s in SECTIONS]
    assert positions == sorted(positions)
    for section in SECTIONS:
        assert f'href="#{section}"' in html


def test_headline_matches_the_data_and_shows_the_blogs_figures(full):
    """Headline seconds per epoch and speed-up are the medians of the data, next to the
    blog's figures as it prints them (5.2 s, not 5.20 s), labelled as another machine."""
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
    aside = html[html.index('<aside class="blog'):html.index("</aside>")]
    assert "another machine" in aside
    for figure in ("58.7 s per epoch", "5.2 s per epoch", "11.3 ×", "i7-12700K", "RTX 4090"):
        assert figure in aside
    assert "5.20 s" not in aside
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


def test_non_ok_cells_show_whole_numbers_sorted_by_batch_size(tmp_path):
    """The table of cells that are not ok prints batch 128 and repeat 1 (not 128.000 and
    1.00) and lists batch 64 before batch 512."""
    failed = {cell_id("cpu", "fp32", "resident", batch, 1): ("failed", f"boom {batch}")
              for batch in (512, 64, 128)}
    html = _render(_study(tmp_path, experiments=("sweep",), devices=("cpu",), repeats=2,
                          precisions=("fp32",), loaders=("resident",),
                          batch_sizes=(64, 128, 512), overrides=failed))
    table = _section(html, "matrix")
    rows = re.findall(r'<td class="num">([^<]*)</td><td class="num">([^<]*)</td>', table)
    assert rows == [("64", "1"), ("128", "1"), ("512", "1")]
    assert "128.000" not in html and "1.00<" not in table


def test_methodology_documents_model_stats_units_and_command(full):
    """Methodology names the model fix, the warm-up policy, the CI methods, the TPU scope,
    every column with its unit, and the reproducing command."""
    html = full["html"]
    assert "max-pooling twice" in html and "Linear(9216, 128)" in html
    assert "dropout 0.5" in html and "Adam" in html
    assert "warmup_s" in html and "restores the model and optimizer state" in html
    assert "order-statistic" in html and "percentile bootstrap" in html
    assert ("TPUs are out of scope: torch_xla compiles whole graphs lazily, so per-phase timing "
            "of the same eager training loop would not measure the same thing.") in " ".join(
                html.split())
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
    section = _section(html, "resources")
    assert "125 W" in section  # fakes: 125 W CPU package power while training on the CPU
    assert "MiB" in section and "mean GPU power" in section
    assert "lowest, named in the legend" in section


def test_cost_section_tags_every_figure(full):
    """Cost rows carry measured/mixed tags and the break-even table is present."""
    html = _section(full["html"], "cost")
    assert html.count("basis-measured") >= 4 and html.count("basis-mixed") >= 8
    assert "Break-even" in html and "extra price of the GPU machine" in html
    assert "EUR" in html and "built-in default" in html


def test_assumed_power_times_measured_time_is_mixed_and_waiting_is_named(tmp_path):
    """Without energy counters the energy, electricity, hardware and waiting of a run are
    tagged mixed (an assumed power or rate times a measured time), never assumed, and the
    report says when waiting dominates the cost."""
    html = _render(_study(tmp_path, energy=False, experiments=("convergence",), repeats=2,
                          convergence_epochs=2))
    one_run = _section(html, "cost").split("<h3>One run</h3>")[1].split("</table>")[0]
    tbody = one_run.split("<tbody>")[1]
    assert "basis-assumed" not in tbody and tbody.count("basis-mixed") >= 5 * 4
    assert "Waiting dominates the cost" in html


def test_figures_dir_holds_every_chart_as_embedded(full):
    """--figures-dir gets one PNG per chart, byte-identical to the embedded image."""
    html = full["html"]
    for chart in plots.CHARTS:
        png = (full["figures"] / chart.filename).read_bytes()
        assert base64.b64encode(png).decode() in html, chart.key


def test_cpu_only_study_via_the_cli(tmp_path, capsys):
    """A CPU-only study renders through `mnistbench report`, saying there is no GPU (and
    why, in the headline's cuda row) and replacing the speed-up chart with a note."""
    results = _study(tmp_path, devices=("cpu",), repeats=2, batch_sizes=(64, 128),
                     convergence_epochs=3)
    out = tmp_path / "site" / "index.html"
    figures = tmp_path / "figs"
    assert cli.main(["report", "--results", str(results), "--out", str(out),
                     "--figures-dir", str(figures)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    html = out.read_text(encoding="utf-8")
    headline = _text(_section(html, "headline"))
    assert "cuda" in headline and "not in this study: no cuda cells" in headline
    assert "This study has no GPU" in _text(_section(html, "findings"))
    assert "GPU speed-up vs batch size: no data.</strong> The sweep needs ok cells" in html
    assert "no ok GPU (cuda) convergence cells" in html
    assert "Break-even: when" not in html
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
    """On a machine without a GPU the cuda cells are listed as unavailable with the reason,
    and the headline keeps a cuda row that gives it."""
    results = _study(tmp_path, gpu=False, repeats=2, batch_sizes=(64,), convergence_epochs=2)
    html = _render(results)
    summary = aggregate.load_tables(results).summary
    unavailable = int((summary["status"] == "unavailable").sum())
    assert unavailable == int((summary["device"] == "cuda").sum()) > 0
    assert f"{unavailable} unavailable" in html
    row = re.search(r'<tr class="absent"><td>cuda</td>.*?</tr>', _section(html, "headline"),
                    re.S)
    assert row and f"unavailable ({unavailable} cells): no CUDA GPU is visible to torch" in \
        _text(row.group(0))


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
    assert "beta&amp;&lt;b&gt;: CPU AMD EPYC 7763" in _section(html, "findings")


def test_runtimes_compare_the_same_cells_in_a_container_with_the_local_runner(tmp_path):
    """Three environments of one machine (a container and SLURM jobs beside the local
    runner): the runtimes section gives each setting's epoch time in each and its ratio to the
    local runner's, and a sentence with each median; a study of one environment says why
    there is none."""
    results = _study(tmp_path, envs=("vm-local",), repeats=2, batch_sizes=(128,),
                     precisions=("fp32",), convergence_epochs=2, gpu=False, devices=("cpu",))
    tables = aggregate.load_tables(results)
    local = tables.summary
    single = _text(_section(_write(tables, tmp_path / "one"), "runtimes"))
    assert "Not measured: no cells of the same settings ran in two environments" in single
    boxed = local.assign(env="vm-docker", container="mnistbench:cpu",
                         epoch_s_median=local["epoch_s_median"] * 1.1)
    jobs = local.assign(env="slurm-main", slurm_partition="main",
                        epoch_s_median=local["epoch_s_median"] * 1.05)
    both = aggregate.Tables(pd.concat([local, boxed, jobs], ignore_index=True), tables.epochs,
                            tables.resources)
    page = _write(both, tmp_path)
    section = _text(_section(page, "runtimes"))
    settings = len(local.groupby(["experiment", "loader"]))
    assert settings == 4
    assert ("vm-docker took 1.10 × the epoch time of vm-local (median over 4 matched "
            "settings; 1.10 × to 1.10 ×): 10.0 % slower.") in section
    row = local[(local["experiment"] == "convergence") & (local["loader"] == "dataloader")]
    median = float(row["epoch_s_median"].median())
    assert (f"vm-docker vm-local convergence cpu fp32 dataloader 128 {report.seconds(median)} "
            f"{report.seconds(median * 1.1)} 1.10 ×") in section
    assert ("slurm-main took 1.05 × the epoch time of vm-local (median over 4 matched "
            "settings; 1.05 × to 1.05 ×): 5.0 % slower.") in section
    assert "2 / 2" in section
    # The findings describe the local environment, not the container's copy of it.
    assert f"of the DataLoader's {report.seconds(median)} epoch" in _text(
        _section(page, "findings"))


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


def test_wording_counts_and_blog_figures():
    """Counts take their number (1 epoch, 2 epochs), whole floats print whole, and the blog's
    figures print as the blog prints them."""
    assert report.plural(1, "epoch") == "1 epoch" and report.plural(2, "epoch") == "2 epochs"
    assert report.plural("1", "repeat") == "1 repeat"
    assert report.plural("2–3", "repeat") == "2–3 repeats"
    assert report.as_printed(5.2, "s") == "5.2 s" and report.as_printed(None).startswith("not")
    assert report.count(128.0) == "128" and report.usd(0.10) == "$0.10"
    assert report.usd(0.0367) == "$0.0367"


def test_one_epoch_study_says_one_epoch_and_no_data_sentences_start_capitalised(quick):
    """A one-epoch study's headline says "total (1 epoch)", never "1 epochs", and every
    "no data." note goes on with a capital letter."""
    html = quick["html"]
    assert "total (1 epoch)" in html and "1 epochs" not in html
    for after in re.findall(r"no data\.</strong> (.)", html):
        assert after.isupper()


def test_reproduce_line_is_relative_and_readable(quick):
    """The Reproduce line shows paths relative to the working folder and quotes arguments
    only where a shell needs it, with double quotes where they read better."""
    reproduce = quick["html"].split("<h3>Reproduce</h3>")[1]
    assert "snakemake --cores all --configfile config/quick.yaml" in reproduce
    assert str(ROOT) not in reproduce
    assert (report.readable_command("snakemake --config 'mirrors=['\"'\"'../m'\"'\"']'")
            == "snakemake --config \"mirrors=['../m']\"")
    assert report.readable_command("a 'b c' \"$HOME\"", Path("/x")) == "a \"b c\" '$HOME'"
    assert report.readable_command("/work/x/y.yaml", Path("/work/x")) == "y.yaml"
    assert report.readable_command("unbalanced 'quote") == "unbalanced 'quote"


def test_docs_give_the_run_time_with_the_warmup():
    """docs/report.md gives the time per run as the code computes it, warm-up included."""
    docs = (ROOT / "docs" / "report.md").read_text(encoding="utf-8")
    assert "`timed_s + warmup_s + overhead_s`" in docs
    assert "`timed_s + overhead_s`" not in docs


# ---------------------------------------------------------------------------- findings

def test_findings_state_speedup_phase_cost_accuracy_and_hardware(tenfold):
    """With a GPU the findings give the speed-up per loader with its interval, the phase
    behind it, the cost per run on both devices with the break-even, the accuracy difference
    against the seed spread and the hardware, in three to six sentences."""
    findings = _section(tenfold["html"], "findings")
    sentences = re.findall(r"<p>(.*?)</p>", findings, re.S)
    assert 3 <= len(sentences) <= 6 and all(s.strip() for s in sentences)
    text = _text(findings)
    assert "the GPU trains an epoch faster than the CPU by" in text
    for loader in ("dataloader", "resident"):
        assert f"with the {loader} loader (95 % CI" in text
    assert "explains most of it" in text and "per epoch on the CPU against" in text
    assert re.search(r"costs [\d.,]+ EUR on the CPU and [\d.,]+ EUR on the GPU", text)
    assert "pays for itself after" in text
    assert "a difference of" in text and "seed-to-seed spread measured here" in text
    assert ("Hardware: CPU 12th Gen Intel(R) Core(TM) i7-12700K (12 cores, 20 threads); GPU "
            "NVIDIA GeForce RTX 4090, driver 570.124.06") in text


def test_findings_without_a_gpu_say_so_and_how_to_add_one(quick):
    """Without a GPU the findings say so, how to add one (another machine's runs, the CUDA
    image, SLURM) and what the CPU study found: loader, precision and best batch size."""
    text = _text(_section(quick["html"], "findings"))
    assert "This study has no GPU" in text
    assert "results/runs/" in text and "--gpus all" in text and "SLURM" in text
    assert "resident data makes an epoch" in text
    assert "bf16 gives" in text and "the best throughput is" in text
    assert "no GPU" in text.split("Hardware:")[1]


def test_busy_cells_are_flagged_and_left_out_of_the_findings(tenfold):
    """A busy repeat is marked in the tables with the machine's load, and the findings'
    speed-up is computed without it."""
    html, summary = tenfold["html"], tenfold["tables"].summary
    assert "busy: 1 of 3 busy (machine 91 % busy)" in _text(_section(html, "headline"))
    assert "busy: 1 of 3 busy" in _text(_section(html, "time"))
    findings = _text(_section(html, "findings"))
    assert "1 cell ran on a busy machine" in findings and "1 of them left out" in findings
    conv = summary[(summary["experiment"] == "convergence") & (summary["loader"] == "dataloader")]
    quiet = conv[conv["cell"] != tenfold["busy"][2]]
    est = stats.ratio_ci(quiet.loc[quiet["device"] == "cpu", "epoch_s_median"],
                         quiet.loc[quiet["device"] == "cuda", "epoch_s_median"])
    assert f"by {report.num(est.value, 3, '×')} with the dataloader loader" in findings


def test_busy_flag_as_bools_and_absent(full):
    """busy read as bools flags the same cells as busy read as text; a summary without the
    column (older results) flags none."""
    summary = full["tables"].summary
    key = ("alpha", "convergence", summary["cell"].iloc[0])
    as_text = with_load(full["tables"], {key: 60.0}).summary
    as_bool = with_load(full["tables"], {key: 60.0}, as_text=False).summary
    assert report.busy_mask(as_text).tolist() == report.busy_mask(as_bool).tolist()
    assert report.busy_mask(as_text).sum() == 1
    assert not report.busy_mask(summary).any()
    assert report.discount_busy(summary) == (summary, 0)
    assert "busy:" not in full["html"]


# ---------------------------------------------------------------------------- the blog, checked

def _checks(html: str) -> dict[str, tuple[str, str]]:
    """title -> (verdict, text) of every check of the blog section."""
    items = re.findall(r"<li><strong>(.*?)</strong> <span class=\"verdict verdict-[a-z-]+\">"
                       r"(.*?)</span>(.*?)</li>", _section(html, "blog"), re.S)
    return {htmllib.unescape(t): (v, _text(rest)) for t, v, rest in items}


def test_blog_check_sets_every_table_beside_this_study(tenfold):
    """The side-by-side table has the blog's hardware, time, data loading and backprop,
    resources, accuracy and cost tables, each with this study's numbers; figures the project
    does not hold say so."""
    section = _text(_section(tenfold["html"], "blog"))
    for table in ("Hardware", "Time per epoch and total", "Data loading and backprop",
                  "Resources", "Accuracy, best epoch, final loss", "Cost of 10 trainings"):
        assert table in section
    assert "not in this project's reference data" in section
    assert "$0.37 (printed)" in section and "$0.10 (printed)" in section
    assert "subset:" not in section


def test_blog_checks_compute_their_verdicts(tenfold):
    """The model, the electricity arithmetic, the unexplained CPU epoch, the 11.3x (as
    written, resident, tuned) and the accuracy gap each end in a verdict with numbers."""
    checks = _checks(tenfold["html"])
    assert checks["The model"][0] == blog.CONTRADICTED
    assert "9,216 features" in checks["The model"][1] and "1,600" in checks["The model"][1]
    cpu = checks["Electricity of 10 CPU trainings"]
    assert cpu[0] == blog.CONTRADICTED
    assert "150 W × 1.63 h × $0.15/kWh = $0.0367, not $0.37" in cpu[1]
    gpu = checks["Electricity of 10 GPU trainings"]
    assert gpu[0] == blog.CONTRADICTED and "= $0.00975, not $0.10" in gpu[1]
    unexplained = checks["What the CPU epoch's phases leave unexplained"]
    assert unexplained[0] == blog.CONTRADICTED and "about 24 s (41 %)" in unexplained[1]
    assert "the forward pass" in unexplained[1]
    for variant in ("as written (its loader, fp32, eager)", "with resident data",
                    "with tuned code"):
        verdict, text = checks[f"11.3 ×, {variant}"]
        assert verdict in (blog.CONFIRMED, blog.CONTRADICTED), variant
        assert "95 % CI" in text and "11.3 × is" in text
    assert checks["The accuracy gap"][0] in blog.VERDICTS
    assert "seed-to-seed spread" in checks["The accuracy gap"][1]
    cpu_epoch = checks["The CPU epoch on the blog's hardware"]
    assert cpu_epoch[0] in (blog.CONFIRMED, blog.CONTRADICTED)  # the fakes' alpha: i7-12700K


def test_a_subset_is_not_comparable_and_the_blog_box_steps_back(quick):
    """With a data subset and one epoch every comparison with the blog says "subset: N
    samples, not comparable", those checks are not checkable, and the blog box steps back."""
    html = quick["html"]
    note = "subset: 6,000 samples, not comparable"
    assert '<aside class="blog stepped-back">' in html and note in _section(html, "headline")
    side = _section(html, "blog").split("<tbody>")[1].split("</tbody>")[0]
    rows = re.findall(r"<tr>(.*?)</tr>", side, re.S)
    comparisons = [r for r in rows if "another machine" not in r]
    assert comparisons and all(note in r for r in comparisons)
    checks = _checks(html)
    assert checks["The accuracy gap"][0] == blog.NOT_CHECKABLE
    assert checks["The model"][0] == blog.CONTRADICTED  # the blog alone: still checked
    for title, (verdict, text) in checks.items():
        if "Here" in text and "11.3" in title:
            assert verdict == blog.NOT_CHECKABLE and note in text, title


def test_full_settings_are_comparable(tenfold):
    """At the blog's full settings nothing says subset and the blog box stands normally."""
    assert '<aside class="blog">' in tenfold["html"] and "subset:" not in tenfold["html"]


# ---------------------------------------------------------------------------- tips

def test_tips_section_reads_the_tip_column(tenfold):
    """Each tip gets its speed-up over the baseline with an interval, its accuracy effect and
    a verdict per device; a tip that does not apply to the CPU is n/a with the reason; a tip
    that failed shows its status and reason."""
    section = _section(tenfold["html"], "tips")
    rows = {re.search(r"<code>(.*?)</code>", r).group(1): _text(r)
            for r in re.findall(r"<tr>(.*?)</tr>", section.split("<tbody>")[1], re.S)}
    assert list(rows) == [t.name for t in study.TIPS if t.name not in ("blog-all",)]
    assert "1× (baseline)" in rows["baseline"]
    assert rows["pin_memory"].count("n/a") == 1 and "only speeds up copies to a GPU" in \
        rows["pin_memory"]
    assert "cuDNN is NVIDIA's GPU library" in rows["cudnn.benchmark"]
    assert "95 % CI" in rows["workers=4"] and "pays off" in rows["workers=4"]
    assert "slower" in rows["cudnn.benchmark"]
    assert "points" in rows["resident"]
    assert "oom CUDA out of memory while compiling" in rows["compile"]
    tips = tenfold["tables"].summary
    tips = tips[(tips["experiment"] == "tips") & (tips["device"] == "cpu")]
    est = stats.ratio_ci(tips.loc[tips["tip"] == "baseline", "epoch_s_median"],
                         tips.loc[tips["tip"] == "resident", "epoch_s_median"])
    assert f"{report.num(est.value, 3, '×')} 95 % CI" in rows["resident"]


def test_tips_section_says_not_measured_without_tips_cells(full):
    """Without cells of the tips experiment the section says so instead of being empty."""
    text = _text(_section(full["html"], "tips"))
    assert "Not measured in this study: no cells of the tips experiment" in text


def test_small_ratios_need_an_interval_or_say_within_noise():
    """A ratio whose interval holds 1 says "within noise"; one without an interval close to 1
    says it is too close to tell; a clear effect says neither."""
    noisy = stats.Estimate(1.04, 0.97, 1.11, 3, 0.95, "bootstrap")
    assert report.ratio_interval(noisy).endswith("within noise")
    single = stats.Estimate(1.04, None, None, 1, None, "single observation on one side")
    assert "too close to 1 to tell" in report.ratio_interval(single)
    clear = stats.Estimate(1.4, 1.3, 1.5, 3, 0.95, "bootstrap")
    assert "noise" not in report.ratio_interval(clear)


def test_loader_gain_carries_its_interval(full):
    """"resident is faster by" gives its interval beside the ratio."""
    table = _section(full["html"], "phases").split("resident is faster by")[1]
    assert re.search(r"[\d.]+ ×<br><small>(95 % CI|[\d.]+–)", table)


# ---------------------------------------------------------------------------- recommendations

def test_recommendations_show_the_numbers_behind_them(tenfold):
    """When the CPU suffices, from which batch size the GPU pays off, and the break-even in
    runs, each with its numbers, computed from the cost model and the data."""
    section = _section(tenfold["html"], "recommendations")
    titles = re.findall(r"<h3>(.*?)</h3>", section)
    assert titles == ["When the CPU suffices", "From which batch size the GPU pays off",
                      "Break-even in runs"]
    text = _text(section)
    result = cost.compute(tenfold["tables"].summary, tenfold["tables"].epochs,
                          cost.load_model(None))
    be = next(b for b in result.break_even if b.loader == "dataloader")
    assert f"below {be.runs_with_waiting:,.0f} training runs" in text
    assert f"after {be.runs_with_waiting:,.0f} runs counting the time you wait" in text
    assert "batch 32:" in text and "an hour costs" in text
    assert section.count("<li>") >= 6


def test_recommendations_without_a_gpu_say_what_is_missing(quick):
    """Without GPU cells each recommendation says why it cannot be computed."""
    text = _text(_section(quick["html"], "recommendations"))
    assert text.count("Not computable") + text.count("Not measured") == 3


# ---------------------------------------------------------------------------- plumbing

def test_template_ships_as_package_data():
    """The template and CSS are package data, so an installed CLI finds them anywhere."""
    folder = resources.files("mnistbench.report") / "templates"
    assert (folder / "report.html.j2").is_file() and (folder / "report.css").is_file()
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    data = re.search(r'^"mnistbench\.report"\s*=\s*\[([^\]]*)\]', pyproject, re.M)
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
