"""How the report writes a value: numbers with significant digits and units, durations,
amounts, ratios and accuracy differences with their intervals, counts with their noun, the
blog's figures as it prints them, and a command as a reader would type it.

Every function takes a value that may be missing (None or NaN) and returns text (an en dash
when there is nothing to show): the sections compute, this module words.
"""

from __future__ import annotations

import math
import re
import shlex
from pathlib import Path

from mnistbench.results import stats

#: What a missing value prints as.
DASH = "–"


def missing(value) -> bool:
    """Whether ``value`` is absent: None, or a float that is not finite (NaN, ±inf)."""
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def num(value, digits: int = 3, unit: str = "") -> str:
    """``value`` with ``digits`` significant digits (thousands grouped) and its unit;
    an en dash when missing."""
    if missing(value):
        return DASH
    value = float(value)
    if value == 0:
        text = "0"
    elif abs(value) >= 10 ** digits:
        text = f"{value:,.0f}"
    else:
        decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
        text = f"{value:,.{decimals}f}"
    return f"{text} {unit}".strip() if unit else text


def count(value) -> str:
    """A count or index (an epoch, a batch size, a repeat, a median of epochs): 6, 6.5, 128;
    an en dash when missing."""
    return DASH if missing(value) else f"{float(value):g}"


def plural(n, word: str, words: str | None = None) -> str:
    """``n`` and ``word`` in the right number: 1 epoch, 2 epochs, 1 or 2 epochs (a text n)."""
    if isinstance(n, str):
        return f"{n} {word if n == '1' else (words or word + 's')}"
    return f"{count(n)} {word if n == 1 else (words or word + 's')}"


def plain(value) -> str:
    """A parameter or environment value as text: whole floats without decimals (128, not
    128.000), other floats with up to 6 significant digits."""
    if isinstance(value, float) and math.isfinite(value):
        return str(int(value)) if value.is_integer() else f"{value:.6g}"
    return str(value)


def seconds(value) -> str:
    """A duration: seconds below two minutes, else minutes, else hours."""
    if missing(value):
        return DASH
    value = float(value)
    if value < 120:
        return num(value, 3, "s")
    if value < 7200:
        return f"{num(value, 3, 's')} ({value / 60:.1f} min)"
    return f"{num(value, 3, 's')} ({value / 3600:.1f} h)"


def money(value, currency: str) -> str:
    """An amount with 3 significant digits (more for large amounts) and its currency."""
    if missing(value):
        return DASH
    value = float(value)
    return f"{num(value, 3)} {currency}" if abs(value) < 1000 else f"{value:,.0f} {currency}"


def usd(value: float) -> str:
    """A dollar amount of the blog's cost table: as printed ($0.37, $0.10) from a cent up,
    else 3 significant digits ($0.0367)."""
    return f"${value:.2f}" if value >= 0.1 else f"${num(value, 3)}"


def runs(value: float) -> str:
    """A break-even in training runs: "1,234 runs", or what 0 and infinity mean."""
    if math.isinf(value):
        return "never (the GPU run is not cheaper)"
    if value == 0:
        return "0 (the GPU machine costs no more)"
    return f"{value:,.0f} runs"


def as_printed(value, unit: str = "") -> str:
    """A figure of the blog as it prints it (5.2 s, not 5.20 s); an en dash when missing."""
    if value is None:
        return DASH
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10_000:
        text = f"{value:,}"
    else:
        text = f"{value:g}" if isinstance(value, float) else str(value)
    return f"{text} {unit}".strip()


# ---------------------------------------------------------------------------- estimates

def spread(values, fmt=lambda v: num(v, 4)) -> str:
    """The median of ``values`` and their min – max over repeats: "98.9 (98.7 – 99.0)", or the
    one value (the table's repeats column says there is one)."""
    s = stats.spread(values)
    if s is None:
        return DASH
    median, low, high, n = s
    if n == 1:
        return fmt(median)
    return f"{fmt(median)} ({fmt(low)} – {fmt(high)})"


def _runs(est: stats.Estimate) -> str:
    """How many runs an interval rests on: "3 runs", or "2 runs a side" for a comparison."""
    side = " a side" if "two medians" in est.method else ""
    return f"{est.n} run{'s' if est.n != 1 else ''}{side}"


def _qualified(est: stats.Estimate, span: str) -> str:
    """``span`` named as what it is: a 95 % interval where the runs give it, else a range of
    the runs with the coverage they do give (a lower bound for a comparison)."""
    if est.coverage is not None and est.coverage < est.confidence - 1e-9:
        bound = "at least " if "two medians" in est.method else ""
        return f"range of {_runs(est)}: {span}, {bound}{est.coverage * 100:.0f} % coverage"
    return f"{est.confidence * 100:.0f} % CI {span}, {_runs(est)}"


def interval(est: stats.Estimate | None, unit: str = "") -> str:
    """The interval part of an estimate with the runs it rests on: "95 % CI a–b unit,
    7 runs", "range of 3 runs: a–b unit, 75 % coverage" when too few runs give 95 %, or why
    there is none."""
    if est is None:
        return "no data"
    if not est.has_interval:
        return "no interval: 1 run" + (" on one side" if "one side" in est.method else "")
    return _qualified(est, f"{num(est.low, 3)}–{num(est.high, 3)}" + (f" {unit}" if unit else ""))


def ratio_interval(est: stats.Estimate | None) -> str:
    """A ratio's interval, and "within noise" when it contains 1 (or, without an interval,
    a ratio too close to 1 to tell from one repeat)."""
    text = interval(est, "×")
    if est is None:
        return text
    noise = stats.within_noise(est, 1.0)
    if noise:
        return f"{text}: within noise"
    if noise is None and abs(est.value - 1.0) < 0.1:
        return f"{text}: too close to 1 to tell"
    return text


def interval_qualifier(est: stats.Estimate | None) -> str | None:
    """What an interval is, without its span: "range of 2 runs a side, at least 25 %
    coverage" or "95 % CI, 7 runs"; None without an interval."""
    if est is None or not est.has_interval:
        return None
    if est.coverage is not None and est.coverage < est.confidence - 1e-9:
        bound = "at least " if "two medians" in est.method else ""
        return f"range of {_runs(est)}, {bound}{est.coverage * 100:.0f} % coverage"
    return f"{est.confidence * 100:.0f} % CI, {_runs(est)}"


class TableIntervals:
    """The ratio intervals of one table: each statistic named once. :meth:`add` gives a cell
    (a dict whose ``text`` :meth:`caption` fills in); when every interval of the table is of
    one kind (e.g. all ranges of 2 runs a side), the caption names it and the cells show the
    spans alone, else each cell keeps its full wording."""

    def __init__(self) -> None:
        self.cells: list[dict] = []

    def add(self, est: stats.Estimate | None) -> dict:
        full = ratio_interval(est) if est is not None else ""
        qualifier = interval_qualifier(est)
        short = full
        if qualifier is not None:
            suffix = next((t for t in (": within noise", ": too close to 1 to tell")
                           if full.endswith(t)), "")
            short = f"{num(est.low, 3)}–{num(est.high, 3)} ×{suffix}"
        cell = {"full": full, "short": short, "qualifier": qualifier, "text": full}
        self.cells.append(cell)
        return cell

    def caption(self) -> str:
        """The table's legend of its intervals ("" when they differ, each cell then naming
        its own), filling in every cell's ``text``."""
        kinds = {c["qualifier"] for c in self.cells if c["qualifier"]}
        shared = len(kinds) == 1
        for c in self.cells:
            c["text"] = c["short"] if shared and c["qualifier"] else c["full"]
        return f"Intervals: each a {kinds.pop()}." if shared else ""


def ratio_phrase(est: stats.Estimate | None) -> str:
    """"9.8× (95 % CI 9.1–10.4×, 7 runs a side)", with "within noise" where the interval
    holds 1."""
    if est is None:
        return DASH
    return f"{num(est.value, 3, '×')} ({ratio_interval(est)})"


def ratio_parts(est: stats.Estimate | None) -> tuple[str, str]:
    """(the ratio, its interval) for a table cell; dashes and no interval without one."""
    return (DASH, "") if est is None else (num(est.value, 3, "×"), ratio_interval(est))


def points(value, sign: bool = True) -> str:
    """An accuracy difference in percentage points, two decimals, with a true minus sign:
    "+0.04 points", "−0.10 points"."""
    if missing(value):
        return DASH
    text = f"{abs(float(value)):.2f}"
    if sign:
        text = ("−" if value < 0 and text != "0.00" else "+") + text
    return f"{text} points"


def points_interval(est: stats.Estimate | None) -> str:
    """The interval of an accuracy difference: "95 % CI −0.13 to +0.06 points, 7 runs a
    side", a range with its coverage below 95 %, or why there is none."""
    if est is None:
        return "no data"
    if not est.has_interval:
        return "no interval: 1 run on a side"
    return _qualified(est, f"{points(est.low)[:-7]} to {points(est.high)}")


# ---------------------------------------------------------------------------- commands

def _raw_words(command: str) -> list[str]:
    """``command`` split at unquoted white space, each word as written (quotes kept), so
    shell operators (``&&``, ``|``, ``>``) stay apart from quoted text; ValueError when a
    quote is not closed."""
    words, word, quote, i = [], [], None, 0
    while i < len(command):
        ch = command[i]
        if quote is not None:
            word.append(ch)
            if ch == quote:
                quote = None
            elif ch == "\\" and quote == '"' and i + 1 < len(command):
                word.append(command[i + 1])
                i += 1
        elif ch in "'\"":
            quote = ch
            word.append(ch)
        elif ch == "\\" and i + 1 < len(command):
            word += [ch, command[i + 1]]
            i += 1
        elif ch.isspace():
            if word:
                words.append("".join(word))
            word = []
        else:
            word.append(ch)
        i += 1
    if quote is not None:
        raise ValueError("unclosed quote")
    if word:
        words.append("".join(word))
    return words


def readable_command(command: str, root: Path | None = None) -> str:
    """``command`` with absolute paths under ``root`` (the current folder) made relative, and
    each quoted argument quoted only as much as a shell needs, with double quotes where they
    read better ("mirrors=['../shared/mnist']" rather than shlex's '"'"' escapes). Unquoted
    words (shell operators among them) keep their form; text that does not parse is returned
    as it is."""
    root = Path.cwd() if root is None else Path(root)
    prefix = str(root).rstrip("/") + "/"
    try:
        raw = _raw_words(command)
    except ValueError:
        return command
    out = []
    for word in raw:
        if not re.search(r"[\'\"\\]", word):
            out.append("." if word == str(root) else word.replace(prefix, ""))
            continue
        try:
            (text,) = shlex.split(word)
        except ValueError:
            out.append(word)
            continue
        text = "." if text == str(root) else text.replace(prefix, "")
        if text and re.fullmatch(r"[\w@%+=:,./-]+", text):
            out.append(text)
        elif not re.search(r'["$`\\!]', text):
            out.append(f'"{text}"')
        else:
            out.append(shlex.quote(text))
    return " ".join(out)
