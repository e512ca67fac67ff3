"""The headline figures of an aggregated study as one table to paste into an issue
(``mnistbench table``): Markdown or CSV, from ``summary.csv`` alone.

One row per cell of the study but for its repeat (experiment, device, precision, loader,
batch size, and the tips experiment's lever or the network's width where a row has one),
with, per environment, the medians over its ``ok`` runs of each run's ``epoch_s_median``
(s), ``samples_per_s`` and ``final_test_acc`` (%), and how many runs are ok (those timed on
a busy machine, and the runs of any other status, said beside it). Without environments named
every environment of the table follows the other (an ``env`` column); with environments
named (:func:`build` ``envs``) those stand side by side, in that order, and two of them get
the speed-up of the second over the first (the ratio of their median epoch times).

Every row is checked as a cell would give it (:func:`mnistbench.results.rows.check_rows`:
names, enumerated settings, physical ranges) before it is shown; every free-text field is
inert in both formats (:mod:`mnistbench.core.untrusted`: a Markdown code span, a CSV field
that no spreadsheet runs as a formula).

Import rule: the standard library, :mod:`mnistbench.core` and the standard-library-only
:mod:`mnistbench.results.rows` (no pandas, no torch), so it runs anywhere a
``summary.csv`` is, fast.
"""

from __future__ import annotations

import csv
import errno
import io
import math
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mnistbench.core import study, untrusted
from mnistbench.core.devices import DEVICES, LOADERS, PRECISIONS
from mnistbench.core.durations import seconds
from mnistbench.results.rows import (
    MAX_CSV_FIELD,
    TableRowError,
    check_rows,
    csv_fields_up_to,
    read_table_text,
)

SUMMARY_CSV = "summary.csv"
#: What tells the rows apart: the settings of a cell but its environment and repeat.
KEYS = ("experiment", "device", "precision", "loader", "batch_size")
#: Further settings that tell rows apart where a row has them (a column only then): the tips
#: experiment's lever, and the network's width (absent from older tables: the default).
EXTRA_KEYS = {"tip": "", "width": "1"}
#: The figures of a row: summary.csv column -> (Markdown header, CSV header).
FIGURES = {"epoch_s_median": ("epoch s", "epoch_s_median"),
           "samples_per_s": ("samples/s", "samples_per_s"),
           "final_test_acc": ("final acc %", "final_test_acc")}
#: The columns of summary.csv the table reads (``busy`` and the :data:`EXTRA_KEYS` may be
#: absent: an older table).
NEEDED = ("env", "status", *KEYS, *FIGURES)
FORMATS = ("markdown", "csv")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class TableError(Exception):
    """The table cannot be made: one paragraph naming the file or the flag, and the fix."""


@dataclass
class Runs:
    """The runs of one row in one environment: the figures of its ok runs, how many ok runs
    were busy, and the count of every other status."""

    figures: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in FIGURES})
    ok: int = 0
    busy: int = 0
    other: Counter = field(default_factory=Counter)

    def median(self, column: str) -> float | None:
        values = self.figures[column]
        return statistics.median(values) if values else None

    def not_ok(self) -> str:
        """The runs of other statuses, e.g. ``2 oom; 1 failed`` (empty when none)."""
        return "; ".join(f"{n} {status}" for status, n in sorted(self.other.items()))

    def note(self) -> str:
        """``1 busy; 2 oom`` (empty when all ran quietly and ok)."""
        return "; ".join(p for p in (f"{self.busy} busy" if self.busy else "", self.not_ok())
                         if p)


@dataclass
class Table:
    """The rows (key values -> env -> :class:`Runs`), their key columns, the environments
    in order, and whether they stand side by side."""

    keys: tuple[str, ...]
    envs: tuple[str, ...]
    rows: dict[tuple, dict[str, Runs]]
    side_by_side: bool
    source: str


def read_summary(results: Path) -> list[dict[str, str]]:
    """The rows of ``results/summary.csv`` as text; :class:`TableError` naming the file when it
    is missing, unreadable or lacks a column the table needs."""
    path = Path(results) / SUMMARY_CSV
    try:
        text = read_table_text(Path(results), SUMMARY_CSV)
    except untrusted.UnsafeFile as exc:
        if exc.errno == errno.ENOENT:
            raise TableError(
                f"{path} does not exist. Run `mnistbench aggregate RUNS --out-dir {results}` "
                "first, or pass --results with the folder that holds the aggregated tables "
                "(report/data for the published study).") from None
        raise TableError(f"cannot read {path}: {exc.why}. The table is read only where it "
                         f"lies, as a regular file: run `mnistbench aggregate RUNS --out-dir "
                         f"{results}` again, or pass --results the folder that holds it."
                         ) from None
    try:
        with csv_fields_up_to(), io.StringIO(text, newline="") as handle:
            reader = csv.DictReader(handle)
            rows = list(reader)
            columns = reader.fieldnames or []
    except (OSError, UnicodeDecodeError) as exc:
        raise TableError(f"cannot read {path}: {exc}. Pass --results a folder whose "
                         "summary.csv is readable UTF-8 (the aggregate writes one).") from None
    except csv.Error as exc:
        raise TableError(f"cannot read {path}: {exc} (a field longer than "
                         f"{MAX_CSV_FIELD} characters, or a damaged quote). The table "
                         "was edited or damaged: run `mnistbench aggregate RUNS --out-dir "
                         f"{results}` again.") from None
    missing = [c for c in NEEDED if c not in columns]
    if missing:
        raise TableError(f"{path} lacks the column(s) {', '.join(missing)}: it is not a "
                         "summary.csv of `mnistbench aggregate`, or it was edited. Rerun "
                         "`mnistbench aggregate`.")
    for line, row in enumerate(rows, start=2):
        if None in row or any(v is None for v in row.values()):
            raise TableError(f"{path} line {line} has another number of fields than its "
                             "header: the table was edited or cut short. Rerun `mnistbench "
                             "aggregate`.")
    try:
        check_rows("summary", rows, path)
    except TableRowError as exc:
        raise TableError(str(exc)) from None
    return rows


def _number(text: str, path: str, line: int, column: str) -> float | None:
    if text.strip() == "":
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise TableError(f"{path} line {line}: column {column} holds {text!r}, which is not a "
                         "finite number. The table was edited or damaged: rerun `mnistbench "
                         "aggregate`, which writes only numbers there.")
    return value


def _order(value: str, known: Sequence[str]) -> tuple:
    return (known.index(value), "") if value in known else (len(known), value)


def _sort_key(key: tuple, names: Sequence[str]) -> tuple:
    orders = {"experiment": study.EXPERIMENTS, "device": DEVICES, "precision": PRECISIONS,
              "loader": LOADERS}
    out = []
    for name, value in zip(names, key, strict=True):
        if name in orders:
            out.append(_order(value, orders[name]))
        else:
            with_number = re.fullmatch(r"[0-9]+(\.[0-9]*)?", value)
            out.append((0, float(value), "") if with_number else (1, 0.0, value))
    return tuple(out)


def build(rows: Iterable[Mapping[str, str]], envs: Sequence[str] = (),
          experiments: Sequence[str] = (), source: str = SUMMARY_CSV) -> Table:
    """The table of summary.csv ``rows``: every environment one after the other, or those of
    ``envs`` side by side (:class:`TableError` for one the table lacks); only the
    ``experiments`` named, when any are. ``source`` names the file in messages."""
    rows = list(rows)
    present = sorted({r["env"] for r in rows})
    unknown = [e for e in envs if e not in present]
    if unknown:
        raise TableError(f"{source} has no environment {', '.join(map(repr, unknown))}; it "
                         f"holds {', '.join(present) or 'none'}. Pass one of those to --env.")
    if len(set(envs)) != len(envs):
        twice = dict.fromkeys(e for e in envs if list(envs).count(e) > 1)
        raise TableError(f"--env names {', '.join(twice)} more than once; name each "
                         "environment once.")
    known = sorted({r["experiment"] for r in rows})
    unknown = [e for e in experiments if e not in known]
    if unknown:
        raise TableError(f"{source} has no experiment {', '.join(map(repr, unknown))}; it "
                         f"holds {', '.join(known) or 'none'}. Pass one of those to "
                         "--experiment.")
    chosen = tuple(envs) or tuple(present)
    selected = [(line, row) for line, row in enumerate(rows, start=2)
                if row["env"] in chosen and (not experiments or row["experiment"] in experiments)]
    extra = [k for k, default in EXTRA_KEYS.items()
             if any((r.get(k) or default).strip() != default for _, r in selected)]
    names = (*KEYS, *extra)
    table: dict[tuple, dict[str, Runs]] = {}
    for line, row in selected:
        key = tuple((row.get(k) or EXTRA_KEYS.get(k, "")).strip() for k in names)
        runs = table.setdefault(key, {}).setdefault(row["env"], Runs())
        if row["status"] != "ok":
            runs.other[row["status"] or "no status"] += 1
            continue
        runs.ok += 1
        runs.busy += (row.get("busy") or "").strip().lower() == "true"
        for column in FIGURES:
            value = _number(row[column], source, line, column)
            if value is not None:
                runs.figures[column].append(value)
    ordered = dict(sorted(table.items(), key=lambda item: _sort_key(item[0], names)))
    return Table(names, chosen, ordered, side_by_side=bool(envs), source=source)


# ---------------------------------------------------------------------------------------------
# Formatting (durations: mnistbench.core.durations.seconds)
def _markdown_figure(column: str, value: float | None) -> str:
    if value is None:
        return "–"
    if column == "epoch_s_median":
        return seconds(value)
    if column == "samples_per_s":
        return f"{value:,.0f}"
    return f"{value:.2f}"


def _csv_figure(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def _runs_text(runs: Runs | None) -> str:
    if runs is None:
        return "0"
    note = runs.note()
    return f"{runs.ok} ({note})" if note else str(runs.ok)


def _speedup(first: Runs | None, second: Runs | None) -> float | None:
    """How many times faster ``second`` ran an epoch than ``first`` (medians)."""
    a = first.median("epoch_s_median") if first else None
    b = second.median("epoch_s_median") if second else None
    return a / b if a and b else None


def _cell(text: object) -> str:
    """Text for a Markdown table cell: on one line, pipes escaped."""
    return " ".join(_CONTROL.sub(" ", str(text)).split()).replace("|", "\\|") or " "


#: Text Markdown shows as it is (letters, digits and . , = + : / - and spaces; an underscore
#: is escaped), unless GitHub would make a link of it (``www.``, ``scheme://``).
_PLAIN = re.compile(r"[A-Za-z0-9 .,=+:/_–-]*")
_AUTOLINK = re.compile(r"(?i)www\.|://")


def _free(text: object) -> str:
    """A value from the table (an environment, a setting, a file name) for a Markdown
    table cell: plain where it holds no character Markdown or HTML gives a meaning and is
    no bare URL GitHub links (its underscores escaped), else in a code span (HTML and
    Markdown in it stay text; :func:`mnistbench.core.untrusted.markdown_cell`)."""
    text = " ".join(_CONTROL.sub(" ", str(text)).split())
    if text and _PLAIN.fullmatch(text) and not _AUTOLINK.search(text):
        return text.replace("_", "\\_")
    return untrusted.markdown_cell(text)


def _records(table: Table, markdown: bool) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of ``table``, its figures formatted for Markdown or for CSV."""
    key_headers = [("batch" if markdown else "batch_size") if k == "batch_size" else k
                   for k in table.keys]

    def figures(runs: Runs | None) -> list[str]:
        out = []
        for column in FIGURES:
            value = runs.median(column) if runs else None
            out.append(_markdown_figure(column, value) if markdown else _csv_figure(value))
        if markdown:
            return [*out, _runs_text(runs)]
        return [*out, str(runs.ok if runs else 0), str(runs.busy if runs else 0),
                runs.not_ok() if runs else ""]

    tail = [h[0] for h in FIGURES.values()] + ["runs"] if markdown else \
        [h[1] for h in FIGURES.values()] + ["runs", "busy_runs", "not_ok"]
    pair = table.side_by_side and len(table.envs) == 2
    if table.side_by_side:
        shown = {env: _free(env) if markdown else env for env in table.envs}
        header = [*key_headers, *(f"{shown[env]} {t}" if markdown else f"{env}:{t}"
                                  for env in table.envs for t in tail)]
        if pair:
            first, second = (shown[env] for env in table.envs)
            header.append(f"speed-up {second} vs {first}" if markdown
                          else f"speedup:{second}/{first}")
        body = []
        for key, by_env in table.rows.items():
            line = list(key)
            for env in table.envs:
                line += figures(by_env.get(env))
            if pair:
                ratio = _speedup(by_env.get(table.envs[0]), by_env.get(table.envs[1]))
                line.append(("–" if ratio is None else f"{ratio:.2f}×") if markdown
                            else _csv_figure(ratio))
            body.append(line)
        return header, body
    header = ["env", *key_headers, *tail]
    body = [[env, *key, *figures(by_env[env])]
            for env in table.envs for key, by_env in table.rows.items() if env in by_env]
    return header, body


def markdown(table: Table) -> str:
    """``table`` as a GitHub-flavoured Markdown table, with one line under it saying what
    the figures are and where they come from."""
    header, body = _records(table, markdown=True)
    keys = len(table.keys) + (0 if table.side_by_side else 1)  # the free-text columns
    numeric = {i for i, h in enumerate(header)
               if any(h.endswith(t) for t in ("epoch s", "samples/s", "acc %", "batch", "width"))
               or h.startswith("speed-up")}
    lines = ["| " + " | ".join(header) + " |",  # its environments already _free
             "|" + "|".join("---:" if i in numeric else "---" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(_free(v) if i < keys else _cell(v) for i, v in enumerate(row))
              + " |" for row in body]
    if not body:
        lines.append("| " + " | ".join(["–"] * len(header)) + " |")
    lines.append("")
    lines.append(f"Medians over each row's ok runs (epoch s: each run's median epoch time; "
                 f"final acc: the test accuracy after the last epoch), from {_free(table.source)}"
                 + (". Speed-up: the ratio of the two median epoch times."
                    if table.side_by_side and len(table.envs) == 2 else "."))
    return "\n".join(lines) + "\n"


def csv_text(table: Table) -> str:
    """``table`` as CSV: plain numbers (6 significant digits, empty where none), one header
    line; a text field that a spreadsheet would run as a formula (``=``, ``+``, ``-``, ``@``,
    a tab or a carriage return first) starts with ``'``
    (:func:`mnistbench.core.untrusted.csv_safe`); a negative number stays a number."""
    header, body = _records(table, markdown=False)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    def field(value: object) -> str:  # inert, and on one line
        return _CONTROL.sub(" ", untrusted.csv_safe(value))

    writer.writerow([field(v) for v in header])
    writer.writerows([field(v) for v in row] for row in body)
    return buffer.getvalue()


def render(results: Path, *, envs: Sequence[str] = (), experiments: Sequence[str] = (),
           fmt: str = "markdown") -> str:
    """The table of the aggregated study in ``results`` as text (:data:`FORMATS`)."""
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: one of {', '.join(FORMATS)}")
    table = build(read_summary(results), envs, experiments,
                  source=str(Path(results) / SUMMARY_CSV))
    return markdown(table) if fmt == "markdown" else csv_text(table)
