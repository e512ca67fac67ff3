"""Tests of the section "Why: each device against its limit"
(mnistbench.report.sections.why) and its chart (mnistbench.report.plots.against_limit): on
the quick study (CPU only: the GPU side "not measured"), on a GPU study with scale cells and
measured limits (every figure the one the data give), on older data without the limit
columns or the scale experiment ("not measured", never a figure), with hostile environment
names, and the chart in both of its modes (share of the limit, achieved GFLOP/s)."""

from __future__ import annotations

import io

import pandas as pd
from PIL import Image

from mnistbench.report import formatting as fmt
from mnistbench.report import plots
from mnistbench.results import aggregate, scaling, stats
from tests.report.test_report_studies import (
    HOSTILE,
    section_of,
    visible,
    with_limits,
    with_scale,
    without_limits,
    write,
)


def _why(html: str) -> str:
    """The visible text of the section."""
    return visible(section_of(html, "why"))


def _cells(summary, experiment, device, **where):
    """The ok rows of ``summary`` of one experiment and device matching ``where``."""
    rows = summary[(summary["experiment"] == experiment) & (summary["device"] == device)
                   & (summary["status"] == "ok")]
    for column, value in where.items():
        rows = rows[rows[column] == value]
    return rows


def _capture(summary):
    """(Figure, PNG bytes) of the chart of ``summary``; None without data."""
    captured = []
    original = plots._png
    plots._png = lambda fig: captured.append(fig) or original(fig)
    try:
        png = plots.against_limit(summary)
    finally:
        plots._png = original
    return None if png is None else (captured[0], png)


def test_the_section_follows_the_throughput_with_its_heading(quick):
    """The section sits after the throughput's, with its heading and its anchor in the
    page's contents."""
    html = quick["html"]
    assert html.index('<section id="throughput">') < html.index('<section id="why">') \
        < html.index('<section id="convergence">')
    assert "<h2>Why: each device against its limit</h2>" in html
    assert 'href="#why"' in html


def test_quick_study_states_the_cpu_and_says_the_gpu_is_not_measured(quick):
    """Without GPU cells the section gives the CPU's share of its measured limit with the
    limit's figure, kernel and source, the CPU's step fit and its scale cells, and says
    plainly that every GPU side is not measured (and why), never a GPU figure."""
    summary = quick["tables"].summary
    text = _why(quick["html"])
    best = _cells(summary, "convergence", "cpu", loader="resident")
    share = stats.median_ci(best["limit_share_pct"])
    assert (f"the CPU runs at {fmt.num(share.value, 3, '%')} of its measured limit "
            f"({fmt.interval(share, '%')};") in text
    assert "range of 2 runs" in fmt.interval(share, "%")
    limit = best["limit_gflops"].iloc[0]
    assert (f"Its limit: {fmt.num(limit, 3, 'GFLOP/s')} ({best['limit_kernel'].iloc[0]}; "
            f"{best['limit_source'].iloc[0]})") in text
    assert "How close the GPU runs to its limit at the blog's settings is not measured: its " \
           "GPU cells were unavailable" in text
    assert "The fixed cost of a training step on the GPU is not measured" in text
    assert "Whether a GPU wins, by model size or by batch size, is not measured" in text
    assert "only the CPU side is measured here" in text
    scale = _cells(summary, "scale", "cpu")
    assert sorted(set(scale["width"])) == [1, 2]
    rate = fmt.num(scale.loc[scale["width"] == 2, "samples_per_s"].median(), 3, "samples/s")
    assert f"width 2 (0.271 GFLOP per sample) {rate}" in text
    assert "GPU's speed-up" not in text and "95 %" not in text
    for bad in ("nan", "None", "cuda"):
        assert bad not in text.split("Each device's measured limit")[0], bad


def test_gpu_study_numbers_match_the_data(blogcode):
    """On a GPU study every figure the sentences give is the data's: each device's share of
    its limit at the blog's settings with its interval, the step fits' fixed and per-sample
    costs, the speed-up at batch 128 with the batch sizes of its large-batch shares, the
    scale cells' speed-up by width, and the blog's advice checked; no interval is called
    "95 %" (three runs and t intervals guarantee none)."""
    summary = blogcode["tables"].summary
    text = _why(blogcode["html"])
    for device, name in (("cpu", "CPU"), ("cuda", "GPU")):
        best = _cells(summary, "convergence", device, loader="resident")
        share = stats.median_ci(best["limit_share_pct"])
        assert (f"the {name} runs at {fmt.num(share.value, 3, '%')} of its measured limit "
                f"({fmt.interval(share, '%')}; "
                f"{fmt.num(best['achieved_gflops'].median(), 3, 'GFLOP/s')}) for this "
                "project's best code") in text
        assert best["limit_kernel"].iloc[0] in text and best["limit_source"].iloc[0] in text
    sweep = {d: _cells(summary, "sweep", d, loader="resident", precision="fp32")
             for d in ("cpu", "cuda")}
    fits = {d: scaling.fit_step_time(s["batch_size"], s["samples_per_s"])
            for d, s in sweep.items()}
    gpu = fits["cuda"]
    assert gpu.fixed_ci[0] > 0
    share = gpu.fixed_s / gpu.step_s(128) * 100
    assert (f"A training step on the GPU (sweep, fp32, data held in memory) costs a fixed "
            f"{fmt.num(gpu.fixed_s * 1e3, 3)} ms (fit interval "
            f"{fmt.num(gpu.fixed_ci[0] * 1e3, 3)}–{fmt.num(gpu.fixed_ci[1] * 1e3, 3)} ms, "
            f"{gpu.n} runs at 3 batch sizes) plus {fmt.num(gpu.per_sample_s * 1e6, 3)} µs per "
            f"sample") in text
    assert f"the fixed part is {fmt.num(share, 3, '%')} of a batch-128 step" in text
    at128 = stats.ratio_ci(*(sweep[d].loc[sweep[d]["batch_size"] == 128, "samples_per_s"]
                             for d in ("cuda", "cpu")))
    assert f"is {fmt.ratio_phrase(at128)} at batch 128, the blog's" in text
    limit = fits["cpu"].per_sample_s / gpu.per_sample_s
    half = scaling.batch_for_share(fits["cpu"], gpu, 0.5)
    most = scaling.batch_for_share(fits["cpu"], gpu, 0.9)
    assert (f"large-batch limit at {fmt.num(limit, 3, '×')}: half of that from batch "
            f"{half:.0f}, 90 % of that from batch {most:.0f}") in text
    scale = {d: _cells(summary, "scale", d, precision="fp32") for d in ("cpu", "cuda")}
    est = stats.ratio_ci(scale["cuda"].loc[scale["cuda"]["width"] == 4, "samples_per_s"],
                         scale["cpu"].loc[scale["cpu"]["width"] == 4, "samples_per_s"])
    assert f"{fmt.num(est.value, 3, '×')} at width 4 ({fmt.num(est.low, 3)}–" in text
    assert "Its speed-up over the CPU grows beyond width 1's from width 2" in text
    assert "Width 8 ran on the GPU alone" in text
    gpu_share = scale["cuda"].groupby("width")["limit_share_pct"].median()
    assert (f"the share of its limit rises with the width: "
            f"{fmt.num(gpu_share[1], 3, '%')} at width 1") in text
    assert "checked on the GPU: batch sizes above 32: holds" in text
    assert "compute-intensive models: holds" in text
    assert "95 %" not in text and "nan" not in text


def test_tables_give_every_fit_and_width(blogcode):
    """The fits' table has one row per device, precision and loader of the sweep; the scale
    table one per precision and width, with each device's samples/s and share of its limit."""
    section = section_of(blogcode["html"], "why")
    summary = blogcode["tables"].summary
    sweep = summary[(summary["experiment"] == "sweep") & (summary["status"] == "ok")]
    fits = section.split("The fixed cost of a step (sweep)")[1].split("</table>")[0]
    assert fits.count("<tr>") - 1 == len(sweep.groupby(["device", "precision", "loader"]))
    scale = section.split("Model size (scale experiment)")[1].split("</table>")[0]
    cells = summary[summary["experiment"] == "scale"]
    assert scale.count("<tr>") - 1 == len(cells.groupby(["precision", "width"]))
    assert visible(scale).count("of its limit") == len(cells.groupby(["device", "precision",
                                                                       "width"]))


def test_old_data_without_limit_columns_says_not_measured(blogcode, full, tmp_path):
    """Results of an older aggregate (no limit columns, no scale cells) and of one whose limit
    columns are empty (no peak record, as the full study's) give the achieved GFLOP/s and say
    each limit and the model size are not measured, never a share."""
    old = without_limits(blogcode["tables"])
    assert not set(old.summary.columns) & {"limit_gflops", "limit_share_pct"}
    for text in (_why(write(old, tmp_path)), _why(full["html"])):
        assert text.count("Its limit is not measured: these results hold no peak figure for "
                          "it.") == 2
        assert "of its measured limit" not in text
        assert "Model size is not measured: these results hold no ok cells of the scale " \
               "experiment." in text
        assert "GFLOP/s (range of 3 runs" in text
        assert "not measured" in text.split("Each device's measured limit")[1]
        assert "nan" not in text and "None" not in text
    older = aggregate.Tables(old.summary.drop(columns=["achieved_gflops",
                                                       "train_flops_per_sample", "width"]),
                             old.epochs, old.resources)
    text = _why(write(older, tmp_path / "older"))
    assert text.count("is not measured: these results record no achieved GFLOP/s") == 2
    assert plots.against_limit(older.summary) is None


def test_a_share_past_100_percent_carries_its_reason(blogcode, tmp_path):
    """A cell past 100 % of its measured limit (the width-8 fp32 GPU cells of an H200 ran at
    124 %) is flagged wherever its share is written, with the reason it recorded
    (limit_note): in the width sentence, the scale table and the limits table's best share;
    results that recorded no reason still say the share is past the limit."""
    tables = blogcode["tables"]
    summary = tables.summary.copy()
    past = ((summary["experiment"] == "scale") & (summary["device"] == "cuda")
            & (summary["precision"] == "fp32") & (summary["width"] == 8)
            & (summary["status"] == "ok"))
    assert past.any()
    reason = ("past 100 % of the measured limit: cuDNN chose Winograd or FFT convolutions, "
              "which do fewer multiplications than the nominal FLOPs the cell counts")
    summary.loc[past, "limit_share_pct"] = 124.0
    summary["limit_note"] = None
    summary.loc[past, "limit_note"] = reason
    text = _why(write(aggregate.Tables(summary, tables.epochs, tables.resources), tmp_path))
    assert f"124 % at 8 ({reason})" in text  # the width sentence
    scale = text.split("Model size (scale experiment)")[1]
    assert f"124 % of its limit ({reason})" in scale
    best = text.split("Each device's measured limit")[1].split("Model size")[0]
    assert f"124 % ({reason})" in best
    assert text.count(reason) == 3
    summary["limit_note"] = None  # an older aggregate: no reason recorded
    text = _why(write(aggregate.Tables(summary, tables.epochs, tables.resources),
                      tmp_path / "old"))
    assert text.count("past 100 % of the measured limit: these results record no reason") == 3
    below = _why(blogcode["html"])
    assert "past 100 %" not in below


def test_chart_draws_shares_or_gflops(blogcode):
    """The chart draws two panels (batch size, model FLOPs per sample) on a log scale of the
    share of the measured limit with the limit at 100 %, or of the achieved GFLOP/s where a
    cell has no limit (each measured limit dotted in its series' colour); a readable PNG at
    twice the report's pixels."""
    fig, png = _capture(blogcode["tables"].summary)
    width, height = Image.open(io.BytesIO(png)).size
    assert 1400 <= width <= 2300 and 300 <= height <= 6000
    left, right = fig.axes[:2]
    assert left.get_ylabel() == "share of the measured limit\n(%, log scale)"
    assert left.get_xlabel() == "batch size (samples, log₂ scale)"
    assert right.get_xlabel() == "model FLOPs per training sample (GFLOP, log scale)"
    assert left.get_yscale() == "log" and right.get_xscale() == "log"
    assert left.get_ylim()[1] > 100
    ticks = [t.get_text() for t in right.get_xticklabels()]
    assert "0.0716\nwidth 1" in ticks and "4.14\nwidth 8" in ticks
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "the measured limit (100 %)" in legend
    assert "cuda · fp32 · data held in memory" in legend
    fig, png = _capture(without_limits(blogcode["tables"]).summary)
    left, right = fig.axes[:2]
    assert left.get_ylabel() == "achieved training arithmetic\n(GFLOP/s, log scale)"
    assert "no ok cells of the scale experiment" in [t.get_text() for t in right.texts]
    assert plots.against_limit(blogcode["tables"].summary.iloc[0:0]) is None


def test_hostile_environment_names_are_plain_text(blogcode, tmp_path):
    """With two environments, one named with markup and mathtext dollars, the sentences name
    each environment (escaped in the page) and the chart draws it as plain text."""
    tables = blogcode["tables"]
    other = tables.summary.assign(env="$\\frac{a}$" + HOSTILE)
    both = aggregate.Tables(pd.concat([tables.summary, other], ignore_index=True),
                            tables.epochs, tables.resources)
    html = write(both, tmp_path)
    section = section_of(html, "why")
    assert "<script>" not in section and "&lt;script&gt;" in section
    text = visible(section)
    assert text.count("On alpha, ") >= 5 and text.count(f"On $\\frac{{a}}${HOSTILE}, ") >= 5
    fig, png = _capture(both.summary)
    assert png[:4] == b"\x89PNG"
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(label.startswith("\\$\\frac{a}\\$<script>") for label in labels)


def test_fixture_shapes_match_the_aggregate():
    """The fixtures' scale cells and limit columns have the shape the study and aggregate
    give them: scale ids name the width (``-x4-``), limits only on ok cells, the share is
    achieved over limit."""
    rows = {"env": ["a", "a"], "experiment": ["convergence", "convergence"],
            "device": ["cpu", "cpu"], "precision": ["fp32", "fp32"],
            "loader": ["resident", "resident"], "batch_size": [128, 128],
            "status": ["ok", "failed"], "samples_per_s": [1000.0, None],
            "achieved_gflops": [71.565312, None], "torch_threads": [4, 4],
            "repeat": [0, 1], "cell": ["c0", "c1"], "epoch_s_median": [60.0, None],
            "width": [1, 1], "train_flops_per_sample": [71_565_312, None]}
    tables = aggregate.Tables(pd.DataFrame(rows), pd.DataFrame(), pd.DataFrame())
    limited = with_limits(with_scale(tables, widths={"cpu": (1, 4)}, precisions=("fp32",),
                                     repeats=1)).summary
    scale = limited[limited["experiment"] == "scale"]
    assert list(scale["cell"]) == ["cpu-fp32-resident-b128-x1-r0",
                                   "cpu-fp32-resident-b128-x4-r0"]
    assert list(scale["width"]) == [1, 4]
    failed = limited[limited["status"] == "failed"]
    assert failed["limit_gflops"].isna().all() and failed["limit_source"].isna().all()
    ok = limited[limited["status"] == "ok"]
    share = ok["achieved_gflops"] / ok["limit_gflops"] * 100
    assert (ok["limit_share_pct"] - share).abs().max() < 1e-9
    assert set(ok["limit_source"]) == {"measured: runs/a/peak/cpu.json, 4 threads"}
