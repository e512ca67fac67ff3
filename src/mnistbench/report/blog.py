"""The blog post this study starts from, as reference data, and the arithmetic and rules the
report uses to check it: its figures (measured on another machine, never by this study), the
settings its headline is about, which of our cells stand for those settings, whether they are
comparable, the tips it gives, and the verdict rules of every check. One home for the report
and the charts; the report words the checks, this module decides them.

The blog: "PyTorch 2.5 CNN: CPU vs GPU deployment compared, a 10x speed difference in MNIST
training", an Intel Core i7-12700K against an NVIDIA GeForce RTX 4090, the pytorch/examples
MNIST CNN, batch 128, fp32, 10 epochs. :data:`BLOG` holds every figure it prints (its English
rendering: ../shared/blog/README.md), as printed; the report's checks
(:mod:`mnistbench.report.sections.claims`) word every claim it makes, with these rules.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum
from typing import TypedDict

from mnistbench.core import study

#: The blog post's title, and where its text is kept (no public address is recorded: the post
#: as published, in Chinese, and its English rendering are in the project's shared folder).
TITLE = ("PyTorch 2.5 CNN: CPU vs GPU deployment compared, a 10x speed difference in MNIST "
         "training")
SOURCE = ("the post as published: shared/blog/original-zh.txt; in English, with every figure: "
          "shared/blog/README.md")

#: Every figure of the blog (another machine: not measured by this study), as printed.
BLOG: dict[str, object] = {
    # the title: "a 10x speed difference"
    "title_speedup": 10.0,
    # 1. the test environment
    "cpu": "Intel Core i7-12700K",
    "gpu": "NVIDIA GeForce RTX 4090",
    "cpu_memory": "32 GB DDR4",
    "gpu_memory": "24 GB GDDR6X",
    "gpu_cuda_cores": 16_384,
    "cpu_base_ghz": 3.6,
    "cpu_boost_ghz": 5.0,
    "gpu_base_ghz": 2.23,
    "gpu_boost_ghz": 2.52,
    "pytorch": "2.5",
    "cuda": "11.8",
    "python": "3.10",
    "os": "Ubuntu 22.04 LTS",
    # the model: its printed forward() pools after each convolution; its fc1 takes 9216
    "fc1_in_features": 9216,
    "pools_in_forward": 2,
    "dropout": 0.5,
    # 2. the fixed settings
    "batch_size": 128,
    "epochs": 10,
    "optimizer": "Adam",
    "lr": 0.001,
    "loss": "CrossEntropyLoss",
    # 2. training speed: per epoch (s), the run of 10 epochs (s), data loading and
    # backpropagation (s, per epoch: the only reading smaller than an epoch) and the ratios
    "cpu_epoch_s": 58.7,
    "gpu_epoch_s": 5.2,
    "speedup": 11.3,
    "cpu_total_s": 587.0,
    "gpu_total_s": 52.0,
    "total_speedup": 11.3,
    "cpu_data_s": 2.1,
    "gpu_data_s": 1.8,
    "data_speedup": 1.2,
    "cpu_backward_s": 32.4,
    "gpu_backward_s": 1.5,
    "backward_speedup": 21.6,
    # 3. resources: single-core use "close to 100 %", memory, GPU utilisation and memory
    "cpu_util_pct": 100.0,
    "memory_gb": 3.2,
    "gpu_util_peak_pct": 98.0,
    "gpu_memory_gb": 1.8,
    "monitor_interval_s": 1,  # nvidia-smi -l 1
    # 4. accuracy and convergence (test set)
    "cpu_accuracy_pct": 98.2,
    "gpu_accuracy_pct": 98.4,
    "accuracy_gap_points": 0.2,
    "cpu_best_epoch": 8,
    "gpu_best_epoch": 7,
    "best_epoch_gap": -1,
    "cpu_final_loss": 0.068,
    "gpu_final_loss": 0.063,
    "final_loss_gap": -0.005,
    # 5. advice: a GPU from batch 32 up; the DataLoader of its pin_memory tip; a GPU
    # slower than expected should be above 80 % utilisation
    "gpu_from_batch": 32,
    "tip_workers": 4,
    "gpu_util_expected_pct": 80.0,
    # 6. cost of 10 trainings (USD): the assumptions and the printed results
    "cost_runs": 10,
    "currency": "USD",
    "price_per_kwh": 0.15,
    "cpu_power_w": 150.0,
    "gpu_power_w": 450.0,
    "cpu_hardware_usd": 1000.0,
    "gpu_hardware_usd": 2500.0,
    "cpu_time_s": 5870.0,
    "gpu_time_s": 520.0,
    "cpu_hours": 1.63,
    "gpu_hours": 0.14,
    "time_saving_pct": 91.0,
    "cpu_cost": 0.37,  # printed as $0.37
    "gpu_cost": 0.10,  # printed as $0.10
    "electricity_saving_pct": 73.0,
    "cpu_total_usd": 1000.37,
    "gpu_total_usd": 2500.10,
}

#: Figures of :data:`BLOG` that are implied rather than printed, and why (none: the blog
#: prints every figure above).
IMPLIED: dict[str, str] = {}

#: The figures of :data:`BLOG` that are numbers (its names and versions left out), typed for
#: arithmetic: the same values.
FIGURES: dict[str, float] = {key: value for key, value in BLOG.items()
                             if isinstance(value, (int, float))}


class Settings(TypedDict):
    """The blog's settings: batch size (samples), precision, epochs, training and test
    samples."""

    batch_size: int
    precision: str
    epochs: int
    train_samples: int
    test_samples: int


#: The blog's settings: batch size (samples), precision, epochs, training and test samples.
BLOG_SETTINGS: Settings = {"batch_size": 128, "precision": "fp32", "epochs": 10,
                           "train_samples": 60_000, "test_samples": 10_000}
#: The blog's loader: its own pipeline (a Dataset with a per-sample transform, DataLoader).
BLOG_LOADER = "dataloader"


class Verdict(StrEnum):
    """The verdict of a check of one of the blog's claims: its value is the word the page
    prints, and the members' order the order the verdict box counts them in."""

    CONFIRMED = "confirmed"
    CONTRADICTED = "contradicted"
    #: Measured, but within noise: the data can tell neither way (never "contradicted").
    NOT_DISTINGUISHABLE = "not distinguishable"
    NOT_CHECKABLE = "not checkable"

    @classmethod
    def holds(cls, claim_holds: bool) -> Verdict:
        """Confirmed when the claim holds, else contradicted."""
        return cls.CONFIRMED if claim_holds else cls.CONTRADICTED


def blog_cells(summary):
    """(ok cells at the blog's settings, where they come from) from a summary DataFrame.

    The convergence experiment runs the blog's settings; its ok cells with batch 128 and fp32
    are used (all its ok cells if none match). Without convergence cells, ok sweep cells at
    batch 128 and fp32 stand in (shorter runs). Empty frame when there are none.
    """
    ok = summary[summary["status"] == "ok"]
    blog = ((ok["batch_size"] == BLOG_SETTINGS["batch_size"])
            & (ok["precision"] == BLOG_SETTINGS["precision"]))
    conv = ok["experiment"] == "convergence"
    if (conv & blog).any():
        return ok[conv & blog], "convergence experiment"
    if conv.any():
        return ok[conv], "convergence experiment (not at batch 128 / fp32)"
    sweep = ok["experiment"] == "sweep"
    if (sweep & blog).any():
        return ok[sweep & blog], "sweep experiment at batch 128, fp32 (short runs: no " \
                                 "convergence cells)"
    return ok.iloc[0:0], "no ok cells at the blog's settings"


# ------------------------------------------------------------------------- comparability

def _int(value, default: int = 0) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return default if not math.isfinite(number) else int(number)


def samples_per_epoch(cell: Mapping) -> int:
    """Training samples one epoch of ``cell`` (a summary row) sees: ``train_limit`` (0: all
    60,000), capped by ``max_steps`` x ``batch_size`` (``max_steps`` 0: no cap)."""
    full = BLOG_SETTINGS["train_samples"]
    limit = _int(cell.get("train_limit"))
    samples = min(limit, full) if limit > 0 else full
    steps = _int(cell.get("max_steps"))
    batch = _int(cell.get("batch_size"), 1)
    if steps > 0:
        samples = min(samples, steps * max(batch, 1))
    return samples


def _sizes(cells) -> tuple[set, set, set] | None:
    """(training samples per epoch, epochs, test samples) of ``cells``, each a set; None when
    they all match the blog's (or there are no cells)."""
    if cells is None or len(cells) == 0:
        return None
    train, epochs, test = set(), set(), set()
    full_test = BLOG_SETTINGS["test_samples"]
    for cell in cells.to_dict("records"):
        train.add(samples_per_epoch(cell))
        epochs.add(_int(cell.get("epochs"), BLOG_SETTINGS["epochs"]))
        limit = _int(cell.get("test_limit"))
        test.add(min(limit, full_test) if limit > 0 else full_test)
    if (train == {BLOG_SETTINGS["train_samples"]} and epochs == {BLOG_SETTINGS["epochs"]}
            and test == {full_test}):
        return None
    return train, epochs, test


def subset(cells) -> str | None:
    """"subset: N samples, not comparable" when ``cells`` (summary rows at the blog's
    settings) train on fewer samples than the blog (N: the fewest training samples of a run,
    per epoch x epochs; ``train_limit``, ``max_steps``, ``epochs``) or test on fewer
    (``test_limit``); None when they match the blog's settings."""
    sizes = _sizes(cells)
    if sizes is None:
        return None
    train, epochs, _ = sizes
    return f"subset: {min(t * e for t in train for e in epochs):,} samples, not comparable"


def subset_detail(cells) -> str | None:
    """How ``cells`` differ from the blog's settings, e.g. "6,000 samples per epoch × 1 epoch,
    1,000 test samples; the blog: 60,000 × 10 epochs, 10,000 test samples"; None when they
    do not."""
    sizes = _sizes(cells)
    if sizes is None:
        return None
    train, epochs, test = sizes

    def listed(values):
        return "/".join(f"{v:,}" for v in sorted(values))
    word = "epoch" if epochs == {1} else "epochs"
    return (f"{listed(train)} samples per epoch × {listed(epochs)} {word}, {listed(test)} test "
            f"samples; the blog: {BLOG_SETTINGS['train_samples']:,} × "
            f"{BLOG_SETTINGS['epochs']} epochs, {BLOG_SETTINGS['test_samples']:,} test samples")


# ------------------------------------------------------------------------- the blog's arithmetic

def flattened_features(pool_after_each_conv: bool, image: int = 28, kernel: int = 3,
                       channels: int = 64) -> int:
    """Features the model's two 3x3 convolutions (no padding) and its 2x2 max-pooling leave
    of a ``image`` x ``image`` digit: one pool after both convolutions (the layer sizes'
    network) or one after each (the blog's printed forward())."""
    size = image
    for _ in range(2):
        size -= kernel - 1
        if pool_after_each_conv:
            size //= 2
    if not pool_after_each_conv:
        size //= 2
    return size * size * channels


def energy_cost(power_w: float, seconds: float, price_per_kwh: float) -> float:
    """Electricity of ``seconds`` at ``power_w``, in the currency of ``price_per_kwh``."""
    return power_w / 1000.0 * seconds / 3600.0 * price_per_kwh


def training_seconds(epoch_s: float, runs: int | None = None,
                     epochs: int | None = None) -> float:
    """Seconds of ``runs`` trainings (the blog's 10) of ``epochs`` epochs (the blog's 10)."""
    n_runs = FIGURES["cost_runs"] if runs is None else runs
    n_epochs = BLOG_SETTINGS["epochs"] if epochs is None else epochs
    return float(n_runs) * float(n_epochs) * float(epoch_s)


# ------------------------------------------------------------------------- verdict rules

def verdict_in_interval(claimed: float, est) -> tuple[Verdict, str]:
    """(verdict, why) of a claimed value against an estimate with an interval: confirmed when
    the interval contains it, contradicted when not, not checkable without an interval."""
    if est is None:
        return Verdict.NOT_CHECKABLE, "not measured here"
    if not est.has_interval:
        return Verdict.NOT_CHECKABLE, "one repeat gives no interval to check it against"
    if est.low <= claimed <= est.high:
        return Verdict.CONFIRMED, "inside the interval"
    return Verdict.CONTRADICTED, "outside the interval"


def verdict_accuracy_gap(claimed_gap: float, seed_spread: float | None,
                         device_diff=None) -> tuple[Verdict, str]:
    """(verdict, why) of the claim that the devices differ in accuracy by ``claimed_gap``
    points, given the seed-to-seed spread measured here (max - min over repeats, points; None
    without 2 repeats) and, where a GPU ran, this study's device difference (an estimate of
    the difference of medians).

    A gap no larger than the seed-to-seed spread cannot be told from the seed: contradicted
    as a device effect. A larger gap is confirmed when the interval of this study's own device
    difference excludes 0 (the devices differ here too), contradicted when it includes 0, and
    not checkable without GPU cells or without an interval."""
    if seed_spread is None:
        return Verdict.NOT_CHECKABLE, ("one repeat per cell gives no seed-to-seed spread to "
                                       "judge it by")
    if abs(claimed_gap) <= seed_spread:
        return Verdict.CONTRADICTED, ("a gap within the seed-to-seed spread says nothing about "
                                      "the devices")
    if device_diff is None:
        return Verdict.NOT_CHECKABLE, ("without GPU cells this study cannot measure a device "
                                       "difference")
    if not device_diff.has_interval:
        return Verdict.NOT_CHECKABLE, ("one repeat on a side gives no interval of the device "
                                       "difference")
    if device_diff.low <= 0 <= device_diff.high:
        return Verdict.CONTRADICTED, "here the devices do not differ beyond the seed"
    return Verdict.CONFIRMED, "here the devices differ too"


def unexplained_s(device: str) -> float:
    """Seconds of the blog's epoch on ``device`` ("cpu" or "gpu") that its data-loading and
    backprop times leave unexplained (58.7 - 2.1 - 32.4 = 24.2 s on the CPU)."""
    return (float(FIGURES[f"{device}_epoch_s"]) - float(FIGURES[f"{device}_data_s"])
            - float(FIGURES[f"{device}_backward_s"]))


def hardware_write_off(price: float, seconds: float, life_years: float,
                       hours_per_year: float) -> float:
    """The share of a machine's ``price`` that ``seconds`` of use write off, over its life
    (``life_years`` x ``hours_per_year`` hours of use)."""
    return price / (life_years * hours_per_year) * seconds / 3600.0


#: Relative tolerance within which a printed ratio or saving matches the arithmetic of the
#: blog's own figures (they are printed to 2-3 digits).
ARITHMETIC_TOLERANCE = 0.05
#: Relative tolerance within which a figure of the blog that does not depend on the machine
#: (the memory the same code and data take) is confirmed by this study's.
SAME_CODE_TOLERANCE = 0.25
#: Average CPU use (%, 100 = one core) above which a process is not "single-core".
SINGLE_CORE_MAX_PCT = 120.0
#: A GPU "pays for itself quickly" when its break-even takes at most this share of the
#: machines' life of use.
QUICK_SHARE_OF_LIFE = 0.1


def verdict_arithmetic(printed: float, computed: float,
                       tolerance: float = ARITHMETIC_TOLERANCE) -> Verdict:
    """Confirmed when a printed figure is the arithmetic of the blog's own figures (within
    ``tolerance``), else contradicted."""
    if computed == 0:
        return Verdict.holds(printed == 0)
    return Verdict.holds(abs(printed / computed - 1.0) <= tolerance)


def one_significant_figure(value: float) -> float:
    """``value`` rounded to one significant figure (11.3 -> 10)."""
    if value == 0:
        return 0.0
    magnitude = 10 ** math.floor(math.log10(abs(value)))
    return round(value / magnitude) * magnitude


def verdict_round_figure(title: float, table: float) -> Verdict:
    """Confirmed when the title's figure is the table's rounded to one significant figure
    (a round number for it), else contradicted."""
    return Verdict.holds(one_significant_figure(table) == title)


def verdict_relative(claimed: float, measured: float | None,
                     tolerance: float = SAME_CODE_TOLERANCE) -> Verdict:
    """A figure that the same code gives on any machine: confirmed when this study's is
    within ``tolerance`` of it, contradicted when not, not checkable without one."""
    if measured is None or claimed == 0:
        return Verdict.NOT_CHECKABLE
    return Verdict.holds(abs(measured / claimed - 1.0) <= tolerance)


def verdict_within_spread(claimed: float, values) -> tuple[Verdict, str]:
    """A figure that differs from seed to seed (accuracy, best epoch, final loss): confirmed
    when it lies within this study's repeats widened by their spread on each side ([min -
    spread, max + spread]), contradicted when outside, not checkable below 2 repeats."""
    values = [float(v) for v in values]
    if len(values) < 2:
        return Verdict.NOT_CHECKABLE, "one repeat gives no seed-to-seed spread to judge it by"
    low, high = min(values), max(values)
    spread = high - low
    if low - spread <= claimed <= high + spread:
        return Verdict.CONFIRMED, "within the repeats widened by their spread"
    return Verdict.CONTRADICTED, "outside the repeats widened by their spread"


def verdict_single_core(cpu_pct: float | None, cores: int | None) -> Verdict:
    """"Single-core use close to 100 %": confirmed when the process used at most
    :data:`SINGLE_CORE_MAX_PCT` % on average, contradicted above; not checkable without a
    measurement or on a machine of one core (where any process is single-core)."""
    if cpu_pct is None or not cores or cores < 2:
        return Verdict.NOT_CHECKABLE
    return Verdict.holds(cpu_pct <= SINGLE_CORE_MAX_PCT)


#: "No effective parallel computing" is contradicted when every core trains the blog's code
#: at least this much faster than one thread (the interval's low end above it), confirmed
#: when the gain stays below it (the interval's high end).
PARALLEL_GAIN = 1.25


def verdict_parallel(gain) -> Verdict:
    """"No effective parallel computing", from the threads experiment: ``gain`` (a
    :class:`mnistbench.results.stats.Estimate` of the blog's code's rate at every core over
    one thread's). Contradicted when its interval lies above :data:`PARALLEL_GAIN` (one run
    a side: the value), confirmed when below, not checkable when it holds the threshold or
    there is no estimate."""
    if gain is None:
        return Verdict.NOT_CHECKABLE
    low = gain.low if gain.has_interval else gain.value
    high = gain.high if gain.has_interval else gain.value
    if low >= PARALLEL_GAIN:
        return Verdict.CONTRADICTED
    if high < PARALLEL_GAIN:
        return Verdict.CONFIRMED
    return Verdict.NOT_CHECKABLE


def largest_phase(phase_seconds: Mapping[str, float]) -> str:
    """The phase of a training step that takes longest (of data, forward, backward,
    optimizer)."""
    steps = {p: phase_seconds[p] for p in ("data", "forward", "backward", "optimizer")}
    return max(steps, key=steps.__getitem__)


def verdict_not_bottleneck(phase_seconds: list[Mapping[str, float]]) -> Verdict:
    """"Data loading is not the bottleneck": contradicted when it is the longest phase of a
    training step on any device measured, confirmed when on none; not checkable without
    phase times."""
    if not phase_seconds:
        return Verdict.NOT_CHECKABLE
    return Verdict.holds(all(largest_phase(p) != "data" for p in phase_seconds))


def verdict_faster(est) -> Verdict:
    """"X speeds it up": confirmed when the interval of the speed-up lies above 1,
    contradicted when it lies below, not distinguishable when it holds 1 (within noise), not
    checkable without an interval."""
    if est is None or not est.has_interval:
        return Verdict.NOT_CHECKABLE
    if est.low > 1.0:
        return Verdict.CONFIRMED
    return Verdict.CONTRADICTED if est.high < 1.0 else Verdict.NOT_DISTINGUISHABLE


def verdict_pays_back(runs: float, run_s: float, life_hours: float) -> Verdict:
    """"The GPU pays for itself quickly": confirmed when its break-even (``runs`` GPU runs of
    ``run_s`` each) takes at most :data:`QUICK_SHARE_OF_LIFE` of the machines' life of use
    (``life_hours``), contradicted when longer or never."""
    if math.isinf(runs):
        return Verdict.CONTRADICTED
    return Verdict.holds(runs * run_s / 3600.0 <= QUICK_SHARE_OF_LIFE * life_hours)


# ------------------------------------------------------------------------- the tips

# The tips themselves (what each changes, where it applies and why not elsewhere) have one
# home, mnistbench.core.study.TIPS; here are the verdict rules.
BASELINE = "baseline"


def tip(name: str) -> study.Tip:
    """The tip called ``name`` (one the project does not know: no description, applies
    everywhere)."""
    try:
        return study.tip_by_name(name)
    except study.StudyError:
        return study.Tip(name, "", {})


def tip_order(names) -> list[str]:
    """``names`` in the order of :data:`mnistbench.core.study.TIPS`, unknown tips after them,
    alphabetically."""
    known = list(study.TIP_NAMES)
    return sorted(set(names), key=lambda n: (known.index(n) if n in known else len(known), n))


PAYS_OFF = "pays off"
SLOWER = "slower"
WITHIN_NOISE = "within noise"
COSTS_ACCURACY = "faster, but costs accuracy"
UNCLEAR = "unclear: 1 repeat"


def tip_verdict(speedup, accuracy_drop: float | None,
                seed_spread: float | None) -> str:
    """Verdict of one tip on one device from its speed-up over the baseline (an estimate, CPU
    of the baseline's epoch time over the tip's), the accuracy it loses (baseline median minus
    the tip's, points) and the baseline's seed-to-seed spread (points)."""
    if speedup is None:
        return "not measured"
    if not speedup.has_interval:
        return UNCLEAR
    if speedup.low > 1.0:
        if (accuracy_drop is not None and seed_spread is not None
                and accuracy_drop > seed_spread):
            return COSTS_ACCURACY
        return PAYS_OFF
    if speedup.high < 1.0:
        return SLOWER
    return WITHIN_NOISE
