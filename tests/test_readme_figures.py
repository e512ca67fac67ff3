"""The README's first table quotes the published study: each figure it prints is recomputed
here from report/data (medians over all runs, never run 0 alone) and must read as printed,
so a re-publication that moves a figure fails until the README follows (issue 42, item 7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mnistbench.report.formatting import num
from mnistbench.report.selections import CODE, Inputs, col, median
from mnistbench.results import aggregate, cost

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "report" / "data"
README = (ROOT / "README.md").read_text(encoding="utf-8")
GPU_DOC = (ROOT / "docs" / "gpu.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def inputs() -> Inputs:
    if not (DATA / "summary.csv").is_file():
        pytest.skip("report/data is not committed yet")
    return Inputs(aggregate.load_tables(DATA), cost.load_model(DATA / "cost_model.json"))


def _cells(inputs: Inputs, env: str, device: str, code: str):
    cells = inputs.cells
    return cells[(cells["env"] == env) & (cells["device"] == device) & (cells[CODE] == code)]


def _med(inputs, env, device, code, column) -> float:
    value = median(col(_cells(inputs, env, device, code), column))
    assert value is not None, (env, device, code, column)
    return value


def _row(text: str, start: str) -> str:
    """The README's table row that starts with ``start`` (and holds the rest of a key)."""
    rows = [line for line in text.splitlines() if line.startswith("| ") and start in line]
    assert rows, start
    return "\n".join(rows)


def test_the_cpu_rows_are_the_data(inputs):
    """The blog's code and this project's best on the 2-core Xeon (vm-local): epoch, accuracy,
    their ratio, the share of the measured limit and the limit itself."""
    blog_s = _med(inputs, "vm-local", "cpu", "blog", "epoch_s_median")
    best_s = _med(inputs, "vm-local", "cpu", "best", "epoch_s_median")
    row = _row(README, "**the blog's code as written**")
    assert f"{num(blog_s, 3, 's')} per epoch, "\
           f"{num(_med(inputs, 'vm-local', 'cpu', 'blog', 'final_test_acc'), 4, '%')} test " \
           "accuracy" in row
    row = _row(README, "**this project's best code**")
    assert f"{num(best_s, 3, 's')} per epoch, " \
           f"{num(_med(inputs, 'vm-local', 'cpu', 'best', 'final_test_acc'), 4, '%')}: " \
           f"{num(blog_s / best_s, 3)}x the blog's code" in row
    row = _row(README, "how close to the hardware")
    limit = _med(inputs, "vm-local", "cpu", "best", "limit_gflops")
    assert f"({num(limit, 3)} GFLOP/s fp32" in row
    for kind, words in (("best", "this project's best"), ("blog", "the blog's code")):
        share = _med(inputs, "vm-local", "cpu", kind, "limit_share_pct")
        assert f"{words} {num(share, 3, '%')}" in row, kind


def test_the_energy_row_is_the_cost_models_and_says_what_is_assumed(inputs):
    """One run of the blog's code on vm-local: its energy, electricity and total, with the
    assumed power and the waiting named as such."""
    rows = {(r.env, r.device, r.loader): r for r in inputs.cost_report.rows}
    run = rows[("vm-local", "cpu", "dataloader")]
    row = _row(README, "one training run of the blog's code")
    assert f"{num(run.energy_wh.value, 3, 'Wh')} at an assumed " \
           f"{num(inputs.model.devices['cpu'].system_power_w, 3, 'W')} system power" in row
    assert f"{num(run.electricity.value, 2)} EUR of electricity" in row
    assert f"{num(run.total.value, 3)} EUR with the hardware's write-off" in row
    share = 100 * run.waiting.value / run.total.value
    assert f"an assumed {num(inputs.model.wait_value_per_hour, 2)} EUR/h that is " \
           f"{num(share, 2, '%')} of it" in row


def test_the_gpu_rows_are_medians_over_every_run(inputs):
    """The H200's epochs (median and range of its 2 runs), its accuracies, the speed-ups
    across machines and its share of the fp32 limit: over every run, in the README and in
    docs/gpu.md."""
    env = "NVIDIA-H200-local"
    blog_runs = sorted(col(_cells(inputs, env, "cuda", "blog"), "epoch_s_median"))
    best_runs = sorted(col(_cells(inputs, env, "cuda", "best"), "epoch_s_median"))
    row = _row(README, "NVIDIA H200 (16-core Xeon host")
    assert f"{num(median(blog_runs), 3, 's')} per epoch ({blog_runs[0]:.2f}-" \
           f"{blog_runs[-1]:.2f} s, {len(blog_runs)} runs" in row
    assert f"{num(median(best_runs), 3, 's')} ({num(best_runs[0], 3)}-" \
           f"{num(best_runs[-1], 3)} s, {len(best_runs)} runs)" in row
    row = _row(README, "**the GPU speed-up, across machines**")
    from mnistbench.report import comparison

    for kind in ("blog", "best"):
        # the CPU the report's comparison across machines divides by (the most cells)
        found = next(p for p in comparison.pairs(inputs.summary, inputs.cells, code=kind)
                     if p.gpu_env == env)
        assert row.startswith(f"| the H200 against {found.cpu_env}'s CPU |"), row
        ratio = (_med(inputs, found.cpu_env, "cpu", kind, "epoch_s_median")
                 / _med(inputs, env, "cuda", kind, "epoch_s_median"))
        assert f"{num(ratio, 3)}x with " in row, (kind, ratio)
    share = _med(inputs, env, "cuda", "best", "limit_share_pct")
    row = _row(README, "| the H200 | why not faster")
    assert f"{num(share, 3, '%')} of the fp32 limit" in row
    assert f"{num(share, 3, '%')} of the fp32 limit" in _row(GPU_DOC, "this project's best "
                                                                       "(resident, tuned)")


def test_the_gpu_docs_batch_4096_rates_and_tips_are_medians_over_every_run(inputs):
    """docs/gpu.md's resident rates at batch 4096 (median of both leases' runs) and its tips
    (per sample, as the report's tips table computes them) read as the data give them."""
    from mnistbench.report.sections import tips

    env = "NVIDIA-H200-local"
    summary = inputs.summary
    sweep = summary[(summary["env"] == env) & (summary["experiment"] == "sweep")
                    & (summary["device"] == "cuda") & (summary["loader"] == "resident")
                    & (summary["batch_size"] == 4096) & (summary["status"] == "ok")]
    text = " ".join(GPU_DOC.split())
    rates = {p: median(col(sweep[sweep["precision"] == p], "samples_per_s"))
             for p in ("fp32", "tf32", "bf16", "fp16")}
    assert all(v is not None and len(sweep[sweep["precision"] == p]) == 2
               for p, v in rates.items()), rates
    assert (f"reach {num(rates['fp32'] / 1000, 3)} k samples/s in fp32, "
            f"{num(rates['tf32'] / 1000, 3)} k in tf32, {num(rates['bf16'] / 1000, 3)} k in "
            f"bf16 and {num(rates['fp16'] / 1000, 3)} k in fp16") in text
    devices, rows, _ = tips.tips_table(summary)
    cuda = devices.index("cuda")
    speed = {r["tip"]: r["devices"][cuda]["speed"].removesuffix(" ×")
             for r in rows if r["env"] == env}
    for tip, words in (("resident", "resident data"), ("all", "levers together"),
                       ("workers=4", "4 workers"), ("workers=cores", "one worker per core"),
                       ("max-batch", "the largest batch"), ("allocator", "allocator"),
                       ("blog-all", "the blog's tips together"), ("amp-fp16", "AMP fp16"),
                       ("compile", "compile"), ("tuned", "the tuned code"),
                       ("pin_memory", "pinned memory"), ("cudnn.benchmark", "cudnn.benchmark"),
                       ("amp-bf16", "AMP bf16")):
        assert f"{words} {speed[tip]}x" in text, (tip, speed[tip])


def _x(value: float) -> str:
    """A ratio as the README writes it: 3 significant digits and x."""
    return f"{num(value, 3)}x"


def test_the_first_rows_are_the_one_machine_answer(inputs):
    """The README's table opens with the answer measured on one machine (issue 38): best
    over blog with its interval and n, each code's rate and its agreement with the steady
    epochs, the threads curve's 2-over-1 speed-ups, from report/data."""
    from mnistbench.core import study
    from mnistbench.report import selections as sel

    env, why = sel.one_machine_env(inputs.summary)
    found = sel.one_machine(inputs.summary, env, why)
    est = found.best_over_blog["cpu"]
    assert est is not None and est.n == 6
    row = _row(README, "**the answer on one machine**")
    assert row.startswith(f"| {env}: ")
    assert (f"**{_x(est.value)} (90 % CI {num(est.low, 3)}-{num(est.high, 3)}x, "
            f"{est.n} runs a side)**") in row, row
    cells = sel.short_cells(inputs.summary, study.HEADLINE_EXPERIMENT)
    for code, words in (("blog", "the blog's code"), ("best", "this project's best")):
        rate = median(col(cells[(cells["env"] == env) & (cells[CODE] == code)], sel.RATE))
        agree = sel.steady_agreement(inputs.summary, inputs.epochs, env, "cpu", code)
        assert agree is not None
        assert f"{words} {num(rate, 3)} samples/s ({'+' if agree[2] >= 0 else ''}" \
               f"{num(agree[2] * 100, 2)} % against its steady epochs)" in row, (code, row)
    row = _row(README, "**2 threads over 1**")
    for code, words in (("blog", "the blog's code"), ("best", "this project's best")):
        curve = sel.threads_curve(inputs.summary, env, code)
        two = next(r for r in curve if r["threads"] == 2)["speedup"]
        assert (f"{words} {_x(two.value)} (range of {two.n} runs a side: "
                f"{num(two.low, 3)}-{num(two.high, 3)}x)") in row, (code, row)
