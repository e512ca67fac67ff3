"""Tests of the report's comparison with the blog (mnistbench.report.sections.headline
and blog_check): the blog's figures beside the headline, its tables beside this study's
(the row specification), the checks with their verdicts, and a subset that is not
comparable."""

from __future__ import annotations

import html as htmllib
import re

import pytest
import test_report_studies as studies
from test_report_studies import (
    section_of,
    visible,
)

from mnistbench.report import blog, selections
from mnistbench.report import formatting as fmt
from mnistbench.report.sections import blog_check
from mnistbench.results import cost, stats


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    return studies.full(tmp_path_factory)


@pytest.fixture(scope="module")
def tenfold(tmp_path_factory):
    return studies.tenfold(tmp_path_factory)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    return studies.quick(tmp_path_factory)


def test_headline_matches_the_data_and_shows_the_blogs_figures(full):
    """Headline seconds per epoch and speed-up are the medians of the data, next to the
    blog's figures as it prints them (5.2 s, not 5.20 s), labelled as another machine."""
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


def _checks(html: str) -> dict[str, tuple[str, str]]:
    """title -> (verdict, text) of every check of the blog section."""
    items = re.findall(r"<li><strong>(.*?)</strong> <span class=\"verdict verdict-[a-z-]+\">"
                       r"(.*?)</span>(.*?)</li>", section_of(html, "blog"), re.S)
    return {htmllib.unescape(t): (v, visible(rest)) for t, v, rest in items}


def test_blog_check_sets_every_table_beside_thisresults_of(tenfold):
    """The side-by-side table has the blog's hardware, time, data loading and backprop,
    resources, accuracy and cost tables, each with this study's numbers; figures the project
    does not hold say so."""
    section = visible(section_of(tenfold["html"], "blog"))
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
        assert "range of 3 runs a side" in text and "11.3 × is" in text
    assert checks["The accuracy gap"][0] in blog.VERDICTS
    assert "seed-to-seed spread" in checks["The accuracy gap"][1]
    cpu_epoch = checks["The CPU epoch on the blog's hardware"]
    assert cpu_epoch[0] in (blog.CONFIRMED, blog.CONTRADICTED)  # the fakes' alpha: i7-12700K


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
    assert checks["The accuracy gap"][0] == blog.NOT_CHECKABLE
    assert checks["The model"][0] == blog.CONTRADICTED  # the blog alone: still checked
    for title, (verdict, text) in checks.items():
        if "Here" in text and "11.3" in title:
            assert verdict == blog.NOT_CHECKABLE and note in text, title


def test_full_settings_are_comparable(tenfold):
    """At the blog's full settings nothing says subset and the blog box stands normally."""
    assert '<aside class="blog">' in tenfold["html"] and "subset:" not in tenfold["html"]


# ---------------------------------------------------------------------------- the row specification

def test_the_side_table_is_a_specification_of_the_blogs_rows():
    """BLOG_TABLES holds the blog's six tables; every row names a figure of the blog's
    reference data (or a function that words one) and how this study's figure is computed;
    a figure the project does not hold prints as such."""
    assert [title for title, _ in blog_check.BLOG_TABLES] == [
        "Hardware", "Time per epoch and total", "Data loading and backprop, per epoch",
        "Resources", "Accuracy, best epoch, final loss", "Cost of 10 trainings"]
    printed = {}
    for title, rows in blog_check.BLOG_TABLES:
        for row in rows:
            assert callable(row.blog) or row.blog in blog.BLOG, (title, row.label)
            assert callable(row.ours), (title, row.label)
            printed[(title, row.label)] = row.blog_figure()
    assert printed[("Time per epoch and total", "CPU, per epoch")] == "58.7 s"
    assert printed[("Time per epoch and total", "GPU, total (10 epochs)")] == (
        "52.0 s (implied: 10 × the epoch)")
    assert printed[("Resources", "peak memory")] == "not in this project's reference data"
    assert printed[("Cost of 10 trainings", "GPU")] == "$0.10 (printed)"


def test_side_rows_compute_this_studys_figures(tenfold):
    """side_by_side() reads the specification: each row's figure of this study is the median
    per loader of its column (per epoch where the blog's is), the note the subset's unless the
    row has its own; the section shows them."""
    inputs = selections.Inputs(tenfold["tables"], cost.load_model(None))
    side = {(g["table"], r["what"]): r for g in blog_check.side_by_side(inputs, "NOTE")
            for r in g["rows"]}
    assert len(side) == sum(len(rows) for _, rows in blog_check.BLOG_TABLES)
    cpu = inputs.cells[inputs.cells["device"] == "cpu"]
    epoch = "; ".join(f"{loader}: {fmt.seconds(g['epoch_s_median'].median())}"
                      for loader, g in cpu.groupby("loader"))
    assert side[("Time per epoch and total", "CPU, per epoch")] == {
        "what": "CPU, per epoch", "blog": "58.7 s", "ours": epoch, "note": "NOTE"}
    data = "; ".join(f"{loader}: {fmt.seconds((g['data_s'] / g['epochs']).median())}"
                     for loader, g in cpu.groupby("loader"))
    assert side[("Data loading and backprop, per epoch", "CPU, data loading")]["ours"] == data
    assert side[("Hardware", "GPU")]["note"] == "another machine"
    assert side[("Hardware", "GPU")]["ours"] == "NVIDIA GeForce RTX 4090"
    speedup = side[("Time per epoch and total", "GPU/CPU speed-up")]["ours"]
    assert speedup.startswith("dataloader: ") and "; resident: " in speedup
    shown = visible(section_of(tenfold["html"], "blog"))
    for row in side.values():
        assert row["ours"] in shown, row["what"]
