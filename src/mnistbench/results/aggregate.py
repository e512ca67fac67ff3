"""Merge every cell of a study into tidy tables.

:func:`aggregate` walks ``RUNS/{env}/{experiment}/{cell}/summary.json`` and writes, into
``OUT_DIR``:

- ``summary.csv``: one row per cell, columns :func:`mnistbench.core.schema.summary_columns`
  (identity, status, reason, every param, result, timing and environment field, the
  derived ``hardware`` label, :func:`hardware_label`, and the cell's share of its device's
  measured limit, :func:`limit_columns`, from ``RUNS/{env}/peak/{device}.json`` where the
  workflow's peak step wrote one);
- ``epochs.csv``: long format, :data:`~mnistbench.core.schema.ID_COLUMNS` + :data:`KEY_PARAMS` +
  :data:`~mnistbench.core.schema.EPOCH_COLUMNS`;
- ``resources.csv``: the same prefix + :data:`~mnistbench.core.schema.RESOURCE_COLUMNS`;
- ``columns.csv``: ``file, name, unit, description`` of every column of the three tables,
  so the units travel with the data.

Every cell is read and checked by :func:`mnistbench.results.validate.read_cell`, the one
reader of a cell's files: a ``summary.json`` the tables cannot place (unreadable, another
schema, no identity) is an :class:`AggregateError` naming the file; a cell whose values are
bad (a NaN token, a string in a numeric field, a time below 0, an accuracy above 100, epoch
rows that disagree with its params, a missing or damaged CSV of an ok cell) is *invalid*: a
row with status ``failed`` and a reason naming the file, the field and the value, its results
empty and none of its epoch or resource rows, so it is visible but never a finding (a
warning on stderr names it too). A measured limit that is not a record of the schema
(:func:`mnistbench.results.validate.read_peak`) is an :class:`AggregateError` naming the file;
a cell without one (no peak file, a device unavailable there, a precision not measured) has
its limit columns empty. :func:`load_tables` refuses a table whose numeric column holds
anything but a finite number.

Every input is read and checked before anything is written, and the four files appear
together or not at all (:func:`mnistbench.core.atomic.write_together`), so a bad input or an
unwritable ``OUT_DIR`` (read-only, full) leaves no partial outputs. Cells copied in from
other machines (``RUNS/{other env}``) merge into the same tables. :func:`load_tables` reads
them back with the right types for the report.
"""

from __future__ import annotations

import csv
import errno
import io
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mnistbench.core import atomic, schema, untrusted
from mnistbench.core.devices import device_label
from mnistbench.results import rows, validate

if TYPE_CHECKING:
    import pandas as pd

#: Params repeated in front of every epochs.csv / resources.csv row (after the id columns).
KEY_PARAMS = ("device", "precision", "loader", "batch_size", "repeat")

SUMMARY_CSV = "summary.csv"
EPOCHS_CSV = "epochs.csv"
RESOURCES_CSV = "resources.csv"
COLUMNS_CSV = "columns.csv"


#: Columns read back as text; every other column of the tables is numeric.
TEXT_COLUMNS = frozenset(
    {*schema.ID_COLUMNS, "status", "reason", "device", "precision", "loader", "stage",
     "pin_memory", "compile", "cuda_graphs", "bf16_path", "timing_method", "gpu_throttle_start",
     "allocator", "implementation", "cudnn_benchmark", "max_batch", "max_batch_stop", "tip",
     "busy", "disturbed", "phase_split",
     *(k for k in schema.PARAM_FIELDS if k.startswith("math_")),
     "gpu_throttle_end", *schema.ENV_FIELDS, *schema.DERIVED_FIELDS}
    | {k for k, (unit, _) in schema.TIMING_FIELDS.items() if unit == "ISO 8601"}
    | {k for k, (unit, _) in schema.LIMIT_FIELDS.items() if not unit})


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
    skipped with a warning on stderr; invalid cells (:mod:`mnistbench.results.validate`) are
    rows with status ``failed`` and their reason, named on stderr. Raises
    :class:`AggregateError` for an empty or missing runs folder, an unreadable or
    inconsistent ``summary.json``, or a schema version
    this mnistbench cannot read (newer than :data:`mnistbench.core.schema.SCHEMA_VERSION`), a cell
    without a device, precision, loader, batch size or repeat, or an ``out_dir`` that cannot be
    written; fields a later version added (:data:`mnistbench.core.schema.ADDED_IN`) read as empty in
    older summaries.
    """
    runs = Path(runs)
    out_dir = Path(out_dir)
    if not runs.is_dir():
        raise AggregateError(
            f"runs folder {runs} {atomic.not_there(runs, 'a folder')}. Run the study first "
            "(snakemake, or "
            f"`mnistbench train --out {runs}/ENV/EXPERIMENT/CELL`), or pass the folder that "
            "holds ENV/EXPERIMENT/CELL/summary.json.")
    try:
        peaks = validate.read_peaks(runs)
    except validate.PeakError as exc:
        raise AggregateError(str(exc)) from None
    # Hidden folders (.snakemake, editor and sync droppings) and peak/ are not cells; no
    # symbolic link is followed.
    try:
        cell_dirs = rows.cell_folders(runs)
    except validate.CellError as exc:
        raise AggregateError(str(exc)) from None
    summary_rows: list[dict] = []
    epoch_rows: list[list[str]] = []
    resource_rows: list[list[str]] = []
    invalid: list[validate.Cell] = []
    skipped = 0
    for cell_dir in cell_dirs:
        summary_path = cell_dir / schema.SUMMARY_FILE
        if not (summary_path.exists() or summary_path.is_symlink()):
            skipped += 1
            print(f"mnistbench aggregate: warning: skipping incomplete cell {cell_dir} "
                  f"(no {schema.SUMMARY_FILE}; it is still running or was interrupted)",
                  file=sys.stderr)
            continue
        try:
            cell = validate.read_cell(cell_dir)
        except validate.CellError as exc:
            raise AggregateError(str(exc)) from None
        summary_rows.append(_flatten(cell))
        summary_rows[-1].update(limit_columns(summary_rows[-1], peaks, runs.name))
        _refuse_limit_past_ceiling(summary_rows[-1], runs)
        if not cell.valid:
            invalid.append(cell)
            print(f"mnistbench aggregate: warning: {cell_dir} is invalid and kept out of "
                  f"every statistic (filed as {validate.INVALID_STATUS}): {cell.why()}",
                  file=sys.stderr)
            continue  # none of its rows: an invalid cell is never a finding
        prefix = [str(cell.params[k]) for k in schema.ID_COLUMNS]
        prefix += [_csv_value(cell.params[k]) for k in KEY_PARAMS]
        epoch_rows += [prefix + row for row in cell.epochs]
        resource_rows += [prefix + row for row in cell.resources]
    for warning in refuse_impossible_limits(summary_rows, runs.name):
        print(f"mnistbench aggregate: warning: {warning}", file=sys.stderr)
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
            (out_dir / EPOCHS_CSV, lambda p: write_rows(p, epoch_columns(), epoch_rows)),
            (out_dir / RESOURCES_CSV,
             lambda p: write_rows(p, resource_columns(), resource_rows)),
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
    except BaseException:  # interrupted: no table was placed, and no folder made stays
        atomic.remove_dirs(created)
        raise


def _csv_value(value: object) -> str:
    return "" if value is None else str(value)


def _flatten(cell: validate.Cell) -> dict:
    """One summary.csv row: an invalid cell as ``failed`` with the reason, its results and
    its bad values empty."""
    row: dict[str, object] = {"status": cell.table_status, "reason": cell.table_reason}
    sections = cell.table_sections()
    for name in ("params", "results", "timing", "env"):
        for key, value in sections[name].items():
            row[key] = value
    row["hardware"] = hardware_label(row)
    return row


def limit_columns(row: Mapping[str, object], peaks: Mapping[tuple[str, str], validate.Peak],
                  runs_name: str = "runs") -> dict[str, object]:
    """The :data:`mnistbench.core.schema.LIMIT_FIELDS` of one summary row: for an ok cell
    whose environment measured its device's limit at the cell's precision (``peaks``, by
    (env, device): :func:`mnistbench.results.validate.read_peaks`), the highest GFLOP/s of
    the kernels timed there (:func:`mnistbench.core.schema.best_peak_row`), the kernel that
    gave it, the cell's achieved GFLOP/s as a share of it in % (empty without an achieved
    figure) and where it came from (``runs_name``: the runs folder's name); empty for every
    other cell."""
    out: dict[str, object] = dict.fromkeys(schema.LIMIT_FIELDS)
    peak = peaks.get((str(row.get("env")), str(row.get("device"))))
    if row.get("status") != "ok" or peak is None:
        return out
    best = peak.limit(str(row.get("precision")))
    if best is None:
        return out
    achieved = row.get("achieved_gflops")
    threads = f"{peak.threads} thread{'' if peak.threads == 1 else 's'}"
    share = (achieved / best["gflops"] * 100
             if isinstance(achieved, int | float) and not isinstance(achieved, bool) else None)
    out.update(
        limit_gflops=best["gflops"],
        limit_kernel=f"{best['kernel']} {best['shape']}",
        limit_share_pct=share,
        limit_source=f"measured: {_limit_file(runs_name, row['env'], peak.device)}, {threads}",
        limit_note=past_limit_reason(row) if share is not None and share > 100 else None,
    )
    return out


#: Kernel names (math_conv_kernels) that do fewer multiplications than a direct
#: convolution's nominal FLOPs, and those that run fp32 operands on TF32 tensor cores.
_FEWER_FLOPS_KERNEL = re.compile(r"winograd|fft", re.IGNORECASE)
_TF32_KERNEL = re.compile(r"tf32", re.IGNORECASE)


def past_limit_reason(row: Mapping[str, object]) -> str:
    """Why a cell (a summary row) ran past 100 % of its measured limit, from the math it
    recorded (the ``math_*`` params, mnistbench.measure.mathrecord); a generic reason where
    it recorded nothing that explains it (cells of schema version 4 recorded none)."""
    reasons = []
    fp32 = row.get("precision") == "fp32"
    if fp32 and (_flag(row.get("math_tf32_cudnn")) or _flag(row.get("math_tf32_matmul"))):
        reasons.append("TF32 was on in an fp32 cell (math_tf32_cudnn, math_tf32_matmul)")
    kernels = str(row.get("math_conv_kernels") or "")
    if fp32 and _TF32_KERNEL.search(kernels):
        reasons.append("its convolution kernels ran TF32 (math_conv_kernels)")
    if _FEWER_FLOPS_KERNEL.search(kernels):
        reasons.append("cuDNN chose Winograd or FFT convolutions, which do fewer "
                       "multiplications than the nominal FLOPs the cell counts")
    if not reasons:
        recorded = "recorded no" if row.get("math_tf32_cudnn") not in (None, "") else (
            "recorded no math settings (older schema): no")
        reasons.append(f"its kernels ran faster than the shapes the peak step timed (the cell "
                       f"{recorded} TF32 nor Winograd/FFT kernels that would explain it)")
    return "past 100 % of the measured limit: " + "; ".join(reasons)


def _flag(value: object) -> bool:
    """A boolean param as read back from JSON or a CSV cell."""
    return value is True or str(value).strip().lower() == "true"


def _limit_file(runs_name: str, env: object, device: object) -> str:
    """Where a measured limit lies, as ``limit_source`` names it: RUNS/{env}/peak/{device}.json."""
    return f"{runs_name}/{env}/{schema.PEAK_DIR}/{schema.peak_file(str(device))}"


#: How far past its environment's measured limit a cell's training may run before the limit
#: is refused as no limit: the training's own kernels may beat the two the peak step times,
#: but not by this much (a limit timed while something else used the cores, e.g.).
LIMIT_SLACK = 1.25


def _refuse_limit_past_ceiling(row: Mapping[str, object], runs: Path) -> None:
    """Raise :class:`AggregateError` naming the measured limit a row was set against when no
    CPU of the cell's cores, or no GPU of its name, can reach it
    (:func:`mnistbench.results.validate.ceiling_problem`): the record is not a measurement of
    this machine."""
    problem = validate.ceiling_problem(row.get("device"), "its best row's gflops",
                                       row.get("limit_gflops"), row.get("cpu_cores_logical"),
                                       row.get("gpu_name"))
    if problem:
        raise AggregateError(
            f"the measured limit {runs / _limit_file('', row['env'], row['device'])[1:]}: "
            f"{problem} (cell {row['cell']}'s machine): {validate.PEAK_FIX}.")


def refuse_impossible_limits(rows: list[dict], runs_name: str = "runs") -> list[str]:
    """Empty the limit columns of every row of an (env, device, precision) where some cell ran
    faster than :data:`LIMIT_SLACK` x the measured limit: that figure cannot be the device's
    limit, so no share of it is shown; ``limit_source`` says why and how to measure again.
    Returns one warning per limit refused."""
    worst: dict[tuple, dict] = {}
    for row in rows:
        limit, achieved = row.get("limit_gflops"), row.get("achieved_gflops")
        if not isinstance(limit, float | int) or not isinstance(achieved, float | int):
            continue
        key = (row.get("env"), row.get("device"), row.get("precision"))
        if achieved > LIMIT_SLACK * limit and achieved > worst.get(key, {}).get(
                "achieved_gflops", 0):
            worst[key] = row
    warnings = []
    for (env, device, precision), row in sorted(worst.items(), key=str):
        source = _limit_file(runs_name, env, device)
        why = (f"refused: cell {row['cell']} trained at {row['achieved_gflops']:.0f} GFLOP/s, "
               f"{row['achieved_gflops'] / row['limit_gflops']:.2f}x the {precision} limit "
               f"of {row['limit_gflops']:.0f} GFLOP/s measured in {source}, which therefore "
               "is no limit (timed while the cores were busy?); delete that file and rerun "
               "the study to measure it again")
        for other in rows:
            if (other.get("env"), other.get("device"), other.get("precision")) == (
                    env, device, precision):
                other.update(dict.fromkeys(schema.LIMIT_FIELDS), limit_source=why)
        warnings.append(why)
    return warnings


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


def write_rows(path: Path, columns: list[str], rows: list[list[str]]) -> Path:
    """Write ``rows`` under ``columns`` as one CSV table, atomically."""
    with atomic.atomic_open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        writer.writerows(rows)
    return path


def column_rows() -> list[dict[str, str]]:
    """``file, name, unit, description`` of every column of the aggregated tables."""
    described: dict[str, tuple[str, str]] = {}
    for table in (schema.PARAM_FIELDS, schema.RESULT_FIELDS, schema.TIMING_FIELDS,
                  schema.ENV_FIELDS, schema.DERIVED_FIELDS, schema.LIMIT_FIELDS):
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


def _numeric(frame, column: str, path: Path):
    """``frame[column]`` as numbers; an :class:`AggregateError` naming the file, the line,
    the cell and the value where a value is not a finite number (a word, ``nan``, ``inf``),
    which would otherwise read as empty and leave the statistics silently."""
    import numpy as np
    import pandas as pd

    raw = frame[column]
    numbers = pd.to_numeric(raw, errors="coerce")
    bad = raw.notna() & ~np.isfinite(numbers.astype(float))
    if bad.any():
        index = bad.to_numpy().nonzero()[0][0]
        cell = "/".join(str(frame[k].iloc[index]) for k in schema.ID_COLUMNS
                        if k in frame.columns)
        raise AggregateError(
            f"{path} line {index + 2} (cell {cell}): column {column} holds "
            f"{raw.iloc[index]!r}, which is not a finite number ({int(bad.sum())} such "
            "value(s) in that column). The table was edited or damaged: rerun `mnistbench "
            "aggregate`, which writes only numbers there.")
    return numbers


@dataclass(frozen=True)
class Tables:
    """The aggregated tables as pandas DataFrames (text columns as str, the rest numeric)."""

    summary: pd.DataFrame
    epochs: pd.DataFrame
    resources: pd.DataFrame


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
        try:
            text = rows.read_table_text(results, name)
        except untrusted.UnsafeFile as exc:
            if exc.errno == errno.ENOENT:
                raise AggregateError(
                    f"{path} does not exist. Run `mnistbench aggregate RUNS --out-dir "
                    f"{results}` first (or pass --results with the folder that holds the "
                    "aggregated CSVs).") from None
            raise AggregateError(
                f"cannot read {path}: {exc.why}. The aggregated tables are read only where "
                f"they lie, as regular files: run `mnistbench aggregate RUNS --out-dir "
                f"{results}` again (or pass --results the folder that holds them).") from None
        try:
            frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False,
                                na_values=[""])
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
        # every row as a cell would give it, or refused
        records = frame.astype(object).where(frame.notna(), None).to_dict("records")
        try:
            rows.check_rows(name.removesuffix(".csv"), records, path)
        except rows.TableRowError as exc:
            raise AggregateError(str(exc)) from None
        for column in frame.columns:
            if column not in TEXT_COLUMNS:
                frame[column] = _numeric(frame, column, path)
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

