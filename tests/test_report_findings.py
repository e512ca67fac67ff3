"""Tests of the report's findings (mnistbench.report.sections.findings) and of busy
machines (mnistbench.report.selections): the sentences with and without a GPU, busy repeats
flagged and left out."""

from __future__ import annotations

import re

import pytest
import test_report_studies as studies
from fakes import with_load, with_tips
from test_report_studies import (
    section_of,
    visible,
)

from mnistbench.report import formatting as fmt
from mnistbench.report import selections
from mnistbench.results import stats


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    return studies.full(tmp_path_factory)


@pytest.fixture(scope="module")
def tenfold(tmp_path_factory):
    return studies.tenfold(tmp_path_factory)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    return studies.quick(tmp_path_factory)


def test_findings_state_speedup_phase_cost_accuracy_and_hardware(tenfold):
    """With a GPU the findings give the speed-up per loader with its interval, the phase
    behind it, the cost per run on both devices with the break-even, the accuracy difference
    against the seed spread and the hardware, in three to six sentences."""
    findings = section_of(tenfold["html"], "findings")
    sentences = re.findall(r"<p>(.*?)</p>", findings, re.S)
    assert 3 <= len(sentences) <= 6 and all(s.strip() for s in sentences)
    text = visible(findings)
    assert "the GPU trains an epoch faster than the CPU by" in text
    for loader in ("dataloader", "resident"):
        assert f"with the {loader} loader (range of" in text
    assert "explains most of it" in text and "per epoch on the CPU against" in text
    assert re.search(r"costs [\d.,]+ EUR on the CPU and [\d.,]+ EUR on the GPU", text)
    assert "pays for itself after" in text
    assert "a difference of" in text and "seed-to-seed spread measured here" in text
    assert ("Hardware: CPU 12th Gen Intel(R) Core(TM) i7-12700K (12 cores, 20 threads); GPU "
            "NVIDIA GeForce RTX 4090, driver 570.124.06") in text


def test_findings_without_a_gpu_say_so_and_how_to_add_one(quick):
    """Without a GPU the findings say so, how to add one (another machine's runs, the CUDA
    image, SLURM) and what the CPU study found: loader, precision and best batch size."""
    text = visible(section_of(quick["html"], "findings"))
    assert "This study has no GPU" in text
    assert "results/runs/" in text and "--gpus all" in text and "SLURM" in text
    assert "resident data makes an epoch" in text
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
    assert f"by {fmt.num(est.value, 3, '×')} with the dataloader loader" in findings


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
