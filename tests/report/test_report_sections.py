"""Tests of the report's sections by their numbers (mnistbench.report.sections): headline
and one repeat, a missing GPU, two machines, where the time goes, convergence and resources,
cost, tips, recommendations, the matrix, runtimes and the methodology."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from mnistbench.core import schema, study
from mnistbench.report import formatting as fmt
from mnistbench.results import aggregate, cost, stats
from tests.fakes import cell_id
from tests.report.test_report_studies import (
    render,
    results_of,
    section_of,
    visible,
    write,
)


def test_one_epoch_study_says_one_epoch(quick):
    """A one-epoch study's headline says "total (1 epoch)", never "1 epochs" (the no-data
    sentences: tests/report/test_report.py and test_report_formatting.py)."""
    html = quick["html"]
    assert "total (1 epoch)" in html and "1 epochs" not in html


@pytest.mark.slow
def test_one_repeat_says_there_is_no_interval(tmp_path):
    """With one repeat the report shows no interval and says why."""
    html = render(results_of(tmp_path, repeats=1, batch_sizes=(128,), convergence_epochs=2))
    assert "no interval: 1 run" in html
    assert "Rows with one repeat have no confidence interval" in html
    assert "95 % CI" not in html


@pytest.mark.slow
def test_every_gpu_cell_unavailable(tmp_path):
    """On a machine without a GPU the cuda cells are listed as unavailable with the reason,
    and the headline keeps a cuda row that gives it."""
    results = results_of(tmp_path, gpu=False, repeats=2, batch_sizes=(64,), convergence_epochs=2)
    html = render(results)
    summary = aggregate.load_tables(results).summary
    unavailable = int((summary["status"] == "unavailable").sum())
    assert unavailable == int((summary["device"] == "cuda").sum()) > 0
    assert f"{unavailable} unavailable" in html
    row = re.search(r'<tr class="absent"><td>cuda</td>.*?</tr>', section_of(html, "headline"),
                    re.S)
    assert row and f"unavailable ({unavailable} cells): no CUDA GPU is visible to torch" in \
        visible(row.group(0))


@pytest.mark.slow
def test_two_machines_side_by_side_with_hostile_host_names(tmp_path):
    """Results merged from two machines show both envs side by side; a hostile host name
    and env name are escaped everywhere."""
    results = results_of(tmp_path, envs=("alpha", "beta&<b>"), repeats=2, batch_sizes=(128,),
                     precisions=("fp32", "bf16"), convergence_epochs=2, gpu={"beta&<b>": False},
                     hostnames={"alpha": '"><img src=x onerror=alert(1)>', "beta&<b>": "b"})
    html = render(results)
    assert "<th>field</th><th>alpha</th><th>beta&amp;&lt;b&gt;</th>" in html
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<img src=x" not in html
    assert "<th>env</th>" in html  # env column in the tables
    assert "AMD EPYC 7763" in html and "i7-12700K" in html
    assert "beta&amp;&lt;b&gt;: CPU AMD EPYC 7763" in section_of(html, "findings")


def test_loader_gain_carries_its_interval(full):
    """"faster in memory by" gives its interval beside the ratio, and each side names the
    code it ran; the phases' medians are a table too."""
    section = section_of(full["html"], "phases")
    table = section.split("faster in memory by")[1]
    assert re.search(r"[\d.]+ ×<br><small>(95 % CI|range of \d+ runs|[\d.]+–)", table)
    assert "code, DataLoader" in section and "this project&#39;s best" in table
    assert "<th>backward</th>" in section and "<th>other (loop)</th>" in section


def test_convergence_and_resource_tables_summarise_repeats(full):
    """Convergence rows give median (min – max) over repeats; resources give peak memory
    and mean CPU package power from the energy counter."""
    html, summary = full["html"], full["tables"].summary
    conv = summary[(summary["experiment"] == "convergence") & (summary["device"] == "cpu")
                   & (summary["loader"] == "resident")]
    acc = conv["final_test_acc"]
    expected = (f"{fmt.num(acc.median(), 4, '%')} ({fmt.num(acc.min(), 4, '%')} – "
                f"{fmt.num(acc.max(), 4, '%')})")
    assert expected in html
    section = section_of(html, "resources")
    assert "125 W" in section  # fakes: 125 W CPU package power while training on the CPU
    assert "MiB" in section and "mean GPU power" in section
    assert "lowest, named in the legend" in section


def test_cost_section_names_each_basis_once_and_leads_with_energy(full):
    """The cost section opens with the energy and electricity of a run; each column names
    its basis (measured, mixed) once in its header where every row shares it, not on every
    cell; waiting's value is labelled an assumption; the break-even table is present."""
    html = section_of(full["html"], "cost")
    first = visible(html.split("</p>")[0])
    assert first.startswith("Energy and cost Energy and electricity first, the blog's measure")
    assert re.search(r"takes [\d.]+ Wh, [\d.]+ EUR of electricity, on the CPU", first)
    one_run = html.split("<h3>One run</h3>")[1].split("</table>")[0]
    head, body = one_run.split("<tbody>")
    assert head.count("basis-measured") >= 1 and head.count("basis-mixed") >= 4
    assert "basis-" not in body
    assert "waiting (assumed value)" in head
    assert "Waiting is valued at 20.0 EUR per hour: an assumption of the cost model" in \
        visible(html)
    assert "Break-even" in html and "extra price of the GPU machine" in html
    assert "EUR" in html and "built-in default" in html


def test_assumed_power_times_measured_time_is_mixed_and_waiting_is_named(tmp_path):
    """Without energy counters the energy, electricity, hardware and waiting of a run are
    tagged mixed (an assumed power or rate times a measured time), never assumed, and the
    report says when waiting dominates the cost."""
    html = render(results_of(tmp_path, energy=False, experiments=("convergence",), repeats=2,
                          convergence_epochs=2))
    one_run = section_of(html, "cost").split("<h3>One run</h3>")[1].split("</table>")[0]
    thead = one_run.split("<tbody>")[0]
    # energy, electricity, hardware, the machine per run and per epoch, waiting, total
    assert "basis-assumed" not in one_run and thead.count("basis-mixed") == 7
    assert "Waiting dominates the cost" in html


def test_tips_section_reads_the_tip_column(tenfold):
    """Each tip gets its speed-up over the baseline with an interval, its accuracy effect and
    a verdict per device; a tip that does not apply to the CPU is n/a with the reason; a tip
    that failed shows its status and reason."""
    section = section_of(tenfold["html"], "tips")
    rows = {re.search(r"<code>(.*?)</code>", r).group(1): visible(r)
            for r in re.findall(r"<tr>(.*?)</tr>", section.split("<tbody>")[1], re.S)}
    assert list(rows) == [t.name for t in study.TIPS if t.name not in ("blog-all",)]
    assert "1× (baseline)" in rows["baseline"]
    assert rows["pin_memory"].count("n/a") == 1 and "only speeds up copies to a GPU" in \
        rows["pin_memory"]
    assert "cuDNN is NVIDIA's GPU library" in rows["cudnn.benchmark"]
    assert "pays off" in rows["workers=4"] and "range of" not in rows["workers=4"]
    assert "Intervals: each a range of 3 runs a side, at least 56 % coverage." in visible(
        section)  # named once, in the table's caption
    assert "slower" in rows["cudnn.benchmark"]
    assert "points" in rows["resident"]
    assert "oom CUDA out of memory while compiling" in rows["compile"]
    tips = tenfold["tables"].summary
    tips = tips[(tips["experiment"] == "tips") & (tips["device"] == "cpu")]
    est = stats.ratio_ci(tips.loc[tips["tip"] == "baseline", "epoch_s_median"],
                         tips.loc[tips["tip"] == "resident", "epoch_s_median"])
    assert (f"{fmt.num(est.value, 3, '×')} {fmt.num(est.low, 3)}–{fmt.num(est.high, 3)} ×"
            in rows["resident"])


def test_tips_section_says_not_measured_without_tips_cells(full):
    """Without cells of the tips experiment the section says so instead of being empty."""
    text = visible(section_of(full["html"], "tips"))
    assert "Not measured in this study: no cells of the tips experiment" in text


def test_recommendations_show_the_numbers_behind_them(tenfold):
    """When the CPU suffices, from which batch size the GPU pays off, and the break-even in
    runs, each with its numbers, computed from the cost model and the data."""
    section = section_of(tenfold["html"], "recommendations")
    titles = re.findall(r"<h3>(.*?)</h3>", section)
    assert titles == ["On the CPU: the levers that pay off, and those to avoid",
                      "What bf16 is worth on the CPU", "When the CPU suffices",
                      "From which batch size the GPU pays off", "Break-even in runs"]
    text = visible(section)
    result = cost.compute(tenfold["tables"].summary, tenfold["tables"].epochs,
                          cost.load_model(None))
    be = next(b for b in result.break_even if b.loader == "dataloader")
    assert f"below {be.runs_with_waiting:,.0f} training runs" in text
    assert f"after {be.runs_with_waiting:,.0f} runs counting the time you wait" in text
    assert "batch 32:" in text and "an hour costs" in text
    assert section.count("<li>") >= 6


def test_recommendations_without_a_gpu_say_what_is_missing(quick):
    """Without GPU cells each recommendation says why it cannot be computed."""
    text = visible(section_of(quick["html"], "recommendations"))
    assert text.count("Not computable") + text.count("Not measured") == 4  # no tips either
    assert "What bf16 is worth on the CPU" in text and "in the sweep at batch 512" in text


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
    html = render(results_of(tmp_path, experiments=("sweep",), devices=("cpu",), repeats=2,
                          precisions=("fp32",), loaders=("resident",),
                          batch_sizes=(64, 128, 512), overrides=failed))
    table = section_of(html, "matrix")
    rows = re.findall(r'<td class="num">([^<]*)</td><td class="num">([^<]*)</td>', table)
    assert rows == [("64", "1"), ("128", "1"), ("512", "1")]
    assert "128.000" not in html and "1.00<" not in table


def test_runtimes_compare_the_same_cells_in_a_container_with_the_local_runner(tmp_path):
    """Three environments of one machine (a container and SLURM jobs beside the local
    runner): the runtimes section gives each setting's epoch time in each and its ratio to the
    local runner's, and a sentence with each median; a study of one environment says why
    there is none."""
    results = results_of(tmp_path, envs=("vm-local",), repeats=2, batch_sizes=(128,),
                     precisions=("fp32",), convergence_epochs=2, gpu=False, devices=("cpu",))
    tables = aggregate.load_tables(results)
    local = tables.summary
    single = visible(section_of(write(tables, tmp_path / "one"), "runtimes"))
    assert "Not measured: no cells of the same settings ran in two environments" in single
    boxed = local.assign(env="vm-docker", container="mnistbench:cpu",
                         epoch_s_median=local["epoch_s_median"] * 1.1)
    jobs = local.assign(env="slurm-main", slurm_partition="main",
                        epoch_s_median=local["epoch_s_median"] * 1.05)
    both = aggregate.Tables(pd.concat([local, boxed, jobs], ignore_index=True), tables.epochs,
                            tables.resources)
    page = write(both, tmp_path)
    section = visible(section_of(page, "runtimes"))
    settings = len(local.groupby(["experiment", "loader"]))
    assert settings == 4
    assert ("vm-docker took 1.10 × the epoch time of vm-local (median over 4 matched "
            "settings; 1.10 × to 1.10 ×): 10.0 % slower.") in section
    row = local[(local["experiment"] == "convergence") & (local["loader"] == "dataloader")]
    median = float(row["epoch_s_median"].median())
    assert (f"vm-docker vm-local convergence cpu fp32 DataLoader 128 {fmt.seconds(median)} "
            f"{fmt.seconds(median * 1.1)} 1.10 ×") in section
    assert "Intervals: each a range of 2 runs a side, at least 25 % coverage." in section
    assert ("slurm-main took 1.05 × the epoch time of vm-local (median over 4 matched "
            "settings; 1.05 × to 1.05 ×): 5.0 % slower.") in section
    assert "2 / 2" in section
    # The findings describe the local environment, not the container's copy of it.
    assert f"of the DataLoader's {fmt.seconds(median)} epoch" in visible(
        section_of(page, "findings"))


def test_the_page_says_what_a_phase_means_on_an_accelerator(full):
    """The phases and the methodology say that an accelerator's phase is the device's time
    between event marks, the host's issue time on a loop it cannot keep fed, and that a
    graph cell's phases are not split; nothing claims a synchronised phase boundary."""
    html = " ".join(full["html"].split())
    phases = html[html.index('<section id="phases">'):]
    phases = phases[:phases.index("</section>")]
    assert "the phase measures the host's issue time of its kernels, not their device time" \
        in phases
    assert "(phase_split graph) times its steps together" in phases
    assert "drawn as the timed loop draws them" in html
    assert "nothing synchronises until the epoch ends" in html
    assert "every phase boundary is synchronised" not in html


def test_methodology_documents_model_stats_units_and_command(full):
    """Methodology names the model fix, the warm-up policy, the CI methods, the TPU scope,
    every column with its unit, and the reproducing command."""
    html = full["html"]
    assert "max-pooling twice" in html and "Linear(9216, 128)" in html
    assert "dropout 0.5" in html and "Adam" in html
    assert "warmup_s" in html and "restores the model and optimizer state" in html
    assert "order-statistic" in html and "distribution-free" in html and "bootstrap" not in html
    assert ("TPUs are out of scope: torch_xla compiles whole graphs lazily, so per-phase timing "
            "of the same eager training loop would not measure the same thing.") in " ".join(
                html.split())
    summary = full["tables"].summary
    hidden = []
    for row in aggregate.column_rows():
        name = row["name"]
        # A field of this schema version that no cell recorded (limit_note: no cell past its
        # limit) is left out of the table; every other column is named.
        if (schema.ADDED_IN.get(name, 1) == schema.SCHEMA_VERSION
                and (name not in summary.columns or summary[name].isna().all())):
            hidden.append(name)
            continue
        assert f"<code>{name}</code>" in html
    assert hidden == ["limit_note"]
    assert "<td>samples/s</td>" in html and "<td>MiB</td>" in html
