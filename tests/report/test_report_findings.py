"""Tests of the report's findings (mnistbench.report.sections.findings) and of busy
machines (mnistbench.report.selections): the sentences with and without a GPU, busy repeats
flagged and left out."""

from __future__ import annotations

import re

from mnistbench.report import formatting as fmt
from mnistbench.report import selections
from mnistbench.results import aggregate, stats
from tests.fakes import with_load, with_tips
from tests.report import test_report_studies as studies
from tests.report.test_report_studies import (
    section_of,
    visible,
)


def test_findings_state_speedup_phase_cost_accuracy_and_hardware(blogcode):
    """With a GPU the findings give the speed-up per kind of code with its interval, the
    phase behind it, the energy and cost per run on both devices with the break-even, the
    accuracy difference against the seed spread and the hardware, in three to six
    sentences."""
    findings = section_of(blogcode["html"], "findings")
    sentences = re.findall(r"<p>(.*?)</p>", findings, re.S)
    assert 3 <= len(sentences) <= 6 and all(s.strip() for s in sentences)
    text = visible(findings)
    assert "the GPU trains an epoch faster than the CPU by" in text
    assert "(range of 3 runs a side:" in text
    assert "with the blog's code as written with the DataLoader" in text
    assert "with this project's best code with data held in memory" in text
    assert "explains most of it" in text and "per epoch on the CPU against" in text
    assert re.search(r"takes [\d.,]+ Wh \([\d.,]+ EUR of electricity\) on the CPU", text)
    assert re.search(r"it costs [\d.,]+ EUR on the CPU and [\d.,]+ EUR on the GPU", text)
    assert "pays for itself after" in text
    assert "a difference of" in text and "its seed-to-seed spread is" in text
    assert ("Hardware: CPU 12th Gen Intel(R) Core(TM) i7-12700K (12 cores, 20 threads); GPU "
            "NVIDIA GeForce RTX 4090, driver 570.124.06") in text
    assert "loader" not in text  # "the DataLoader", "data held in memory"


def test_a_speedup_compares_one_kind_of_code(blogcode, tenfold):
    """The findings' speed-ups are the CPU's median over the GPU's between cells of one kind
    of code; the fakes' DataLoader cells (tuned code) say they are other settings, never the
    blog's code."""
    summary = selections.with_code(blogcode["tables"].summary)
    conv = summary[(summary["experiment"] == "convergence") & (summary["code"] == "blog")]
    est = stats.ratio_ci(conv.loc[conv["device"] == "cpu", "epoch_s_median"],
                         conv.loc[conv["device"] == "cuda", "epoch_s_median"])
    findings = visible(section_of(blogcode["html"], "findings"))
    assert f"{fmt.ratio_phrase(est)} with the blog's code as written" in findings
    other = visible(section_of(tenfold["html"], "findings"))
    assert "the blog's code as written" not in other
    assert "with other settings: this project's tuned code with the DataLoader" in other


def test_every_number_of_the_findings_is_in_a_table(blogcode, quick, tmp_path):
    """Each number a finding quotes (with its unit) is one that a table of the same report
    shows: with a GPU, without one (the quick study), and with the blog's code in several
    environments."""
    results = studies.results_of(tmp_path, envs=("alpha", "beta"), devices=("cpu",),
                                 repeats=2, batch_sizes=(64, 128), precisions=("fp32", "bf16"),
                                 convergence_epochs=2)
    cpu_only = studies.write(studies.with_blog_code(aggregate.load_tables(results)), tmp_path)
    for html in (blogcode["html"], quick["html"], cpu_only):
        tables = studies.table_numbers(html)
        findings = visible(section_of(html, "findings"))
        quoted = studies.numbers(findings)
        assert len(quoted) > 10, findings
        missing = [n for n in quoted if n not in tables]
        assert missing == [], (missing, findings)


def test_the_cpu_accuracy_is_the_dataloader_cells_not_both_loaders(quick):
    """Without a GPU the accuracy finding quotes the DataLoader's cells, as the convergence
    table shows them (the median over both loaders is no cell's)."""
    summary = quick["tables"].summary
    conv = summary[(summary["experiment"] == "convergence") & (summary["device"] == "cpu")]
    dataloader = fmt.num(conv.loc[conv["loader"] == "dataloader", "final_test_acc"].median(),
                         4, "%")
    text = visible(section_of(quick["html"], "findings"))
    assert f"Final test accuracy is {dataloader} on the CPU (other settings: this project's " \
           "tuned code with the DataLoader)" in text
    assert dataloader in visible(section_of(quick["html"], "convergence"))


def test_findings_without_a_gpu_say_so_and_point_to_the_how_to(quick):
    """Without a GPU the findings say so and where the how-to is (its own section, with the
    three ways), and what the CPU study found: this project's best against the DataLoader,
    precision and best batch size."""
    text = visible(section_of(quick["html"], "findings"))
    assert "This study has no GPU" in text and '"Adding a GPU" says how to add one' in text
    assert "--gpus all" not in text
    how = visible(section_of(quick["html"], "gpu"))
    assert "results/runs/" in how and "--gpus all" in how and "SLURM" in how
    assert "trains an epoch" in text and "faster than other settings" in text
    assert "bf16 gives" in text and "the best throughput is" in text
    assert "no GPU" in text.split("Hardware:")[1]


def test_busy_cells_are_flagged_and_left_out_of_the_findings(tenfold):
    """A busy repeat is marked in the tables with the machine's load, and the findings'
    speed-up is computed without it."""
    html, summary = tenfold["html"], tenfold["tables"].summary
    assert "busy: 1 of 3 busy (machine 91 % busy)" in visible(section_of(html, "headline"))
    assert "busy: 1 of 3 busy" in visible(section_of(html, "time"))
    findings = visible(section_of(html, "findings"))
    assert "1 cell ran on a busy machine" in findings and "1 of them left out" in findings
    conv = summary[(summary["experiment"] == "convergence") & (summary["loader"] == "dataloader")]
    quiet = conv[conv["cell"] != tenfold["busy"][2]]
    est = stats.ratio_ci(quiet.loc[quiet["device"] == "cpu", "epoch_s_median"],
                         quiet.loc[quiet["device"] == "cuda", "epoch_s_median"])
    assert f"by {fmt.num(est.value, 3, '×')} (range of" in findings


def test_busy_flag_as_bools_and_absent(full):
    """busy read as bools flags the same cells as busy read as text; a summary without the
    column (older results) flags none."""
    summary = full["tables"].summary
    key = ("alpha", "convergence", summary["cell"].iloc[0])
    as_text = with_load(full["tables"], {key: 60.0}).summary
    as_bool = with_load(full["tables"], {key: 60.0}, as_text=False).summary
    assert selections.busy_mask(as_text).tolist() == selections.busy_mask(as_bool).tolist()
    assert selections.busy_mask(as_text).sum() == 1
    assert not selections.busy_mask(summary).any()
    assert selections.discount_busy(summary) == (summary, 0)
    assert "busy:" not in full["html"]


def test_a_tip_whose_every_repeat_was_busy_is_kept(full):
    """Busy repeats are left out only where a quiet repeat of the same cell exists, and a
    tip's cells are not the same cell as another tip's (they share every other setting): a
    tip whose every repeat was busy keeps them; one with a quiet repeat loses the busy one."""
    tables = with_tips(full["tables"], repeats=2)
    busy = {("alpha", "tips", "cpu-compile-r0"): 90.0, ("alpha", "tips", "cpu-compile-r1"): 90.0,
            ("alpha", "tips", "cpu-resident-r0"): 90.0}
    summary = with_load(tables, busy).summary
    quiet, dropped = selections.discount_busy(summary)
    assert dropped == 1
    assert set(summary["cell"]) - set(quiet["cell"]) == {"cpu-resident-r0"}
