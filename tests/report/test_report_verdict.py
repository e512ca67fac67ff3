"""Tests of the first screen (mnistbench.report.sections.verdict): the verdict box, generated
from the data and at most 200 words, its headline chart, the section on adding a GPU; and
that every headline figure says which code it comes from, a speed-up comparing one kind of
code only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mnistbench.core import study
from mnistbench.report import selections
from mnistbench.report.blog import Verdict
from mnistbench.report.sections import claims, verdict
from mnistbench.results import aggregate, cost
from tests.report import test_report_studies as studies
from tests.report.test_report_studies import section_of, visible

COMMITTED = Path(__file__).resolve().parents[2] / "report" / "data"


def _box(html: str) -> str:
    section = section_of(html, "verdict")
    return visible(section.split('<div class="verdict-box">')[1].split("</div>")[0])


def test_the_verdict_box_with_a_gpu(blogcode):
    """With a GPU the box gives the speed-up per kind of code, this machine's epoch for the
    blog's code and for this project's best beside the blog's 58.7 s and 5.2 s (another
    machine), and the claims tallied with the strongest named, in at most 200 words."""
    box = _box(blogcode["html"])
    assert len(box.split()) <= verdict.MAX_WORDS
    assert re.search(r"GPU speed-up: [\d.]+ × with the blog's code as written and [\d.]+ × "
                     r"with this project's best code", box)
    assert re.search(r"CPU, the blog's code as written: [\d.]+ s", box)
    assert re.search(r"GPU, this project's best code: [\d.]+ s", box)
    assert "The blog, on another machine: 58.7 s on its CPU" in box and "5.2 s on its GPU" in box
    inputs = selections.Inputs(blogcode["tables"], cost.load_model(None))
    found = claims.checks(inputs)
    tally = claims.tally(found)
    assert (f"The blog's {len(found)} claims, checked here: {tally[Verdict.CONFIRMED]} "
            f"confirmed, {tally[Verdict.CONTRADICTED]} contradicted, "
            f"{tally[Verdict.NOT_DISTINGUISHABLE]} not distinguishable, "
            f"{tally[Verdict.NOT_CHECKABLE]} not checkable") in box
    assert sum(tally.values()) == len(found)
    strongest = claims.strongest(found)
    assert len(strongest) == 3 and all(c.verdict != Verdict.NOT_CHECKABLE for c in strongest)
    for check in strongest:
        assert f"{check.verdict}: {check.short}" in box


def test_the_verdict_box_without_a_gpu_says_why(quick):
    """Without a GPU: "not measured yet" with the reason in a few words, the blog's code
    "not run here" when no cell ran it, and the how-to in its own short section further
    down."""
    box = _box(quick["html"])
    assert "GPU speed-up: not measured yet (its GPU cells were unavailable (no CUDA GPU is " \
           "visible to torch))." in box
    assert "CPU, the blog's code as written: not run here" in box
    assert "CPU, this project's best code:" in box
    assert "subset: 6,000 samples, not comparable" in box
    assert len(box.split()) <= verdict.MAX_WORDS
    html = quick["html"]
    assert html.index('<section id="verdict">') < html.index('<section id="findings">')
    assert html.index('<section id="recommendations">') < html.index('<section id="gpu">')
    assert "docker run --gpus all" in section_of(html, "gpu")


@pytest.mark.slow
@pytest.mark.skipif(not (COMMITTED / "summary.csv").is_file(), reason="no committed study")
def test_the_committed_studys_verdict_is_honest_about_its_code(tmp_path):
    """The committed study's verdict names each CPU figure by the code its cell recorded it
    ran (study.code_kind: the blog's code as written only for the stock, glibc, no-worker
    DataLoader cell), with that cell's epoch time, within 200 words; the headline names the
    same kinds, once per environment that ran them."""
    tables = aggregate.load_tables(COMMITTED)
    model = cost.load_model(COMMITTED / "cost_model.json")
    inputs = selections.Inputs(tables, model)
    context = verdict.context(inputs)
    assert verdict.word_count(context) <= verdict.MAX_WORDS
    summary = tables.summary
    # The H200 measured only its GPU, the Xeon VMs only their CPU: a speed-up across machines,
    # said to be so, per kind of code, against the CPU environment with the most cells.
    conv = inputs.cells  # the blog's settings, each cell's kind of code (study.code_kind)
    codes = conv[selections.CODE]
    cpu_envs = set(conv[conv["device"] == "cpu"]["env"])
    big = summary[summary["env"].isin(cpu_envs)]["env"].value_counts().index[0]

    def median(env, device, kind):
        part = conv[(conv["env"] == env) & (conv["device"] == device) & (codes == kind)]
        return part["epoch_s_median"].median()

    gpu_env = next(e for e in summary["env"].unique() if (conv[conv["env"] == e]["device"]
                                                           == "cuda").any())
    blog_ratio = median(big, "cpu", "blog") / median(gpu_env, "cuda", "blog")
    best_ratio = median(big, "cpu", "best") / median(gpu_env, "cuda", "best")
    said = context["verdict_speedup"]
    assert said.startswith("GPU speed-up across machines (none measured its CPU and its GPU, "
                           "so not like for like): ")
    found = [float(x) for x in re.findall(r"([\d.]+) × with", said)]
    assert found == pytest.approx([blog_ratio, best_ratio], rel=0.01)
    assert f"in {gpu_env} against " in said and said.endswith(f"in {big}).")
    cells = summary[(summary["experiment"] == "convergence") & (summary["status"] == "ok")]
    kinds = {env: {(r.device, study.code_kind(r.loader, r.implementation, r.allocator_loaded,
                                              r.workers)): r for r in part.itertuples()}
             for env, part in cells.groupby("env")}
    # Both machines of the speed-up, each with its cores: the GPU's host (whose CPU ran no
    # cell) and the CPU environment divided by.
    machine = context["verdict_machine"]
    assert machine.startswith("Seconds per epoch at the blog's settings")
    assert re.search(rf"across machines: GPU of {gpu_env} \(host .+, 16 cores; its CPU ran "
                     rf"nothing\), CPU of {big} \(.+, 2 cores\):$", machine), machine
    lines = context["verdict_epochs"]
    for shown, device in ((gpu_env, "cuda"), (big, "cpu")):
        for dev, kind in kinds[shown]:
            if dev != device:
                continue
            label = "the blog's code as written" if kind == "blog" else "this project's best code"
            name = "CPU" if device == "cpu" else "GPU"
            line = next(line for line in lines if line.startswith(f"{name}, {label}: "))
            assert float(line.split(": ")[1].removesuffix(" s")) == pytest.approx(
                median(shown, device, kind), rel=0.01)
    for env_kinds in kinds.values():
        for (_, kind), cell in env_kinds.items():
            if kind == "blog":
                assert (cell.implementation, cell.allocator_loaded, cell.workers) == (
                    "stock", "glibc", 0)
    headline = section_of(studies.write(tables, tmp_path, model=model), "headline")
    body = visible(headline.split("<tbody>")[1].split("</tbody>")[0])
    ran_blog = sum(kind == "blog" for env_kinds in kinds.values() for _, kind in env_kinds)
    assert body.count("the blog's code") == ran_blog


def test_headline_rows_name_their_code_and_compare_one_kind(blogcode, tmp_path):
    """Every headline row names the code it ran; a GPU row is compared only with a CPU row of
    the same kind: with the CPU's DataLoader cells turned into other code, the GPU's DataLoader
    row has no speed-up and says why."""
    rows = re.findall(r"<tr>(.*?)</tr>", section_of(blogcode["html"], "headline").split(
        "<tbody>")[1].split("</tbody>")[0], re.S)
    codes = [re.findall(r"<td>(.*?)</td>", r)[2] for r in rows]
    assert sorted(set(codes)) == ["the blog&#39;s code", "this project&#39;s best"]
    tables = blogcode["tables"]
    summary = tables.summary.copy()
    cpu_dl = ((summary["experiment"] == "convergence") & (summary["device"] == "cpu")
              & (summary["loader"] == "dataloader"))
    summary.loc[cpu_dl, "implementation"] = "tuned"
    html = studies.write(aggregate.Tables(summary, tables.epochs, tables.resources), tmp_path)
    headline = visible(section_of(html, "headline"))
    assert "no ok CPU cell of the same code with the DataLoader" in headline
    findings = visible(section_of(html, "findings"))
    assert "with the blog's code as written" not in findings
