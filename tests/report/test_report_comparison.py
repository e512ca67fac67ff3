"""Sections decide from the whole study (mnistbench.report.comparison): the devices of one
machine first, then the same code across machines, labelled, then nothing; no section says
"no GPU" or "not measured" for what another environment of the study measured."""

from __future__ import annotations

import re

import pytest

from mnistbench.report import blog, comparison
from mnistbench.report.blog import Verdict
from mnistbench.report.sections import claims
from mnistbench.report.selections import Inputs, with_code
from mnistbench.results import aggregate, cost, stats
from tests.report.test_report_studies import (
    results_of,
    section_of,
    visible,
    with_blog_code,
    write,
)

#: Phrases that deny a device or a comparison; none may appear where the study measured both
#: devices (on one machine or on two).
CONTRADICTIONS = ("no GPU in this study", "none (no GPU)", "without GPU cells",
                  "no CPU cell", "no ok CPU cell", "no ok cpu cell", "not measured yet",
                  "This study has no GPU", "no GPU/CPU speed-up", "no GPU sweep cells",
                  "not in this study: no cuda", "no GPU cell in the sweep",
                  "No GPU and CPU cells")
#: Sections left out of the check: none (the verdict box and the headline are read too).
OTHERS: tuple[str, ...] = ()


def _split(tables, cpu_env: str, gpu_env: str):
    """``tables`` with only the CPU cells of ``cpu_env`` and the GPU cells of ``gpu_env``: a
    study whose CPU and GPU ran on two machines (the published study's shape)."""
    def keep(frame):
        return frame[((frame["env"] == cpu_env) & (frame["device"] == "cpu"))
                     | ((frame["env"] == gpu_env) & (frame["device"] == "cuda"))]
    return aggregate.Tables(keep(tables.summary).reset_index(drop=True),
                            keep(tables.epochs).reset_index(drop=True),
                            keep(tables.resources).reset_index(drop=True))


@pytest.fixture(scope="module")
def two_machines(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("two-machines")
    results = results_of(tmp, envs=("xeon", "h200"), repeats=2, batch_sizes=(64, 128),
                         precisions=("fp32",), convergence_epochs=2)
    tables = _split(with_blog_code(aggregate.load_tables(results)), "xeon", "h200")
    return {"tables": tables, "html": write(tables, tmp)}


@pytest.fixture(scope="module")
def one_machine(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("one-machine")
    results = results_of(tmp, repeats=2, batch_sizes=(64, 128), precisions=("fp32",),
                         convergence_epochs=2)
    tables = with_blog_code(aggregate.load_tables(results))
    return {"tables": tables, "html": write(tables, tmp)}


def _mine(html: str) -> str:
    """The page's visible text but for the sections of :data:`OTHERS`."""
    for name in OTHERS:
        html = html.replace(section_of(html, name), "")
    return visible(html)


@pytest.mark.parametrize("study", ["two_machines", "one_machine"])
def test_no_section_denies_what_the_study_measured(study, request):
    """A study that measured both devices, on one machine or on two, renders no phrase that
    says a device or a CPU/GPU comparison is absent."""
    text = _mine(request.getfixturevalue(study)["html"])
    found = [p for p in CONTRADICTIONS if p in text]
    assert not found, [text[max(0, text.index(p) - 150):text.index(p) + 80] for p in found]


def test_the_contradiction_check_can_fail(tmp_path):
    """The phrases are there when the study has no GPU at all (so the test above reads the
    text those sections write)."""
    results = results_of(tmp_path, devices=("cpu",), repeats=2, batch_sizes=(64, 128),
                         precisions=("fp32",), convergence_epochs=2)
    text = _mine(write(aggregate.load_tables(results), tmp_path))
    assert any(p in text for p in CONTRADICTIONS)


def test_comparison_prefers_one_machine_then_labels_across_machines(two_machines, one_machine):
    """The choice: one machine where an environment measured both devices, else the GPU of
    one against the CPU of the other, named as across machines; none without a side."""
    summary = with_code(one_machine["tables"].summary)
    found = comparison.pair(summary, summary[summary["status"] == "ok"])
    assert found is not None and found.one_machine and found.scope == comparison.ONE_MACHINE
    summary = with_code(two_machines["tables"].summary)
    found = comparison.pair(summary, summary[summary["status"] == "ok"])
    assert found == comparison.Pair("xeon", "h200") and not found.one_machine
    assert found.label() == ("across machines, not like for like: the GPU of h200 against the "
                             "CPU of xeon")
    cpu_only = summary[summary["device"] == "cpu"]
    assert comparison.pair(summary, cpu_only) is None
    assert comparison.device_absence(summary, "cuda", "xeon") == \
        "GPU measured on another machine (h200)"
    assert comparison.device_absence(cpu_only, "cuda") == "no GPU in this study"


def test_two_machines_label_their_speed_ups(two_machines):
    """Across machines, the blog's table and the claims print the speed-up, labelled; on the
    blog's speed-up the claim is decided by its rule, not "not checkable"."""
    html = two_machines["html"]
    blog = visible(section_of(html, "blog"))
    assert re.search(r"GPU/CPU speed-up, per epoch 11\.3 × h200, the blog's code \(DataLoader\) "
                     r"\(across machines, not like for like: the GPU of h200 against the CPU of "
                     r"xeon\): [\d.]+ ×", blog)
    assert "This study's speed-ups: the blog's code as written, across machines" in blog
    convergence = visible(section_of(html, "convergence"))
    assert "across machines, CPU of xeon" in convergence
    gpu = visible(section_of(html, "gpu"))
    assert "ran on another machine than its CPU cells" in gpu
    assert "compares the same code on both devices" not in gpu


def test_the_first_screen_names_both_machines_of_a_speed_up_across_machines(two_machines):
    """The headline chart takes the CPU bars from the other machine, named; the headline
    table has no row for a device another machine measured and gives the GPU rows their
    speed-up against that CPU, labelled; the verdict names both machines with their cores."""
    summary = with_code(two_machines["tables"].summary)
    shown, bars = comparison.headline_bars(summary)
    assert shown == "h200; CPU: xeon, across machines"
    labels = [b.label for b in bars if b.whose == "cpu"]
    assert labels and all(label.startswith("this study, CPU of xeon: ") for label in labels)
    assert not [b for b in bars if b.seconds is None and b.label == "this study, CPU"]
    html = two_machines["html"]
    headline = visible(section_of(html, "headline"))
    assert "not in this study" not in headline and "no ok CPU cell" not in headline
    assert "across machines (CPU: xeon)" in headline
    assert "h200: only its GPU ran at the blog's settings (CPU: xeon)" in headline
    assert "xeon: only its CPU ran at the blog's settings (GPU: h200)" in headline
    verdict = visible(section_of(html, "verdict"))
    assert re.search(r"Seconds per epoch at the blog's settings( \(.+?\))?, across machines: "
                     r"GPU of h200 \(host .+, 16 cores; its CPU ran nothing\), CPU of xeon "
                     r"\(.+, 12 cores\):", verdict)
    assert "This machine (" not in verdict
    for words in ("GPU, the blog's code as written: ", "CPU, the blog's code as written: "):
        assert words in verdict, words


def test_one_machine_compares_like_for_like(one_machine):
    """On one machine nothing is "not like for like"."""
    text = _mine(one_machine["html"])
    assert "not like for like" not in text
    assert "measured the CPU and the GPU of one machine" in visible(
        section_of(one_machine["html"], "gpu"))


def test_the_three_recommendations_are_filled_when_both_devices_were_measured(two_machines,
                                                                             one_machine):
    """When the CPU suffices, from which batch size the GPU pays, and the break-even: computed
    on one machine, and across machines (said so) when the devices ran on two."""
    for study, across in ((one_machine, False), (two_machines, True)):
        text = visible(section_of(study["html"], "recommendations"))
        for title in ("When the CPU suffices", "From which batch size the GPU pays off",
                      "Break-even in runs"):
            part = text.split(title, 1)[1][:400]
            assert not part.lstrip(" #").startswith(("Not computable", "Not measured")), \
                (title, part)
        assert ("across machines, not like for like: the GPU of h200 against the CPU of xeon"
                in text) == across
    text = visible(section_of(two_machines["html"], "recommendations"))
    assert re.search(r"The GPU machine pays for itself after [\d,]+ runs? counting the time "
                     r"you wait", text)


def test_every_claim_has_its_rule_written_beside_it(two_machines):
    """One rule per claim, on the page beside it; only the claims this study does not
    measure have none."""
    inputs = Inputs(two_machines["tables"], cost.load_model(None))
    found = claims.checks(inputs)
    untested = {title for title, _, _ in claims.UNTESTABLE}
    for check in found:
        rule = check.rule
        assert (rule.startswith("none") if check.title in untested
                else not rule.startswith("none")), check.title
    page = visible(section_of(two_machines["html"], "blog"))
    assert page.count("The rule:") == len(found)


def test_within_noise_is_not_distinguishable():
    """A speed-up whose interval holds 1 is "not distinguishable", never "contradicted"."""
    def est(low, high):
        return stats.Estimate((low + high) / 2, low, high, 2, 0.25, "range")

    assert blog.verdict_faster(est(0.69, 1.48)) == Verdict.NOT_DISTINGUISHABLE
    assert blog.verdict_faster(est(0.5, 0.9)) == Verdict.CONTRADICTED
    assert blog.verdict_faster(est(1.1, 1.3)) == Verdict.CONFIRMED
