"""Tests of the report's comparison with the blog (mnistbench.report.sections.headline
and blog_check): the blog's figures beside the headline, its tables beside this study's
(the row specification), the checks with their verdicts, and a subset that is not
comparable."""

from __future__ import annotations

import html as htmllib
import re

from mnistbench.report import blog, selections
from mnistbench.report import formatting as fmt
from mnistbench.report.blog import Verdict
from mnistbench.report.sections import blog_check
from mnistbench.results import aggregate, cost, stats
from tests.fakes import with_tips
from tests.report import test_report_studies as studies
from tests.report.test_report_studies import (
    section_of,
    visible,
)


def test_headline_matches_the_data_and_shows_the_blogs_figures(full):
    """Headline seconds per epoch and speed-up are the medians of the data, each row named by
    the code it ran, next to the blog's figures as it prints them (5.2 s, not 5.20 s),
    labelled as another machine."""
    html, summary = full["html"], full["tables"].summary
    conv = summary[(summary["experiment"] == "convergence") & (summary["status"] == "ok")]
    for device in ("cpu", "cuda"):
        values = conv[(conv["device"] == device) & (conv["loader"] == "dataloader")]
        assert fmt.seconds(values["epoch_s_median"].median()) in html
    cpu = conv[(conv["device"] == "cpu") & (conv["loader"] == "resident")]["epoch_s_median"]
    gpu = conv[(conv["device"] == "cuda") & (conv["loader"] == "resident")]["epoch_s_median"]
    est = stats.ratio_ci(cpu, gpu)
    assert fmt.num(est.value, 3, "×") in html
    assert f"{fmt.num(est.low, 3)}–{fmt.num(est.high, 3)} ×" in html
    assert f"range of {est.n} runs a side" in html  # 3 runs a side cannot give 95 %
    aside = html[html.index('<aside class="blog'):html.index("</aside>")]
    assert "another machine" in aside
    for figure in ("58.7 s per epoch", "5.2 s per epoch", "11.3 ×", "i7-12700K", "RTX 4090"):
        assert figure in aside
    assert "5.20 s" not in aside
    assert "range of 3 runs: " in html and "75 % coverage" in html  # 3 repeats: said so
    headline = visible(section_of(html, "headline"))
    assert "this project's best data held in memory" in headline  # code, loader columns
    assert "other: tuned code, DataLoader" in headline
    # the legend
    assert "Code: \"the blog's code\" is the blog's recipe as far as it can run" in headline


def _checks(html: str) -> dict[str, tuple[str, str]]:
    """title -> (verdict, text) of every check of the blog section."""
    items = re.findall(r"<li><strong>(.*?)</strong> <span class=\"verdict verdict-[a-z-]+\">"
                       r"(.*?)</span>(.*?)</li>", section_of(html, "blog"), re.S)
    return {htmllib.unescape(t): (v, visible(rest)) for t, v, rest in items}


def test_blog_check_sets_every_table_beside_thisresults_of(tenfold):
    """The side-by-side table has the blog's test environment, settings, time, data loading
    and backprop, resources, accuracy and cost tables, each with this study's numbers; every
    figure of the blog is held (none says it is missing)."""
    section = visible(section_of(tenfold["html"], "blog"))
    for table in ("Test environment", "Settings", "Time per epoch and total",
                  "Data loading and backprop", "Resources", "Accuracy, best epoch, final loss",
                  "Cost of 10 trainings"):
        assert table in section
    assert "reference data" not in tenfold["html"]
    for figure in ("$0.37", "$0.10", "$1,000.37", "$2,500.10", "5,870 s (1.63 h)", "2.1 s",
                   "32.4 s", "21.6 ×", "3.2 GB", "98 %", "CPU 98.2 %; GPU 98.4 %; difference "
                   "0.2 points", "CPU 8; GPU 7", "16,384", "PyTorch 2.5"):
        assert figure in section, figure
    assert "subset:" not in section


def test_blog_checks_compute_their_verdicts(blogcode):
    """Every claim of the blog ends in a verdict with its numbers: the model, the title's
    10x, the 11.3x per kind of code, the epochs on the blog's hardware, the phases, data
    loading as the bottleneck, CPU use, memory, GPU utilisation and memory, small batches,
    FP16, accuracy, best epoch and final loss against the seed spread, the accuracy gap, the
    electricity and its 73 % saving, the totals with the hardware, and the pay-back."""
    checks = _checks(blogcode["html"])
    expected = {
        "The title's 10×": Verdict.CONFIRMED, "The model": Verdict.CONTRADICTED,
        "11.3 ×, the blog's code as written": Verdict.CONTRADICTED,
        "11.3 ×, this project's best code": Verdict.CONTRADICTED,
        "The speed-up column and the time saving": Verdict.CONFIRMED,
        "What the CPU epoch's phases leave unexplained": Verdict.CONTRADICTED,
        "Single core near 100 %": Verdict.CONTRADICTED,
        "Memory about 3.2 GB": Verdict.CONTRADICTED, "GPU memory about 1.8 GB": Verdict.CONFIRMED,
        "Small batches waste the GPU": Verdict.CONFIRMED,
        "FP16 speeds the GPU up": Verdict.CONFIRMED,
        "Final accuracy": Verdict.CONTRADICTED, "Final loss": Verdict.CONTRADICTED,
        "The accuracy gap": Verdict.CONTRADICTED,
        "Electricity of 10 CPU trainings": Verdict.CONTRADICTED,
        "Electricity of 10 GPU trainings": Verdict.CONTRADICTED,
        "The electricity saving": Verdict.CONFIRMED,
        "The total cost of 10 trainings": Verdict.CONTRADICTED,
        "The GPU pays for itself quickly": Verdict.CONFIRMED,
        "Frequent context switches": Verdict.NOT_CHECKABLE,
        "The alternatives": Verdict.NOT_CHECKABLE,
    }
    for title, verdict in expected.items():
        assert checks[title][0] == verdict, (title, checks[title])
    assert all(verdict in set(Verdict) and len(text) > 40 for verdict, text in checks.values())
    assert "9,216 features" in checks["The model"][1] and "1,600" in checks["The model"][1]
    assert "150 W (the blog's CPU system power) × 1.63 h × $0.15/kWh = $0.0367, not $0.37" in \
        checks["Electricity of 10 CPU trainings"][1]
    assert "= $0.00975, not $0.10" in checks["Electricity of 10 GPU trainings"][1]
    assert "73.4 %" in checks["The electricity saving"][1]
    assert "24.2 s (41 %)" in checks["What the CPU epoch's phases leave unexplained"][1]
    summary = selections.with_code(blogcode["tables"].summary)
    conv = summary[(summary["experiment"] == "convergence") & (summary["code"] == "blog")
                   & (summary["device"] == "cpu")]
    use = conv["cpu_pct_mean"].median()
    assert f"used {fmt.num(use, 3, '%')} of a core" in checks["Single core near 100 %"][1]
    rss = conv["peak_rss_mb"].median()
    assert f"({fmt.num(rss, 3, 'MiB')})" in checks["Memory about 3.2 GB"][1]
    for variant in ("the blog's code as written", "this project's best code"):
        verdict, text = checks[f"11.3 ×, {variant}"]
        assert "range of 3 runs a side" in text and "11.3 × is" in text
    assert "504 runs" in checks["The GPU pays for itself quickly"][1]
    assert "seed-to-seed spread" in checks["The accuracy gap"][1]


def _committed_shape(tables):
    """``tables`` shaped like the committed study: the tips baseline runs the blog's code as
    written, the convergence cells this project's tuned code (with the DataLoader, and data
    held in memory)."""
    tables = with_tips(studies.with_blog_code(tables))
    summary = tables.summary.copy()
    conv = summary["experiment"] == "convergence"
    summary.loc[conv, "implementation"] = "tuned"
    return aggregate.Tables(summary, tables.epochs, tables.resources)


def test_a_claim_that_cannot_be_checked_says_why(quick, full, tmp_path):
    """Without GPU cells the GPU-side claims are not checkable, each saying what it needs;
    on the CPU the blog's code comes from the tips experiment's baseline where the
    convergence cells ran other code; the GPU tips are checked where tips cells ran on a
    GPU."""
    checks = _checks(quick["html"])
    for title in ("GPU utilisation peaks at 98 %", "GPU memory about 1.8 GB",
                  "The GPU's advantage is largest in backprop", "FP16 speeds the GPU up",
                  "Small batches waste the GPU", "The blog's GPU tips"):
        verdict, text = checks[title]
        assert verdict == Verdict.NOT_CHECKABLE and ("Needs" in text or "No tips" in text), title
    assert checks["Single core near 100 %"][0] == Verdict.NOT_CHECKABLE  # no blog-code cells
    tips = _checks(studies.write(_committed_shape(full["tables"]), tmp_path))
    assert "tips experiment's baseline" in tips["Single core near 100 %"][1]
    assert tips["Single core near 100 %"][0] == Verdict.CONTRADICTED
    # one rule for the claim: the verdict most of its tips share (cudnn.benchmark is slower
    # here, the others pay off), written beside it
    verdict, text = tips["The blog's GPU tips"]
    assert verdict == Verdict.CONFIRMED and "cudnn.benchmark" in text
    assert re.search(r"cudnn\.benchmark [\d.]+ × \(slower\)", text)
    assert "the claim takes the verdict most of its tips share" in text


def test_a_subset_is_not_comparable_and_the_blog_box_steps_back(quick):
    """With a data subset and one epoch every comparison with the blog says "subset: N
    samples, not comparable", those checks are not checkable, and the blog box steps back."""
    html = quick["html"]
    note = "subset: 6,000 samples, not comparable"
    assert '<aside class="blog stepped-back">' in html and note in section_of(html, "headline")
    side = section_of(html, "blog").split("<tbody>")[1].split("</tbody>")[0]
    rows = re.findall(r"<tr>(.*?)</tr>", side, re.S)
    comparisons = [r for r in rows if "another machine" not in r]
    assert comparisons and all(note in r for r in comparisons)
    checks = _checks(html)
    assert checks["The accuracy gap"][0] == Verdict.NOT_CHECKABLE
    assert checks["Final accuracy"][0] == Verdict.NOT_CHECKABLE
    assert checks["The model"][0] == Verdict.CONTRADICTED  # the blog alone: still checked
    for title, (verdict, text) in checks.items():
        if "Here" in text and "11.3" in title:
            assert verdict == Verdict.NOT_CHECKABLE and note in text, title


def test_full_settings_are_comparable(tenfold):
    """At the blog's full settings nothing says subset and the blog box stands normally."""
    assert '<aside class="blog">' in tenfold["html"] and "subset:" not in tenfold["html"]


# ---------------------------------------------------------------------------- the row specification

def test_the_side_table_is_a_specification_of_the_blogs_rows():
    """BLOG_TABLES holds the blog's tables; every row names a figure of the blog's reference
    data (or a function that words one) and how this study's figure is computed."""
    assert [title for title, _ in blog_check.BLOG_TABLES] == [
        "Test environment", "Settings", "Time per epoch and total",
        "Data loading and backprop, per epoch", "Resources",
        "Accuracy, best epoch, final loss", "Cost of 10 trainings"]
    printed = {}
    for title, rows in blog_check.BLOG_TABLES:
        for row in rows:
            assert callable(row.blog) or row.blog in blog.BLOG, (title, row.label)
            assert callable(row.ours), (title, row.label)
            printed[(title, row.label)] = row.blog_figure()
    assert printed[("Time per epoch and total", "CPU, per epoch")] == "58.7 s"
    assert printed[("Time per epoch and total", "GPU, total")] == "52 s"
    assert printed[("Resources", "memory")] == "3.2 GB"
    assert printed[("Cost of 10 trainings", "GPU, electricity")] == "$0.10"
    assert "–" not in printed.values()


def test_side_rows_compute_this_studys_figures(tenfold):
    """side_by_side() reads the specification: each row's figure of this study is the median
    per kind of code and loader of its column (per epoch where the blog's is), the note the
    subset's unless the row has its own; the section shows them."""
    inputs = selections.Inputs(tenfold["tables"], cost.load_model(None))
    side = {(g["table"], r["what"]): r for g in blog_check.side_by_side(inputs, "NOTE")
            for r in g["rows"]}
    assert len(side) == sum(len(rows) for _, rows in blog_check.BLOG_TABLES)
    cpu = inputs.cells[inputs.cells["device"] == "cpu"]
    names = {"dataloader": "other: tuned code, DataLoader",
             "resident": "this project's best (data held in memory)"}
    epoch = "; ".join(f"{names[loader]}: {fmt.seconds(g['epoch_s_median'].median())}"
                      for loader, g in cpu.groupby("loader"))
    assert side[("Time per epoch and total", "CPU, per epoch")] == {
        "what": "CPU, per epoch", "blog": "58.7 s", "ours": epoch, "note": "NOTE"}
    data = "; ".join(f"{names[loader]}: {fmt.seconds((g['data_s'] / g['epochs']).median())}"
                     for loader, g in cpu.groupby("loader"))
    assert side[("Data loading and backprop, per epoch", "CPU, data loading")]["ours"] == data
    assert side[("Test environment", "GPU")]["note"] == "another machine"
    assert side[("Test environment", "GPU")]["ours"] == "NVIDIA GeForce RTX 4090"
    speedup = side[("Time per epoch and total", "GPU/CPU speed-up, per epoch")]["ours"]
    assert speedup.startswith("other: tuned code, DataLoader: ")
    assert "; this project's best (data held in memory): " in speedup
    shown = visible(section_of(tenfold["html"], "blog"))
    for row in side.values():
        assert row["ours"] in shown, row["what"]
