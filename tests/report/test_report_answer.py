"""Tests of the answer measured on one machine and of the CPU's scaling with threads
(mnistbench.report.sections.answer and .threads; issue 38): every figure computed here again
from the cells, the intervals at their stated coverage with their n, the verdict led by the
one-machine figures with the convergence cells' figure as a labelled second line, the blog's
"one core" claim decided by the threads curve, same-hardware environments never pooled, and
nothing rendered for a study without such cells."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mnistbench.report import blog, selections
from mnistbench.report.blog import Verdict
from mnistbench.report.formatting import num, ratio_interval
from mnistbench.report.sections import answer, claims, threads
from mnistbench.results import aggregate, cost, stats
from tests.report.test_report_studies import (
    results_of,
    section_of,
    visible,
    with_blog_code,
    write,
)

SHAPE = {"experiments": ("convergence", "headline", "threads"), "repeats": 6,
         "convergence_epochs": 5, "batch_sizes": (128,), "precisions": ("fp32",)}


def _tables(tmp: Path, **options):
    return with_blog_code(aggregate.load_tables(results_of(tmp, **{**SHAPE, **options})))


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("answer")
    tables = _tables(tmp)
    return {"tables": tables, "html": write(tables, tmp),
            "inputs": selections.Inputs(tables, cost.load_model(None))}


def _rates(summary, experiment, device, loader, threads=None):
    part = summary[(summary["experiment"] == experiment) & (summary["device"] == device)
                   & (summary["loader"] == loader) & (summary["status"] == "ok")]
    if threads is not None:
        part = part[part["threads_asked"] == threads]
    return part["samples_per_s"].tolist()


def test_the_one_machine_ratios_are_the_cells_medians_with_90_percent_intervals(study):
    """GPU over CPU per code and best over blog per device: the ratio of the median rates of
    6 interleaved runs a side, with an interval of at least 90 % (6 runs a side give 93.9 %),
    printed with its n."""
    summary = study["tables"].summary
    text = visible(section_of(study["html"], "answer"))
    assert "Environment alpha (the environment that measured its CPU and its GPU" in text
    for code, loader in (("the blog's code as written", "dataloader"),
                         ("this project's best code", "resident")):
        est = stats.ratio_ci(_rates(summary, "headline", "cuda", loader),
                             _rates(summary, "headline", "cpu", loader), 0.90)
        assert est.n == 6 and est.coverage >= 0.90 and est.low <= est.value <= est.high
        line = f"GPU over CPU, {code}: {num(est.value, 3, '×')} ({ratio_interval(est)})"
        assert line in text, line
        assert "90 % CI" in ratio_interval(est) and "6 runs a side" in ratio_interval(est)
    for device, name in (("cpu", "CPU"), ("cuda", "GPU")):
        est = stats.ratio_ci(_rates(summary, "headline", device, "resident"),
                             _rates(summary, "headline", device, "dataloader"), 0.90)
        assert (f"this project's best over the blog's code on the {name}: "
                f"{num(est.value, 3, '×')}") in text


def test_the_short_cells_are_set_against_the_steady_epochs(study):
    """Each code's short-cell rate beside the median rate of its convergence cells' epochs
    from epoch 4 on, and whether they agree within 5 %."""
    tables = study["tables"]
    epochs = tables.epochs
    conv = epochs[(epochs["experiment"] == "convergence") & (epochs["device"] == "cpu")
                  & (epochs["loader"] == "dataloader") & (epochs["epoch"] >= 4)]
    steady = stats.spread(conv["samples_per_s"])[0]
    fast = stats.spread(_rates(tables.summary, "headline", "cpu", "dataloader"))[0]
    found = selections.steady_agreement(study["inputs"].summary, epochs, "alpha", "cpu", "blog")
    assert found[:2] == pytest.approx((fast, steady)) and found[3] == len(conv)
    text = visible(section_of(study["html"], "answer"))
    verdict = "agrees" if abs(fast / steady - 1) <= 0.05 else "does NOT agree"
    assert (f"{num(fast, 3)} against {num(steady, 3)} samples/s in {len(conv)} steady epochs "
            f"(epoch 4 on)") in text and verdict in text


def test_the_verdict_leads_with_the_one_machine_figures(study):
    """The box's first line is the GPU over its own CPU per code with interval and n; the
    convergence cells' figure follows as a labelled second line."""
    box = visible(section_of(study["html"], "verdict").split('<div class="verdict-box">')[1]
                  .split("</div>")[0])
    first = re.search(r"GPU speed-up on one machine \(alpha: .*?\): (.*?)\. This project's",
                      box)
    assert first and "90 % CI" in first.group(1) and "6 runs a side" in first.group(1)
    assert box.index("GPU speed-up on one machine") < box.index(
        "Second line, from the 10-epoch convergence cells: GPU speed-up")


def test_the_threads_curve_and_the_one_core_claim(study):
    """Both codes at 1, 2 and 4 threads with the threads asked for and got and the
    DataLoader's; the blog's "no effective parallel computing" decided from the blog's code
    at 4 threads over 1, by blog.verdict_parallel, in the section and in the claims."""
    summary = study["tables"].summary
    text = visible(section_of(study["html"], "threads"))
    gain = stats.ratio_ci(_rates(summary, "threads", "cpu", "dataloader", 4),
                          _rates(summary, "threads", "cpu", "dataloader", 1))
    verdict = blog.verdict_parallel(gain)
    assert verdict == Verdict.CONTRADICTED  # the fakes' arithmetic scales as threads^0.7
    assert (f"{verdict}: the blog's code trained {num(gain.value, 3, '×')} as fast on 4 "
            "threads as on 1") in text
    for code in ("the blog's code as written", "this project's best code"):
        assert f"{code}: " in text
    rows = threads.context(study["inputs"])["threads_tables"]
    assert [r["threads"] for r in rows[0]["rows"]] == ["1", "2", "4"]
    assert [r["loader"] for r in rows[0]["rows"]] == ["1"] * 3  # the blog's: no workers
    assert [r["loader"] for r in rows[1]["rows"]] == ["0"] * 3  # data held in memory
    check = next(c for c in claims.checks(study["inputs"])
                 if c.title == "Single core near 100 %")
    assert check.verdict == verdict and "Decided by the threads experiment" in \
        check.numbers


@pytest.mark.parametrize(("low", "high", "verdict"), [
    (1.3, 2.0, Verdict.CONTRADICTED), (0.9, 1.2, Verdict.CONFIRMED),
    (1.1, 1.4, Verdict.NOT_CHECKABLE)])
def test_verdict_parallel_by_the_interval(low, high, verdict):
    est = stats.Estimate((low + high) / 2, low, high, 3, 0.56, "ratio")
    assert blog.verdict_parallel(est) == verdict
    assert blog.verdict_parallel(None) == Verdict.NOT_CHECKABLE


def test_same_hardware_environments_are_listed_apart_never_pooled(tmp_path):
    """Two environments of one machine (local and container) with headline cells: the one
    with both devices and the most runs leads, named with why; the other has its own line."""
    tables = _tables(tmp_path, envs=("alpha", "alpha-docker"),
                     gpu={"alpha": True, "alpha-docker": False})
    inputs = selections.Inputs(tables, cost.load_model(None))
    env, why = selections.one_machine_env(inputs.summary)
    assert env == "alpha" and "measured its CPU and its GPU" in why
    context = answer.context(inputs)
    assert [o["env"] for o in context["answer_others"]] == ["alpha-docker"]
    other = selections.one_machine(inputs.summary, "alpha-docker")
    mine = stats.ratio_ci(_rates(tables.summary[tables.summary["env"] == "alpha-docker"],
                                 "headline", "cpu", "resident"),
                          _rates(tables.summary[tables.summary["env"] == "alpha-docker"],
                                 "headline", "cpu", "dataloader"), 0.90)
    assert other.best_over_blog["cpu"].value == pytest.approx(mine.value)


def test_a_cpu_only_study_gives_best_over_blog_and_a_study_without_them_nothing(tmp_path):
    """CPU only: the box's first line is best over blog on the CPU; a study without headline
    and threads cells renders neither section nor its link."""
    tables = _tables(tmp_path / "a", devices=("cpu",))
    html = write(tables, tmp_path / "a")
    box = visible(section_of(html, "verdict"))
    assert "This project's best over the blog's code, same machine:" in box
    assert "GPU speed-up on one machine" not in box
    plain = with_blog_code(aggregate.load_tables(results_of(
        tmp_path / "b", **{**SHAPE, "experiments": ("convergence",)})))
    html = write(plain, tmp_path / "b")
    for key in ('id="answer"', 'id="threads"', 'href="#answer"', 'href="#threads"',
                "Second line"):
        assert key not in html
