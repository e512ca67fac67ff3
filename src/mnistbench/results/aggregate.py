"""Merge every cell of a study into tidy tables.

:func:`aggregate` walks ``RUNS/{env}/{experiment}/{cell}/summary.json`` and writes, into
``OUT_DIR``:

- ``summary.csv``: one row per cell, columns :func:`mnistbench.core.schema.summary_columns`
  (identity, status, reason, every param, result, timing and environment field, and the
  derived ``hardware`` label, :func:`hardware_label`);
- ``epochs.csv``: long format, :data:`~mnistbench.core.schema.ID_COLUMNS` + :data:`KEY_PARAMS` +
  :data:`~mnistbench.core.schema.EPOCH_COLUMNS`;
- ``resources.csv``: the same prefix + :data:`~mnistbench.core.schema.RESOURCE_COLUMNS`;
- ``columns.csv``: ``file, name, unit, description`` of every column of the three tables,
  so the units travel with the data.

Every input is read and checked before anything is written, and the four files appear
together or not at all (:func:`mnistbench.core.atomic.write_together`), so a bad input or an
unwritable ``OUT_DIR`` (read-only, full) leaves no partial outputs. Cells copied in from
other machines (``RUNS/{other env}``) merge into the same tables. :func:`load_tables` reads
them back with the right types for the report.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mnistbench.core import atomic, schema
from mnistbench.core.devices import device_label

#: Params repeated in front of every epochs.csv / resources.csv row (after the id columns).
KEY_PARAMS = ("device", "precision", "loader", "batch_size", "repeat")

SUMMARY_CSV = "summary.csv"
EPOCHS_CSV = "epochs.csv"
RESOURCES_CSV = "resources.csv"
COLUMNS_CSV = "columns.csv"

_SECTIONS = {
    "params": schema.PARAM_FIELDS,
    "env": schema.ENV_FIELDS,
    "timing": schema.TIMING_FIELDS,
    "results": schema.RESULT_FIELDS,
}
_TOP_KEYS = ("schema_version", "status", "reason", *_SECTIONS)
_FIX = ("delete that cell folder and run the cell again (or run the workflow again, which "
        "reruns missing cells)")

#: Columns read back as text; every other column of the tables is numeric.
TEXT_COLUMNS = frozenset(
    {*schema.ID_COLUMNS, "status", "reason", "device", "precision", "loader", "stage",
     "pin_memory", "compile", "cuda_graphs", "bf16_path", "timing_method", "gpu_throttle_start",
     "allocator", "implementation", "cudnn_benchmark", "max_batch", "max_batch_stop", "tip",
     "busy",
     "gpu_throttle_end", *schema.ENV_FIELDS, *schema.DERIVED_FIELDS}
    | {k for k, (unit, _) in schema.TIMING_FIELDS.items() if unit == "ISO 8601"})


class AggregateError(Exception):
    """The runs folder or one of its cells cannot be aggregated; the message names the file
    and the fix."""


def epoch_columns() -> list[str]:
    """Columns of the aggregated epochs.csv."""
    return [*schema.ID_COLUMNS, *KEY_PARAMS, *schema.EPOCH_COLUMNS]


def resource_columns() -> list[str]:
    """Columns of the aggregated resources.csv."""
    return [*schema.ID_COLUMNS, *KEY_PARAMS, *schema.RESOURCE_COLUMNS]


def aggregate(runs: Path, out_dir: Path) -> list[Path]:
    """Aggregate every cell under ``runs`` into ``out_dir``; return the four written paths.

    Cell folders without ``summary.json`` are incomplete (still running, or killed) and are
    skipped with a warning on stderr. Raises :class:`AggregateError` for an empty or missing
    runs folder, an unreadable or inconsistent ``summary.json`` / CSV, or a schema version
    this mnistbench cannot read (newer than :data:`mnistbench.core.schema.SCHEMA_VERSION`), a cell
    without a device, precision, loader, batch size or repeat, or an ``out_dir`` that cannot be
    written; fields a later version added (:data:`mnistbench.core.schema.ADDED_IN`) read as empty in
    older summaries.
    """
    runs = Path(runs)
    out_dir = Path(out_dir)
    if not runs.is_dir():
        raise AggregateError(
            f"runs folder {runs} does not exist. Run the study first (snakemake, or "
            f"`mnistbench train --out {runs}/ENV/EXPERIMENT/CELL`), or pass the folder that "
            "holds ENV/EXPERIMENT/CELL/summary.json.")
    # Hidden folders (.snakemake, editor and sync droppings) are not cells.
    cell_dirs = sorted(p for p in runs.glob("*/*/*") if p.is_dir()
                       and not any(part.startswith(".") for part in p.relative_to(runs).parts))
    summary_rows: list[dict] = []
    epoch_rows: list[list[str]] = []
    resource_rows: list[list[str]] = []
    skipped = 0
    for cell_dir in cell_dirs:
        summary_path = cell_dir / schema.SUMMARY_FILE
        if not summary_path.exists():
            skipped += 1
            print(f"mnistbench aggregate: warning: skipping incomplete cell {cell_dir} "
                  f"(no {schema.SUMMARY_FILE}; it is still running or was interrupted)",
                  file=sys.stderr)
            continue
        cell = _read_summary(summary_path)
        summary_rows.append(_flatten(cell))
        prefix = [str(cell.params[k]) for k in schema.ID_COLUMNS]
        prefix += [_csv_value(cell.params[k]) for k in KEY_PARAMS]
        epochs_path = cell_dir / schema.EPOCHS_FILE
        if cell.status == "ok" and not epochs_path.exists():
            raise AggregateError(
                f"{epochs_path} is missing although {summary_path} says status ok. The cell "
                f"is damaged: {_FIX}.")
        epoch_rows += _read_csv(epochs_path, schema.EPOCH_COLUMNS, prefix)
        resource_rows += _read_csv(cell_dir / schema.RESOURCES_FILE, schema.RESOURCE_COLUMNS,
                                   prefix)
    if not summary_rows:
        found = (f"{len(cell_dirs)} cell folders, all incomplete" if skipped
                 else "no cell folders")
        raise AggregateError(
            f"nothing to aggregate in {runs}: {found}. Expected "
            f"{runs}/ENV/EXPERIMENT/CELL/{schema.SUMMARY_FILE}; run the study first, or copy "
            f"another machine's results/runs/ENV folder into {runs}.")

    created: list[Path] = []
    try:
        created = atomic.make_dirs(out_dir)
        return atomic.write_together([
            (out_dir / SUMMARY_CSV,
             lambda p: atomic.write_csv(p, schema.summary_columns(), summary_rows)),
            (out_dir / EPOCHS_CSV, lambda p: _write_rows(p, epoch_columns(), epoch_rows)),
            (out_dir / RESOURCES_CSV,
             lambda p: _write_rows(p, resource_columns(), resource_rows)),
            (out_dir / COLUMNS_CSV,
             lambda p: atomic.write_csv(p, ("file", "name", "unit", "description"),
                                        column_rows())),
        ])
    except OSError as exc:
        atomic.remove_dirs(created)
        raise AggregateError(
            atomic.folder_error(out_dir, exc, "the aggregated tables", "--out-dir")
            + f" None of {SUMMARY_CSV}, {EPOCHS_CSV}, {RESOURCES_CSV}, {COLUMNS_CSV} was "
            "written (the tables appear together or not at all); run `mnistbench aggregate` "
            "again once the folder can be written.") from None


@dataclass(frozen=True)
class _Cell:
    status: str
    reason: str
    params: dict
    sections: dict


def _read_summary(path: Path) -> _Cell:
    """Parse and check one summary.json against the schema."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AggregateError(f"cannot read {path}: {exc}. The file is corrupt or truncated: "
                             f"{_FIX}.") from None
    if not isinstance(data, dict):
        raise AggregateError(f"{path} is not a JSON object but {type(data).__name__}: {_FIX}.")
    version = data.get("schema_version")
    if type(version) is not int or not 1 <= version <= schema.SCHEMA_VERSION:
        raise AggregateError(
            f"{path} has schema_version {version!r}, but this mnistbench reads schema versions "
            f"1 to {schema.SCHEMA_VERSION}. Aggregate it with the mnistbench version that "
            "wrote it (or a later one), or rerun the cell with this version.")
    missing = [k for k in _TOP_KEYS if k not in data]
    if missing:
        raise AggregateError(f"{path} lacks the key(s) {', '.join(missing)} (expected "
                             f"{', '.join(_TOP_KEYS)}): {_FIX}.")
    status = data["status"]
    if status not in schema.STATUSES:
        raise AggregateError(f"{path} has status {status!r}; allowed: "
                             f"{', '.join(schema.STATUSES)}: {_FIX}.")
    sections = {}
    for name, fields in _SECTIONS.items():
        block = data[name]
        if not isinstance(block, dict):
            raise AggregateError(f"{path}: {name!r} must be a JSON object, got "
                                 f"{type(block).__name__}: {_FIX}.")
        unknown = sorted(set(block) - set(fields))
        if unknown:
            raise AggregateError(
                f"{path}: unknown {name} key(s) {', '.join(unknown)}; allowed: "
                f"{', '.join(fields)}. The trainer and mnistbench.core.schema disagree: add the "
                "field to schema.py (and bump SCHEMA_VERSION) or rerun the cell.")
        # params identify the cell and ok cells must be complete; the other blocks of a
        # cell that did not run may leave fields out (read as empty).
        if name == "params" or (status == "ok" and name != "env"):
            absent = [k for k in fields
                      if k not in block and schema.ADDED_IN.get(k, 1) <= version]
            if absent:
                raise AggregateError(f"{path}: {name} lacks {', '.join(absent)}: {_FIX}.")
        sections[name] = block
    params = sections["params"]
    cell_dir = path.parent
    ids = (cell_dir.parent.parent.name, cell_dir.parent.name, cell_dir.name)
    for key, folder in zip(schema.ID_COLUMNS, ids, strict=True):
        if str(params[key]) != folder:
            raise AggregateError(
                f"{path} says {key} {params[key]!r} but lives in folder {folder!r}. Cells must "
                f"sit at RUNS/ENV/EXPERIMENT/CELL matching their params: move the folder to "
                f"the matching place or rerun the cell there.")
    for key in ("device", "precision", "loader"):
        value = params[key]
        if not isinstance(value, str) or not value.strip():
            raise AggregateError(
                f"{path}: params.{key} is {value!r}, but every cell needs a {key} (with "
                "device and precision it names the cell's series in every table and chart): "
                f"{_FIX}.")
    for key, low in (("batch_size", 1), ("repeat", 0)):
        value = params[key]
        if type(value) is not int or value < low:
            raise AggregateError(
                f"{path}: params.{key} is {value!r}, but every cell needs a whole number "
                f"{low} or more there: {_FIX}.")
    reason = data["reason"]
    return _Cell(status=status, reason="" if reason is None else str(reason), params=params,
                 sections=sections)


def _csv_value(value: object) -> str:
    return "" if value is None else str(value)


def _flatten(cell: _Cell) -> dict:
    row: dict[str, object] = {"status": cell.status, "reason": cell.reason}
    for name in ("params", "results", "timing", "env"):
        for key, value in cell.sections[name].items():
            row[key] = value
    row["hardware"] = hardware_label(row)
    return row


#: CPU flags that give bf16 hardware support, shown in a CPU's label when present.
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


def _text(value: object) -> str:
    return value.strip() if isinstance(value, str) else ""


def hardware_label(row: Mapping[str, object]) -> str:
    """The hardware a cell ran on, as the report names it (summary.csv ``hardware``), from its
    environment fields: for a cpu cell the CPU model, the ISA torch dispatches to
    (``cpu_capability``) and the bf16 flags present, e.g. ``AMD EPYC 7B13 · AVX2`` or
    ``Intel Xeon Platinum 8480+ · AVX512 (avx512_bf16, amx_bf16)``; for an accelerator cell
    the GPU model and its backend, e.g. ``NVIDIA H100 80GB HBM3 · CUDA``, ``AMD Instinct
    MI300X · ROCm/HIP`` (a cuda cell with ``gpu_backend`` rocm), or ``CUDA (no device)`` when
    none was found. Two CPUs of one model name whose ISA or bf16 flags differ get different
    labels, so they are never pooled; summaries older than schema version 3 (no ISA fields)
    get the model name alone."""
    device = _text(row.get("device")) or "cpu"
    if device != "cpu":
        label = device_label(device, _text(row.get("gpu_backend")))
        gpu = _text(row.get("gpu_name"))
        return f"{gpu} · {label}" if gpu else f"{label} (no device)"
    label = _text(row.get("cpu_model")) or "unknown CPU"
    capability = _text(row.get("cpu_capability"))
    if capability:
        label += f" · {capability}"
        flags = _text(row.get("cpu_flags")).split()
        extras = [flag for flag in BF16_FLAGS if flag in flags]
        if extras:
            label += f" ({', '.join(extras)})"
    return label


def _read_csv(path: Path, columns: Mapping[str, object], prefix: list[str]) -> list[list[str]]:
    """The rows of one cell's CSV (absent or empty: none), each with ``prefix`` in front."""
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            if header is None:
                return []
            if sorted(header) != sorted(columns):
                missing = [c for c in columns if c not in header]
                extra = [c for c in header if c not in columns]
                raise AggregateError(
                    f"{path} has an unexpected header (missing: {', '.join(missing) or '-'}; "
                    f"unknown: {', '.join(extra) or '-'}; expected: {', '.join(columns)}). "
                    f"The trainer and mnistbench.core.schema disagree, or the file is damaged: "
                    f"{_FIX}.")
            order = [header.index(c) for c in columns]
            rows = []
            for line_no, record in enumerate(reader, start=2):
                if not record:
                    continue
                if len(record) != len(header):
                    raise AggregateError(
                        f"{path} line {line_no} has {len(record)} fields, expected "
                        f"{len(header)}; the file is truncated or damaged: {_FIX}.")
                rows.append(prefix + [record[i] for i in order])
            return rows
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise AggregateError(f"cannot read {path}: {exc}: {_FIX}.") from None


def _write_rows(path: Path, columns: list[str], rows: list[list[str]]) -> Path:
    with atomic.atomic_open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        writer.writerows(rows)
    return path


def column_rows() -> list[dict[str, str]]:
    """``file, name, unit, description`` of every column of the aggregated tables."""
    described: dict[str, tuple[str, str]] = {}
    for table in (schema.PARAM_FIELDS, schema.RESULT_FIELDS, schema.TIMING_FIELDS,
                  schema.ENV_FIELDS, schema.DERIVED_FIELDS):
        described.update(table)
    described.setdefault("status", ("", "cell status: " + ", ".join(schema.STATUSES)))
    described.setdefault("reason", ("", "why the cell is not ok (empty when ok)"))
    rows = [{"file": SUMMARY_CSV, "name": c, "unit": described[c][0],
             "description": described[c][1]} for c in schema.summary_columns()]
    for file, tail in ((EPOCHS_CSV, schema.EPOCH_COLUMNS),
                       (RESOURCES_CSV, schema.RESOURCE_COLUMNS)):
        for c in (*schema.ID_COLUMNS, *KEY_PARAMS):
            rows.append({"file": file, "name": c, "unit": schema.PARAM_FIELDS[c][0],
                         "description": schema.PARAM_FIELDS[c][1]})
        rows += [{"file": file, "name": c, "unit": u, "description": d}
                 for c, (u, d) in tail.items()]
    return rows


@dataclass(frozen=True)
class Tables:
    """The aggregated tables as pandas DataFrames (text columns as str, the rest numeric)."""

    summary: object
    epochs: object
    resources: object


def load_tables(results: Path) -> Tables:
    """Read summary.csv, epochs.csv and resources.csv from ``results``; raise
    :class:`AggregateError` naming the file when one is missing or has the wrong columns."""
    import pandas as pd

    results = Path(results)
    frames = []
    for name, expected in ((SUMMARY_CSV, schema.summary_columns()),
                           (EPOCHS_CSV, epoch_columns()),
                           (RESOURCES_CSV, resource_columns())):
        path = results / name
        if not path.is_file():
            raise AggregateError(
                f"{path} does not exist. Run `mnistbench aggregate RUNS --out-dir {results}` "
                "first (or pass --results with the folder that holds the aggregated CSVs).")
        try:
            frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
        except (OSError, UnicodeDecodeError, pd.errors.ParserError) as exc:
            raise AggregateError(f"cannot read {path}: {exc}. Rerun `mnistbench aggregate`."
                                 ) from None
        except pd.errors.EmptyDataError:
            frame = pd.DataFrame(columns=expected)
        # A table an older mnistbench wrote lacks the fields added since (schema.ADDED_IN):
        # they read as empty, as in its summaries; any other missing column is an error.
        for column in (c for c in expected if c not in frame.columns and c in schema.ADDED_IN):
            frame[column] = None
        missing = [c for c in expected if c not in frame.columns]
        if missing:
            raise AggregateError(
                f"{path} lacks the column(s) {', '.join(missing)}; it was written by another "
                "mnistbench version or edited. Rerun `mnistbench aggregate`.")
        for column in frame.columns:
            if column not in TEXT_COLUMNS:
                frame[column] = pd.to_numeric(frame[column], errors="coerce")
            else:
                frame[column] = frame[column].astype(object).where(frame[column].notna(), None)
        frames.append(frame)
    summary, path = frames[0], results / SUMMARY_CSV
    for column in ("device", "precision", "loader"):
        blank = summary[column].map(lambda v: not isinstance(v, str) or not v.strip())
        if blank.any():
            cells = ["/".join(str(v) for v in ids) for ids in
                     summary.loc[blank, list(schema.ID_COLUMNS)].itertuples(index=False)]
            raise AggregateError(
                f"{path} has no {column} for the cell(s) {', '.join(cells[:5])}"
                f"{' and more' if len(cells) > 5 else ''}; every cell needs one (it names the "
                "cell's series in the charts). The table was edited or written by an older "
                "mnistbench: rerun `mnistbench aggregate`, which names any cell folder at "
                "fault.")
    # Consolidated copies: one block per dtype, so later .assign calls stay fast and quiet.
    return Tables(*(frame.copy() for frame in frames))

