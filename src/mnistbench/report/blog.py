"""The blog post this study starts from, as reference data, and the arithmetic and rules the
report uses to check it: its figures (measured on another machine, never by this study), the
settings its headline is about, which of our cells stand for those settings, whether they are
comparable, the tips it gives, and the verdict rules of every check. One home for the report
and the charts; the report words the checks, this module decides them.

The blog: "CPU vs GPU training MNIST", an Intel Core i7-12700K against an NVIDIA GeForce RTX
4090, the pytorch/examples MNIST CNN, batch 128, fp32, 10 epochs. Its figures that this project
holds are in :data:`BLOG`; a figure of its tables that the project does not hold is None there,
and every check that needs it is "not checkable" (nothing is made up).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from mnistbench.core import study

#: The blog's own figures (another machine: not measured by this study), as printed. None: a
#: figure of the blog's tables that this project's reference data does not hold.
BLOG: dict[str, object] = {
    # hardware
    "cpu": "Intel Core i7-12700K",
    "gpu": "NVIDIA GeForce RTX 4090",
    # time: per epoch (s) and the headline ratio
    "cpu_epoch_s": 58.7,
    "gpu_epoch_s": 5.2,
    "speedup": 11.3,
    # phases: the blog's per-epoch data-loading and backprop times (s). Not held; what they
    # leave of the CPU epoch is ("about 24 s of the 58.7 s").
    "cpu_data_s": None,
    "cpu_backward_s": None,
    "gpu_data_s": None,
    "gpu_backward_s": None,
    "cpu_unexplained_s": 24.0,
    # resources: not held
    "cpu_util_pct": None,
    "gpu_util_pct": None,
    "memory_mb": None,
    # accuracy: the gap between the devices (percentage points); the values themselves,
    # the best epoch and the final loss are not held
    "accuracy_gap_points": 0.2,
    "cpu_accuracy_pct": None,
    "gpu_accuracy_pct": None,
    "best_epoch": None,
    "final_loss": None,
    # cost of 10 trainings (USD): the inputs and the printed results
    "cost_runs": 10,
    "currency": "USD",
    "price_per_kwh": 0.15,
    "cpu_power_w": 150.0,
    "cpu_hours": 1.63,
    "cpu_cost": 0.37,  # printed as $0.37
    "gpu_cost": 0.10,  # printed as $0.10
    # The GPU's power is not printed beside its cost; 450 W (the RTX 4090's rated board
    # power) is the power that gives the corrected $0.0097 of the project's issue 15.
    "gpu_power_w": 450.0,
    # the model: its printed forward() pools after each convolution; its fc1 takes 9216
    "fc1_in_features": 9216,
    "pools_in_forward": 2,
}

#: Figures of :data:`BLOG` that are implied rather than printed, and why.
IMPLIED = {
    "gpu_power_w": "the RTX 4090's rated 450 W board power: not printed beside the blog's GPU "
                   "cost; it is the power that gives the corrected $0.0097 of issue 15",
}

#: The blog's settings: batch size (samples), precision, epochs, training and test samples.
BLOG_SETTINGS = {"batch_size": 128, "precision": "fp32", "epochs": 10, "train_samples": 60_000,
                 "test_samples": 10_000}
#: The blog's loader: its own pipeline (a Dataset with a per-sample transform, DataLoader).
BLOG_LOADER = "dataloader"

#: Verdicts of a check.
CONFIRMED = "confirmed"
CONTRADICTED = "contradicted"
NOT_CHECKABLE = "not checkable"
VERDICTS = (CONFIRMED, CONTRADICTED, NOT_CHECKABLE)


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
    runs = BLOG["cost_runs"] if runs is None else runs
    epochs = BLOG_SETTINGS["epochs"] if epochs is None else epochs
    return float(runs) * float(epochs) * float(epoch_s)


# ------------------------------------------------------------------------- verdict rules

def verdict_in_interval(claimed: float, est) -> tuple[str, str]:
    """(verdict, why) of a claimed value against an estimate with an interval: confirmed when
    the interval contains it, contradicted when not, not checkable without an interval."""
    if est is None:
        return NOT_CHECKABLE, "not measured here"
    if not est.has_interval:
        return NOT_CHECKABLE, "one repeat gives no interval to check it against"
    if est.low <= claimed <= est.high:
        return CONFIRMED, "inside the interval"
    return CONTRADICTED, "outside the interval"


def verdict_accuracy_gap(claimed_gap: float, seed_spread: float | None,
                         device_diff=None) -> tuple[str, str]:
    """(verdict, why) of the claim that the devices differ in accuracy by ``claimed_gap``
    points, given the seed-to-seed spread measured here (max - min over repeats, points; None
    without 2 repeats) and, where a GPU ran, this study's device difference (an estimate of
    the difference of medians).

    A gap no larger than the seed-to-seed spread cannot be told from the seed: contradicted
    as a device effect. A larger gap is confirmed when the interval of this study's own device
    difference excludes 0 (the devices differ here too), contradicted when it includes 0, and
    not checkable without GPU cells or without an interval."""
    if seed_spread is None:
        return NOT_CHECKABLE, "one repeat per cell gives no seed-to-seed spread to judge it by"
    if abs(claimed_gap) <= seed_spread:
        return CONTRADICTED, ("a gap within the seed-to-seed spread says nothing about the "
                              "devices")
    if device_diff is None:
        return NOT_CHECKABLE, "without GPU cells this study cannot measure a device difference"
    if not device_diff.has_interval:
        return NOT_CHECKABLE, ("one repeat on a side gives no interval of the device "
                               "difference")
    if device_diff.low <= 0 <= device_diff.high:
        return CONTRADICTED, "here the devices do not differ beyond the seed"
    return CONFIRMED, "here the devices differ too"


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
