"""Rows of the aggregated tables, wherever they come from (the aggregate's own, an edited
``summary.csv``, a kept publication), checked as a cell would give them
(:func:`check_rows`: names, every enumerated setting against its list in
:mod:`mnistbench.core`, every number against its physical range), and the walk of a runs
folder that follows no symbolic link (:func:`cell_folders`). The cell itself is read by
:mod:`mnistbench.results.validate`, whose field specs these checks share.

Standard library and :mod:`mnistbench.core` only, like :mod:`mnistbench.results.validate`.
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from pathlib import Path

from mnistbench.core import schema, untrusted
from mnistbench.results import validate

#: What a CSV value that spells no number reads as: no spec accepts it.
_REFUSED = object()


# ---------------------------------------------------------------------------------------------
# Rows of the aggregated tables: summary.csv and epochs.csv
#: The largest CSV field read (a cell's reason may be long: a traceback's last lines).
MAX_CSV_FIELD = 16 * 1024 * 1024
#: How to replace an aggregated table that holds a row no cell can give.
TABLE_FIX = ("the table was edited or damaged (the aggregate writes only checked values): "
             "run `mnistbench aggregate RUNS --out-dir FOLDER` again, or for a publication "
             "publish again")


def read_table_text(results: Path, name: str) -> str:
    """The text of the aggregated table ``results/NAME`` (summary.csv, epochs.csv,
    resources.csv), read through the one safe opener
    (:func:`mnistbench.core.untrusted.read_text_under`): a symbolic link in its place is not
    followed (a publication's ``data/`` is anyone's input), a FIFO is not opened, the size is
    capped at :data:`mnistbench.results.validate.MAX_CSV_BYTES`. Raises
    :class:`mnistbench.core.untrusted.UnsafeFile` naming the path (errno ENOENT: missing),
    never the content."""
    return untrusted.read_text_under(results, name, max_bytes=validate.MAX_CSV_BYTES)


@contextmanager
def csv_fields_up_to(limit: int = MAX_CSV_FIELD):
    """Let the csv module read fields of up to ``limit`` characters (its default, 128 KiB,
    refuses a long reason), restoring the old limit afterwards."""
    old = csv.field_size_limit(limit)
    try:
        yield
    finally:
        csv.field_size_limit(old)


def _summary_specs() -> dict[str, validate.Spec]:
    specs: dict[str, validate.Spec] = {}
    for section in ("params", "results", "timing", "env"):
        for name, spec in validate.SPECS[section].items():
            specs.setdefault(name, spec)
    specs["limit_gflops"] = validate.GFLOPS
    specs["limit_share_pct"] = validate.Spec("number", 0)  # may pass 100 (schema.LIMIT_FIELDS)
    return specs


#: What each column of summary.csv, epochs.csv and resources.csv may hold.
TABLE_SPECS: dict[str, dict[str, validate.Spec]] = {
    "summary": _summary_specs(),
    "epochs": {**validate.SPECS["params"], **validate.SPECS["epochs"]},
    "resources": {**validate.SPECS["params"], **validate.SPECS["resources"]},
}
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
#: The enumerated columns a row must name (a cell's series); the others may be empty.
_IDENTITY = ("device", "precision", "loader")


def _text_value(spec: validate.Spec, text: str) -> object:
    """The value a CSV text spells for ``spec`` (a marker the spec refuses where none)."""
    if spec.kind in ("int", "number"):
        value = validate.parse_csv_number(text, spec.kind)
        return _REFUSED if value is None else value
    if spec.kind == "flag":
        return {"True": True, "False": False, "true": True, "false": False}.get(text, text)
    return text


def row_problems(table: str, row: Mapping[str, object]) -> list[str]:
    """Why a row of the aggregated ``table`` (``summary``, ``epochs`` or ``resources``, values
    as CSV text) cannot come from a cell: an empty identity or one with a control character,
    a status, device, precision, loader, implementation, compile mode, tip or allocator
    outside its list in :mod:`mnistbench.core`, an ok row of a precision its device does not
    run, or a number outside its physical range (:data:`TABLE_SPECS`: accuracies 0 to 100 %,
    times, rates, memory and counts 0 or more, a limit or rate up to
    :data:`mnistbench.results.validate.MAX_GFLOPS` and, on a CPU, up to
    :func:`mnistbench.results.validate.cpu_ceiling_gflops`, on a known GPU up to
    :func:`mnistbench.results.validate.gpu_ceiling_gflops`). Empty: the row is sound."""
    problems = []
    for column in schema.ID_COLUMNS:  # folder names: any text but empty or control
        value = str(row.get(column) or "")
        if not value.strip() or _CONTROL_CHARS.search(value):
            problems.append(f"{column} is {validate.show(value)}, expected the name of a folder "
                            "(not empty, no control character)")
    if table == "summary" and str(row.get("status") or "") not in schema.STATUSES:
        problems.append(f"status is {validate.show(row.get('status'))}, expected one of "
                        f"{', '.join(schema.STATUSES)}")
    for column in validate.ENUMS:
        if column not in row:
            continue
        text = "" if row[column] is None else str(row[column])
        if text in validate.ENUM_TEXT[column] and (text or column not in _IDENTITY):
            continue
        problems.append(validate.enum_problem(column, text) or "" if text else
                        f"{column} is empty: the table has no {column} for the cell, which "
                        "every cell has (it names its series in every table and chart)")
    combination = validate.combination_problem(row.get("status"), row.get("device"),
                                               row.get("precision"))
    if combination:
        problems.append(combination)
    for column in ("limit_gflops", "achieved_gflops"):
        ceiling = validate.ceiling_problem(row.get("device"), column, row.get(column),
                                           row.get("cpu_cores_logical"), row.get("gpu_name"))
        if ceiling:
            problems.append(ceiling)
    specs = TABLE_SPECS[table]
    for column, raw in row.items():
        spec = specs.get(column)
        if spec is None or spec.kind == "text" or column in validate.ENUMS:
            continue
        text = "" if raw is None else str(raw).strip()
        if text and not spec.accepts(_text_value(spec, text)):
            problems.append(f"{column} is {validate.show(text)}, expected {spec.expected()}")
    return problems


def check_rows(table: str, rows: Iterable[Mapping[str, object]], path: object,
               first_line: int = 2) -> None:
    """Raise :class:`TableRowError` for the first row of ``rows`` (read from ``path``, the
    first on line ``first_line``) that :func:`row_problems` finds unsound, naming the file,
    the line, the cell, what is wrong and the fix."""
    for line, row in enumerate(rows, start=first_line):
        problems = row_problems(table, row)
        if problems:
            cell = "/".join(str(row.get(k) or "?") for k in schema.ID_COLUMNS)
            shown = "; ".join(problems[:validate.SHOWN_PROBLEMS])
            more = len(problems) - validate.SHOWN_PROBLEMS
            raise TableRowError(
                f"{path} line {line} (cell {validate.show(cell)[1:-1]}): {shown}"
                + (f"; and {more} more" if more > 0 else "")
                + f". No cell can give that row: {TABLE_FIX}.")


class TableRowError(ValueError):
    """A row of an aggregated table that no cell can give; one paragraph naming the file,
    the line, the cell, the field and the fix."""


# ---------------------------------------------------------------------------------------------
# Walking a runs folder
def cell_folders(runs: Path) -> list[Path]:
    """Every cell folder under ``runs`` (``runs/ENV/EXPERIMENT/CELL``), sorted: hidden names
    (.snakemake, editor and sync droppings) and an environment's measured limits
    (``peak/``) are not cells, and no symbolic link is followed. Raises :class:`CellError`
    naming a folder on the way that is a symbolic link (a reader of ``runs`` reads only what
    lies in it) and the fix."""
    runs = Path(runs)
    found: list[Path] = []

    def folders(parent: Path) -> list[Path]:
        out = []
        with os.scandir(parent) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                if entry.is_symlink():
                    target = os.readlink(entry.path)
                    if os.path.isdir(entry.path):
                        raise validate.CellError(
                            f"{entry.path} is a symbolic link (to {target}), which a reader of "
                            f"{runs} does not follow: results are read only where they lie. "
                            f"Move the folder it points to into its place (mv), or remove "
                            "the link.")
                    continue
                if entry.is_dir(follow_symlinks=False):
                    out.append(Path(entry.path))
        return out

    for env in folders(runs):
        for experiment in folders(env):
            if experiment.name == schema.PEAK_DIR:
                continue
            found += folders(experiment)
    return sorted(found)
