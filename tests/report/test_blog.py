"""Tests of mnistbench.report.blog: the blog's reference figures, its arithmetic, comparability of a
study with its settings, the tips and the verdict rules of the report's checks."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from mnistbench.core import study
from mnistbench.report import blog
from mnistbench.report.blog import Verdict
from mnistbench.results import stats


def _cells(**params) -> pd.DataFrame:
    base = {"status": "ok", "experiment": "convergence", "batch_size": 128, "precision": "fp32",
            "epochs": 10, "train_limit": 0, "test_limit": 0, "max_steps": 0}
    return pd.DataFrame([{**base, **params}])


BLOG_README = Path(__file__).resolve().parents[3] / "shared" / "blog" / "README.md"


def test_reference_figures_are_the_blogs():
    """Every figure of the blog is held, as printed: the title's 10x, the hardware, the
    speed table, the resources, accuracy, the advice's figures and the cost table; none is
    None, nothing is implied."""
    b = blog.BLOG
    assert (b["cpu_epoch_s"], b["gpu_epoch_s"], b["speedup"], b["title_speedup"]) == (
        58.7, 5.2, 11.3, 10.0)
    assert (b["cpu_total_s"], b["gpu_total_s"], b["cpu_data_s"], b["gpu_data_s"],
            b["data_speedup"], b["cpu_backward_s"], b["gpu_backward_s"],
            b["backward_speedup"]) == (587.0, 52.0, 2.1, 1.8, 1.2, 32.4, 1.5, 21.6)
    assert (b["cpu_util_pct"], b["memory_gb"], b["gpu_util_peak_pct"], b["gpu_memory_gb"]) == (
        100.0, 3.2, 98.0, 1.8)
    assert (b["cpu_accuracy_pct"], b["gpu_accuracy_pct"], b["accuracy_gap_points"],
            b["cpu_best_epoch"], b["gpu_best_epoch"], b["cpu_final_loss"],
            b["gpu_final_loss"]) == (98.2, 98.4, 0.2, 8, 7, 0.068, 0.063)
    assert (b["cpu_power_w"], b["gpu_power_w"], b["cpu_hours"], b["price_per_kwh"]) == (
        150.0, 450.0, 1.63, 0.15)
    assert (b["cpu_cost"], b["gpu_cost"], b["electricity_saving_pct"], b["time_saving_pct"],
            b["cpu_total_usd"], b["gpu_total_usd"]) == (0.37, 0.10, 73.0, 91.0, 1000.37,
                                                        2500.10)
    assert (b["gpu_from_batch"], b["tip_workers"], b["gpu_util_expected_pct"]) == (32, 4, 80.0)
    assert all(value is not None for value in b.values())
    assert blog.IMPLIED == {}


@pytest.mark.skipif(not BLOG_README.is_file(), reason=f"{BLOG_README} is not here")
def test_every_number_of_the_blogs_english_rendering_is_held():
    """Each number the English rendering of the post prints in its tables and prose (but
    section numbers, the model's layer sizes and the Python/OS versions' parts) is one of the
    reference data's figures."""
    text = BLOG_README.read_text(encoding="utf-8")
    text = text.split("## 1.", 1)[1]
    text = re.sub(r"\([^)]*\)", " ", text)  # the notes in parentheses: the checks' arithmetic
    text = re.sub(r"`[^`]*`|^## \d+\.", " ", text, flags=re.M)  # code and section numbers
    held = set()
    for value in blog.BLOG.values():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            held |= {float(value), abs(float(value))}
        else:
            held |= {float(n) for n in re.findall(r"\d+(?:\.\d+)?", str(value))}
    numbers = {float(n.rstrip(",").replace(",", ""))
               for n in re.findall(r"(?<![\w.])\d[\d,]*(?:\.\d+)?", text)}
    layers = {1, 32, 3, 64, 0.5, 9216, 128, 10, 2}  # Conv2d(1, 32, 3, 1) ... Linear(128, 10)
    assert numbers - held - layers == set()


def test_the_model_arithmetic():
    """One pool after both 3x3 convolutions leaves 9216 features, a pool after each 1600."""
    assert blog.flattened_features(False) == 9216 == blog.BLOG["fc1_in_features"]
    assert blog.flattened_features(True) == 1600


def test_the_electricity_arithmetic():
    """150 W x 1.63 h x $0.15/kWh = $0.037 (not $0.37), and 450 W x 10 x 10 x 5.2 s =
    $0.0097 (not $0.10)."""
    cpu_s = blog.training_seconds(blog.BLOG["cpu_epoch_s"])
    assert cpu_s / 3600 == pytest.approx(blog.BLOG["cpu_hours"], abs=0.005)
    cpu = blog.energy_cost(150.0, cpu_s, 0.15)
    assert cpu == pytest.approx(0.0367, abs=5e-5)
    assert blog.BLOG["cpu_cost"] / cpu == pytest.approx(10.1, abs=0.05)
    gpu = blog.energy_cost(blog.BLOG["gpu_power_w"], blog.training_seconds(5.2), 0.15)
    assert gpu == pytest.approx(0.0097, abs=1e-4)


def test_subset_names_the_samples_and_full_settings_are_comparable():
    """train_limit, max_steps, epochs or test_limit below the blog's make a subset named by its
    training samples; the blog's settings (0: everything) do not."""
    assert blog.subset(_cells()) is None and blog.subset_detail(_cells()) is None
    assert blog.subset(_cells(train_limit=6000, test_limit=1000, epochs=1)) == (
        "subset: 6,000 samples, not comparable")
    assert "1,000 test samples" in blog.subset_detail(_cells(train_limit=6000, test_limit=1000,
                                                             epochs=1))
    assert blog.subset(_cells(max_steps=50)) == "subset: 64,000 samples, not comparable"
    assert blog.subset(_cells(epochs=5)) == "subset: 300,000 samples, not comparable"
    assert blog.subset(_cells(test_limit=1000)) == "subset: 600,000 samples, not comparable"
    assert blog.subset(_cells().iloc[0:0]) is None
    assert blog.samples_per_epoch({"train_limit": float("nan"), "batch_size": 128}) == 60_000


def test_blog_cells_prefer_the_convergence_experiment():
    """The blog's cells: convergence at batch 128 fp32, else all convergence, else the sweep
    at batch 128 fp32, else none."""
    frame = pd.concat([_cells(), _cells(experiment="sweep"), _cells(batch_size=64)])
    cells, source = blog.blog_cells(frame)
    assert len(cells) == 1 and source == "convergence experiment"
    cells, source = blog.blog_cells(_cells(experiment="sweep"))
    assert len(cells) == 1 and source.startswith("sweep")
    cells, _ = blog.blog_cells(_cells(status="failed"))
    assert cells.empty


def _est(value, low, high):
    return stats.Estimate(value, low, high, 3, 0.95, "test")


def test_claimed_values_are_checked_against_intervals():
    """A claimed value inside the interval is confirmed, outside contradicted, and without an
    interval or data not checkable."""
    assert blog.verdict_in_interval(11.3, _est(11.0, 10.5, 11.6))[0] == Verdict.CONFIRMED
    assert blog.verdict_in_interval(11.3, _est(8.8, 8.3, 8.9))[0] == Verdict.CONTRADICTED
    assert blog.verdict_in_interval(11.3, _est(8.8, None, None))[0] == Verdict.NOT_CHECKABLE
    assert blog.verdict_in_interval(11.3, None)[0] == Verdict.NOT_CHECKABLE


def test_the_accuracy_gap_against_the_seed_spread():
    """A gap within the seed spread is no device effect; a larger one is confirmed only when
    this study's devices differ too; without a spread or a GPU it is not checkable."""
    assert blog.verdict_accuracy_gap(0.2, 0.25)[0] == Verdict.CONTRADICTED
    assert blog.verdict_accuracy_gap(0.2, None)[0] == Verdict.NOT_CHECKABLE
    assert blog.verdict_accuracy_gap(0.2, 0.1)[0] == Verdict.NOT_CHECKABLE
    assert blog.verdict_accuracy_gap(0.2, 0.1, _est(0.05, -0.02, 0.1))[0] == Verdict.CONTRADICTED
    assert blog.verdict_accuracy_gap(0.2, 0.1, _est(0.21, 0.15, 0.3))[0] == Verdict.CONFIRMED
    assert blog.verdict_accuracy_gap(0.2, 0.1, _est(0.21, None, None))[0] == Verdict.NOT_CHECKABLE


def test_tips_rules_and_order():
    """pin_memory, cudnn.benchmark and amp-fp16 do not apply to the CPU, with a reason;
    tips sort in the blog's order, unknown ones after; a tip's verdict follows its
    interval and accuracy."""
    for name in ("pin_memory", "cudnn.benchmark", "amp-fp16"):
        assert study.not_applicable_reason(blog.tip(name), "cpu")
        assert not study.not_applicable_reason(blog.tip(name), "cuda")
    assert blog.tip("something new").change == ""
    assert blog.tip_order(["zeta", "all", "baseline", "alpha", "resident"]) == [
        "baseline", "resident", "all", "alpha", "zeta"]
    assert blog.tip_verdict(_est(1.3, 1.2, 1.4), -0.01, 0.1) == blog.PAYS_OFF
    assert blog.tip_verdict(_est(1.3, 1.2, 1.4), 0.3, 0.1) == blog.COSTS_ACCURACY
    assert blog.tip_verdict(_est(0.9, 0.85, 0.95), 0.0, 0.1) == blog.SLOWER
    assert blog.tip_verdict(_est(1.02, 0.97, 1.08), 0.0, 0.1) == blog.WITHIN_NOISE
    assert blog.tip_verdict(_est(1.3, None, None), 0.0, 0.1) == blog.UNCLEAR
    assert blog.tip_verdict(None, None, None) == "not measured"
