"""The wording the sections of "Why" share (:mod:`~mnistbench.report.sections.why` and
:mod:`~mnistbench.report.sections.why_scaling`): devices and environments named in a sentence,
rates and shares written with three significant digits, loaders and devices in the order the
sentences take them, and the sentence for a figure the results do not hold."""

from __future__ import annotations

from mnistbench.report import blog
from mnistbench.report.formatting import num
from mnistbench.report.selections import (
    COMPARED_DEVICES,
    Inputs,
    device_name,
    distinct,
    limit_share,
)

#: The loader the sentences prefer: data held in memory (the device's own work), then the
#: blog's DataLoader.
LOADER_ORDER = ("resident", blog.BLOG_LOADER)


def the_device(device: str) -> str:
    """"the CPU", "the GPU", or "the xpu"."""
    return f"the {device_name(device)}"


def capitalised(text: str) -> str:
    """``text`` with its first letter upper case."""
    return text[:1].upper() + text[1:]


def on_env(inputs: Inputs, env) -> str:
    """"On ENV, " with several environments, else nothing."""
    return f"On {env}, " if inputs.multi_env else ""


def sentence(prefix: str, text: str) -> str:
    """``text`` after ``prefix`` ("On ENV, " or nothing), capitalised where it starts."""
    return prefix + text if prefix else capitalised(text)


def gflop_rate(value) -> str:
    """A rate of arithmetic in GFLOP/s."""
    return num(value, 3, "GFLOP/s")


def percent(value) -> str:
    """A share in percent, three significant digits."""
    return num(value, 3, "%")


def ordered_loaders(frame) -> list[str]:
    """The loaders of ``frame``, those of :data:`LOADER_ORDER` first."""
    found = sorted(set(frame["loader"])) if not frame.empty else []
    return sorted(found, key=lambda x: (LOADER_ORDER.index(x) if x in LOADER_ORDER
                                        else len(LOADER_ORDER), x))


def ordered_devices(names) -> list[str]:
    """``names`` of devices, the CPU first, then the GPU, then others by name."""
    present = set(names)
    return [d for d in COMPARED_DEVICES if d in present] + sorted(present - set(COMPARED_DEVICES))


def limit_shares(frame) -> list[float]:
    """Each cell's share of its measured limit (%), the cells without one left out."""
    return [v for v in limit_share(frame).tolist() if v == v]


#: What a share of the measured limit above 100 % is called where its cells recorded no
#: reason (summaries written before ``limit_note``).
PAST_LIMIT = "past 100 % of the measured limit"


def past_limit(frame, share: float | None) -> str:
    """What a share (%) of ``frame``'s cells above 100 % must carry: the reasons those cells
    recorded (``limit_note``, mnistbench.results.aggregate.past_limit_reason), else that it
    is past the limit with none recorded; "" at or below 100 % (or without a share)."""
    if share is None or share <= 100:
        return ""
    notes = distinct(frame, "limit_note")
    return "; ".join(notes) if notes else f"{PAST_LIMIT}: these results record no reason"


def with_past_limit(text: str, frame, share: float | None) -> str:
    """``text`` (a share written out) with :func:`past_limit`'s flag in brackets, if any."""
    note = past_limit(frame, share)
    return f"{text} ({note})" if note else text


def not_measured(subject: str, why: str) -> str:
    """"SUBJECT is not measured: WHY."."""
    return f"{subject} is not measured: {why}."
