"""The one reader of a finished cell: its three files, parsed strictly and checked against
the schema where results enter. :func:`mnistbench.results.aggregate.aggregate` (and through it
``report``, whose tables it writes), :func:`mnistbench.results.archive.unpack` and
:func:`mnistbench.publish.read_cells` read cells only through :func:`read_cell`.

What is checked, in two tiers:

- **The cell cannot be placed** (:class:`CellError`): ``summary.json`` is missing its
  structure: unreadable, not JSON, not an object, of a schema version this mnistbench does
  not read, without one of the top keys or sections, with keys the schema does not know, an
  unknown status, without a param, or with an identity the tables cannot file it under (env,
  experiment and cell that disagree with its folder; no device, precision or loader; a batch
  size or repeat that is not a whole number). The file is not a summary this schema reads,
  so the aggregate refuses, naming the file and the fix.
- **The cell is invalid** (:attr:`Cell.problems`): its structure is sound but a value is not
  what its field holds: a non-JSON number (``NaN``, ``Infinity``, ``-Infinity``, ``1e999``); a
  wrong type (a string in a numeric field, a boolean as a number, a list); a value out of
  its range (:data:`SPECS`: times, counts, rates, memory, power and energy 0 or more,
  accuracies and GPU utilisation 0 to 100, losses 0 or more, a learning rate above 0,
  ``train_limit`` up to 60000); an ``ok`` cell without a headline figure, without
  ``epochs.csv`` or ``resources.csv`` (or with an empty one), whose epoch rows are not
  numbered 1 to ``params.epochs``, or whose counts disagree (``steps_per_epoch`` and the
  rows' steps, ``best_epoch`` past the epochs, more samples than steps times the batch size,
  more steps than ``max_steps``, a best accuracy below the final one, an end before the
  start); a CSV with a damaged header, a cut line or a non-numeric value. Each problem names
  the file, the field (or line and column) and the value.

The environment's measured limits (``runs/{env}/peak/{device}.json``, the workflow's peak
step) are read by :func:`read_peak` (:func:`read_peaks`: all of them), as strictly: a record
that is not one of :data:`mnistbench.core.schema.PEAK_FIELDS` (not strict JSON, a key missing
or unknown, a value of the wrong type, an ok record without rows or with a precision its
device does not run, a kernel twice) is a :class:`PeakError` naming the file, the field and
the fix.

An invalid cell is a visible result, never a finding: the aggregate files it with status
``failed`` and the reason ``invalid result (recorded status ok): summary.json
results.final_test_acc is 140.0, expected a number 0 to 100; ...``, its result fields empty
and none of its epoch or resource rows, so no table, statistic or chart uses its values;
``publish`` counts it as failed, and ``unpack`` refuses an archive that holds one.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from mnistbench.core import options, schema, untrusted

#: The MNIST splits' sizes (the training and test samples a cell can use at most).
TRAIN_SAMPLES = options.MNIST_TRAIN_SAMPLES
TEST_SAMPLES = options.MNIST_TEST_SAMPLES

SECTIONS: dict[str, Mapping[str, tuple[str, str]]] = {
    "params": schema.PARAM_FIELDS,
    "env": schema.ENV_FIELDS,
    "timing": schema.TIMING_FIELDS,
    "results": schema.RESULT_FIELDS,
}
TOP_KEYS = ("schema_version", "status", "reason", *SECTIONS)
#: The status an invalid cell is filed under, and the start of its reason.
INVALID_STATUS = "failed"
INVALID_PREFIX = "invalid result"
FIX = ("delete that cell folder and run the cell again (or run the workflow again, which "
       "reruns missing cells)")
#: Problems an invalid cell's reason lists before "and N more".
SHOWN_PROBLEMS = 4


class CellError(Exception):
    """A cell folder whose ``summary.json`` cannot be read as a cell of this schema; the
    message is one paragraph naming the file and the fix."""


# ---------------------------------------------------------------------------------------------
# What each field holds
@dataclass(frozen=True)
class Spec:
    """What one field may hold: ``kind`` ``int`` (a whole number), ``number`` (a finite
    number), ``flag`` (true or false), ``time`` (an ISO 8601 date-time) or ``text`` (any JSON
    scalar: it is shown, never computed with), with an optional range; null (or an empty
    CSV value) always passes here, :data:`OK_REQUIRED` says where an ok cell needs one."""

    kind: str
    low: float | None = None
    high: float | None = None
    above: bool = False  # low itself is excluded

    def expected(self) -> str:
        what = {"int": "a whole number", "number": "a finite number", "flag": "true or false",
                "time": "an ISO 8601 date-time", "text": "a JSON string or scalar"}[self.kind]
        if self.low is not None and self.high is not None:
            return f"{what} {_num(self.low)} to {_num(self.high)}"
        if self.low is not None:
            return (f"{what} above {_num(self.low)}" if self.above
                    else f"{what} {_num(self.low)} or more")
        return what

    def accepts(self, value: object) -> bool:
        """Whether ``value`` (a parsed JSON value, or a CSV number) fits; None always does."""
        if value is None:
            return True
        if self.kind == "text":
            return isinstance(value, str | bool | int) or (
                isinstance(value, float) and math.isfinite(value))
        if self.kind == "flag":
            return isinstance(value, bool)
        if self.kind == "time":
            return isinstance(value, str) and _is_iso(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.kind == "int" and not isinstance(value, int):
            return False
        if not math.isfinite(value):
            return False
        if self.low is not None and (value < self.low or (self.above and value == self.low)):
            return False
        return self.high is None or value <= self.high


def _num(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _is_iso(text: str) -> bool:
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


#: Specs by unit (schema.py's units), for fields without one of their own in _BY_NAME.
_BY_UNIT = {
    "s": Spec("number", 0), "samples/s": Spec("number", 0), "MiB": Spec("number", 0),
    "GiB": Spec("number", 0), "W": Spec("number", 0), "J": Spec("number", 0),
    "MHz": Spec("number", 0), "samples": Spec("int", 0), "steps": Spec("int", 0),
    "%": Spec("number", 0, 100), "ISO 8601": Spec("time"), "": Spec("text"),
    "epochs": Spec("int", 0), "FLOP": Spec("number", 0), "GFLOP/s": Spec("number", 0),
}
_PERCENT_OF_A_CORE = Spec("number", 0)  # 100 = one core: a busy cell passes 100
#: (section, field) -> its spec, where the unit's does not say enough.
_BY_NAME: dict[tuple[str, str], Spec] = {
    ("params", "repeat"): Spec("int", 0),
    ("params", "batch_size"): Spec("int", 1),
    ("params", "epochs"): Spec("int", 1),
    ("params", "width"): Spec("int", 1),
    ("params", "lr"): Spec("number", 0, above=True),
    ("params", "seed"): Spec("int", 0),
    ("params", "threads"): Spec("int", 0),
    ("params", "workers"): Spec("int", 0),
    ("params", "pin_memory"): Spec("flag"),
    ("params", "cuda_graphs"): Spec("flag"),
    ("params", "cudnn_benchmark"): Spec("flag"),
    ("params", "max_batch"): Spec("flag"),
    ("params", "math_tf32_matmul"): Spec("flag"),
    ("params", "math_tf32_cudnn"): Spec("flag"),
    ("params", "math_cudnn_benchmark"): Spec("flag"),
    ("params", "train_limit"): Spec("int", 0, TRAIN_SAMPLES),
    ("params", "test_limit"): Spec("int", 0, TEST_SAMPLES),
    ("params", "sample_interval"): Spec("number", 0, above=True),
    ("env", "cpu_cores_logical"): Spec("int", 0),
    ("env", "cpu_cores_physical"): Spec("int", 0),
    ("env", "torch_threads"): Spec("int", 0),
    ("env", "gpu_count"): Spec("int", 0),
    ("results", "cpu_pct_mean"): _PERCENT_OF_A_CORE,
    ("results", "cpu_pct_peak"): _PERCENT_OF_A_CORE,
    ("results", "system_load_mean"): Spec("number", 0),
    # The machine's load less this cell's own share: a little below 0 when the two samples
    # disagree (the published study has -1.8).
    ("results", "others_load_mean"): Spec("number"),
    ("results", "busy"): Spec("flag"),
    ("results", "best_epoch"): Spec("int", 1),
    ("results", "final_test_loss"): Spec("number", 0),
    ("results", "final_train_loss"): Spec("number", 0),
    ("epochs", "epoch"): Spec("int", 1),
    # the machine's load less the cell's own: slightly negative where the two are sampled
    # a moment apart, as others_load_mean
    ("epochs", "others_load_pct"): Spec("number", -100, 100),
    ("epochs", "train_loss"): Spec("number", 0),
    ("epochs", "test_loss"): Spec("number", 0),
    ("resources", "proc_cpu_pct"): _PERCENT_OF_A_CORE,
    ("resources", "sys_cpu_pct"): Spec("number", 0),
}
_TABLES: dict[str, Mapping[str, tuple[str, str]]] = {
    **SECTIONS, "epochs": schema.EPOCH_COLUMNS, "resources": schema.RESOURCE_COLUMNS}
#: section -> field -> Spec, for every field of the schema.
SPECS: dict[str, dict[str, Spec]] = {
    section: {name: _BY_NAME.get((section, name), _BY_UNIT[unit])
              for name, (unit, _) in fields.items()}
    for section, fields in _TABLES.items()}

#: The enumerated settings of a cell and their values, each list defined once in core
#: (:data:`mnistbench.core.options.SETTING_CHOICES`); empty, false or null where unset.
ENUMS: dict[str, tuple[object, ...]] = {
    name: (*values, *(() if name in ("device", "precision", "loader") else ("", False, None)))
    for name, values in options.SETTING_CHOICES.items()}
#: The same as CSV text (False and None as the aggregate writes them).
ENUM_TEXT = {name: frozenset("" if v is None else str(v) for v in values)
             for name, values in ENUMS.items()}
#: The highest measured limit believed, in GFLOP/s (10 PFLOP/s; its home is core.schema).
MAX_GFLOPS = schema.MAX_GFLOPS
#: A limit or a training rate above this many GFLOP/s cannot be true (a 1e300 record).
GFLOPS = Spec("number", 0, MAX_GFLOPS)
#: The most FLOP one CPU core does in a cycle at any precision this study runs: Intel AMX's
#: bf16 tile multiply, 1024 multiply-adds (2048 FLOP) a cycle (AVX-512 fp32 does 64).
CPU_FLOP_PER_CYCLE = 2048
#: A clock no CPU core sustains, in GHz (the fastest boost clocks are about 6 GHz).
CPU_MAX_GHZ = 6.5


def cpu_ceiling_gflops(cores_logical: object) -> float | None:
    """The GFLOP/s no CPU of ``cores_logical`` logical cores can reach at any precision:
    every logical core (hyperthreads counted as cores) at :data:`CPU_MAX_GHZ` doing
    :data:`CPU_FLOP_PER_CYCLE`: above any CPU's datasheet peak (AMX runs near 2 GHz, and a
    hyperthread shares its core's units; a 2-core machine: 26.6 TFLOP/s, where its AVX-512
    fp32 datasheet peak is about 0.5). None where the cores are not a whole number 1 or
    more (then :data:`MAX_GFLOPS` alone bounds it)."""
    if isinstance(cores_logical, str):
        cores_logical = parse_csv_number(cores_logical, "int") if cores_logical else None
    if type(cores_logical) is not int or cores_logical < 1:
        return None
    return cores_logical * CPU_MAX_GHZ * CPU_FLOP_PER_CYCLE


#: Datasheet peaks of GPUs, in TFLOP/s: the highest dense (no sparsity) rate at any
#: precision this study runs (fp16 or bf16 on the tensor cores), from NVIDIA's datasheets;
#: matched as a word of the recorded ``gpu_name``, the first that matches. A GPU named here
#: cannot run past :data:`GPU_DATASHEET_MULTIPLE` times its figure; one not named here is
#: bounded by :data:`MAX_GFLOPS` alone.
GPU_DATASHEET_TFLOPS: tuple[tuple[str, float], ...] = (
    ("GB200", 2500.0), ("B200", 2250.0), ("H200", 989.0), ("H100", 989.0),
    ("A100", 312.0), ("L40S", 362.0), ("L4", 121.0), ("A10", 125.0), ("V100", 125.0),
    ("T4", 65.0), ("RTX 4090", 330.0), ("RTX 3090", 142.0),
)
#: How far past its datasheet peak a GPU's measured limit or training rate may be believed:
#: boost clocks and a datasheet's rounding give a few percent, never this much.
GPU_DATASHEET_MULTIPLE = 1.5


def gpu_ceiling_gflops(gpu_name: object) -> float | None:
    """The GFLOP/s no GPU of that name reaches (:data:`GPU_DATASHEET_MULTIPLE` x its
    :data:`GPU_DATASHEET_TFLOPS`), or None for a GPU not in that table."""
    if not isinstance(gpu_name, str) or not gpu_name:
        return None
    for model, tflops in GPU_DATASHEET_TFLOPS:
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(model)}(?![0-9])", gpu_name):
            return GPU_DATASHEET_MULTIPLE * tflops * 1000
    return None


def ceiling_problem(device: object, field: str, gflops: object,
                    cores_logical: object, gpu_name: object = "") -> str | None:
    """Why ``gflops`` (a cell's limit or training rate, ``field``) cannot be true: above what
    a CPU of ``cores_logical`` logical cores can do (:func:`cpu_ceiling_gflops`), or above a
    stated multiple of a known GPU's datasheet peak (:func:`gpu_ceiling_gflops`); None where
    it can be (another device, or a GPU not known here: :data:`MAX_GFLOPS` bounds those)."""
    if isinstance(gflops, str):
        gflops = parse_csv_number(gflops) if gflops else None
    if device == "cpu":
        ceiling = cpu_ceiling_gflops(cores_logical)
    elif device == "cuda":
        ceiling = gpu_ceiling_gflops(gpu_name)
    else:
        ceiling = None
    if ceiling is None or not isinstance(gflops, int | float) or isinstance(gflops, bool) \
            or gflops <= ceiling:
        return None
    if device == "cuda":
        return (f"{field} is {gflops:g} GFLOP/s, above {ceiling:g} GFLOP/s, "
                f"{GPU_DATASHEET_MULTIPLE:g}x the datasheet peak of the {gpu_name} (its "
                "fastest dense tensor-core rate): no such GPU reaches it")
    return (f"{field} is {gflops:g} GFLOP/s, above {ceiling:g} GFLOP/s, the most "
            f"{cores_logical} logical CPU cores can do ({CPU_MAX_GHZ:g} GHz x "
            f"{CPU_FLOP_PER_CYCLE} FLOP a cycle each, more than any CPU's datasheet peak)")


def enum_problem(field: str, value: object) -> str | None:
    """Why ``value`` cannot be the enumerated ``field`` (:data:`ENUMS`), or None."""
    allowed = ENUMS.get(field)
    if allowed is None or value in allowed:
        return None
    shown = ", ".join(repr(v) for v in allowed if v not in ("", None, False))
    return f"{field} is {show(value)}, expected one of {shown}"


def combination_problem(status: object, device: object, precision: object) -> str | None:
    """Why an ``ok`` cell cannot have run ``precision`` on ``device``
    (:data:`mnistbench.core.devices.SUPPORTED`: ``train`` refuses any other combination
    before it runs, and the study never asks for one), or None; a cell of another status,
    or a device or precision outside its list (:func:`enum_problem` names those), passes."""
    from mnistbench.core.devices import SUPPORTED

    if status != "ok" or device not in SUPPORTED or precision not in ENUMS["precision"]:
        return None
    if precision in SUPPORTED[str(device)]:
        return None
    return (f"precision is {show(precision)}, which {device} does not run (it runs "
            f"{', '.join(SUPPORTED[str(device)])}): no ok cell can have run so")


SPECS["results"]["achieved_gflops"] = GFLOPS

#: Fields an ok cell must have a value in (the figures its epochs give).
OK_REQUIRED = {
    "results": ("epoch_s_median", "epoch_s_mean", "train_s_median", "total_s", "data_s",
                "forward_s", "backward_s", "optimizer_s", "eval_s", "steps_per_epoch",
                "final_test_acc", "best_test_acc", "best_epoch", "final_test_loss",
                "final_train_loss"),
    "timing": ("started_at", "ended_at", "start_unix", "end_unix", "timed_s"),
}
#: The phase fields a cell whose steps replay as one CUDA graph (timing.phase_split
#: schema.PHASE_SPLIT_GRAPH, mnistbench.measure.capture) does not split: empty in its summary
#: and epoch rows.
GRAPH_UNSPLIT = tuple(f"{phase}_s" for phase in schema.GRAPH_UNSPLIT)


def _unsplit(cell: Cell) -> tuple[str, ...]:
    """The phase fields ``cell`` leaves empty by design (:data:`GRAPH_UNSPLIT` for a graph
    cell, none otherwise)."""
    split = cell.sections.get("timing", {}).get("phase_split")
    return GRAPH_UNSPLIT if split == schema.PHASE_SPLIT_GRAPH else ()


#: CSV columns every row must have a value in.
ROW_REQUIRED = {
    "epochs": tuple(c for c in schema.EPOCH_COLUMNS
                    if c not in ("samples_per_s", "others_load_pct", "disturbed")),
    "resources": ("t_s", "stage"),
}
_CSV_FILES = {"epochs": schema.EPOCHS_FILE, "resources": schema.RESOURCES_FILE}
_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


# ---------------------------------------------------------------------------------------------
# Strict JSON (mnistbench.core.untrusted: bounded, every non-JSON number named)
loads_lenient, not_json, loads_strict = (untrusted.loads_lenient, untrusted.not_json,
                                         untrusted.loads_strict)


#: The largest summary.json, measured limit or manifest read (a cell's summary is about 8 KiB).
MAX_JSON_BYTES = 16 * 1024 * 1024
#: The largest epochs.csv or resources.csv read (a long cell samples about 10 MiB).
MAX_CSV_BYTES = 512 * 1024 * 1024


def read_json_strict(path: Path) -> object:
    """The strict JSON of the regular file at ``path``, read without following a symbolic
    link at its name (:func:`mnistbench.core.untrusted.read_text_under`; ValueError, or
    OSError naming the path, otherwise)."""
    path = Path(path)
    return loads_strict(untrusted.read_text_under(path.parent, path.name,
                                                  max_bytes=MAX_JSON_BYTES))


# ---------------------------------------------------------------------------------------------
# The cell
@dataclass
class Cell:
    """One cell as read: its recorded ``status`` and ``reason``, the four sections, its CSV
    rows (values as written, in schema column order) and ``problems``: why it is invalid
    (empty when it is valid)."""

    folder: Path
    key: tuple[str, str, str]
    status: str
    reason: str
    version: int
    sections: dict[str, dict]
    epochs: list[list[str]] = field(default_factory=list)
    resources: list[list[str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: (section, field) of every value found bad, left empty in the tables.
    bad_fields: set[tuple[str, str]] = field(default_factory=set)

    @property
    def params(self) -> dict:
        return self.sections["params"]

    @property
    def valid(self) -> bool:
        return not self.problems

    @property
    def table_status(self) -> str:
        """The status the tables file it under: ``failed`` for an invalid cell."""
        return self.status if self.valid else INVALID_STATUS

    @property
    def table_reason(self) -> str:
        """The reason the tables show: for an invalid cell, what is wrong and the fix."""
        if self.valid:
            return self.reason
        return f"{INVALID_PREFIX} (recorded status {self.status}): {self.why()}; {FIX}"

    def why(self) -> str:
        """The problems, the first :data:`SHOWN_PROBLEMS` of them and how many more."""
        shown = "; ".join(self.problems[:SHOWN_PROBLEMS])
        more = len(self.problems) - SHOWN_PROBLEMS
        return shown + (f"; and {more} more" if more > 0 else "")

    def table_sections(self) -> dict[str, dict]:
        """The sections as the tables show them: an invalid cell's bad values and all its
        results left empty."""
        if self.valid:
            return self.sections
        out = {}
        for name, block in self.sections.items():
            out[name] = {k: (None if name == "results" or (name, k) in self.bad_fields else v)
                         for k, v in block.items()}
        return out


def read_cell(folder: Path) -> Cell:
    """Read and check the cell in ``folder`` (``RUNS/ENV/EXPERIMENT/CELL``). Raises
    :class:`CellError` when its ``summary.json`` cannot be placed (see the module's
    docstring); returns the cell, with :attr:`Cell.problems` listing what is invalid."""
    folder = Path(folder)
    path = folder / schema.SUMMARY_FILE
    try:
        data = loads_lenient(untrusted.read_text_under(folder, schema.SUMMARY_FILE,
                                                       max_bytes=MAX_JSON_BYTES))
    except untrusted.UnsafeFile as exc:
        raise CellError(f"cannot read {path}: {exc.why}. A cell's summary is a regular "
                        f"file in its folder: {FIX}.") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise CellError(f"cannot read {path}: {why}. The file is corrupt or truncated: "
                        f"{FIX}.") from None
    if not isinstance(data, dict):
        raise CellError(f"{path} is not a JSON object but {type(data).__name__}: {FIX}.")
    problems = [f"{schema.SUMMARY_FILE} {where} is {token}, which is not JSON (a JSON number "
                "is finite)" for where, token in not_json(data)]
    bad = {tuple(where.split(".", 1)) for where, _ in not_json(data) if "." in where}
    data = untrusted.without_markers(data)
    version = _check_structure(path, data)
    cell = Cell(folder=folder, key=(folder.parent.parent.name, folder.parent.name, folder.name),
                status=data["status"], reason="" if data["reason"] is None else str(data["reason"]),
                version=version, sections={name: data[name] for name in SECTIONS},
                problems=problems, bad_fields={b for b in bad if len(b) == 2})
    _check_values(cell)
    read = {table: _read_rows(cell, table) for table in _CSV_FILES}
    _check_agreement(cell, epochs_read=read["epochs"])
    return cell


def _check_structure(path: Path, data: dict) -> int:
    """Refuse (CellError) a summary the tables cannot place; its schema version."""
    version = data.get("schema_version")
    if type(version) is not int or not 1 <= version <= schema.SCHEMA_VERSION:
        raise CellError(
            f"{path} has schema_version {version!r}, but this mnistbench reads schema versions "
            f"1 to {schema.SCHEMA_VERSION}. Aggregate it with the mnistbench version that "
            "wrote it (or a later one), or rerun the cell with this version.")
    missing = [k for k in TOP_KEYS if k not in data]
    if missing:
        raise CellError(f"{path} lacks the key(s) {', '.join(missing)} (expected "
                        f"{', '.join(TOP_KEYS)}): {FIX}.")
    status = data["status"]
    if status not in schema.STATUSES:
        raise CellError(f"{path} has status {status!r}; allowed: "
                        f"{', '.join(schema.STATUSES)}: {FIX}.")
    for name, fields in SECTIONS.items():
        block = data[name]
        if not isinstance(block, dict):
            raise CellError(f"{path}: {name!r} must be a JSON object, got "
                            f"{type(block).__name__}: {FIX}.")
        unknown = sorted(set(block) - set(fields))
        if unknown:
            raise CellError(
                f"{path}: unknown {name} key(s) {', '.join(unknown)}; allowed: "
                f"{', '.join(fields)}. The trainer and mnistbench.core.schema disagree: add the "
                "field to schema.py (and bump SCHEMA_VERSION) or rerun the cell.")
        # params identify the cell and ok cells must be complete; the other blocks of a
        # cell that did not run may leave fields out (read as empty).
        if name == "params" or (status == "ok" and name != "env"):
            absent = [k for k in fields
                      if k not in block and schema.ADDED_IN.get(k, 1) <= version]
            if absent:
                raise CellError(f"{path}: {name} lacks {', '.join(absent)}: {FIX}.")
    params = data["params"]
    cell_dir = path.parent
    ids = (cell_dir.parent.parent.name, cell_dir.parent.name, cell_dir.name)
    for key, folder in zip(schema.ID_COLUMNS, ids, strict=True):
        if str(params[key]) != folder:
            raise CellError(
                f"{path} says {key} {params[key]!r} but lives in folder {folder!r}. Cells must "
                f"sit at RUNS/ENV/EXPERIMENT/CELL matching their params: move the folder to "
                f"the matching place or rerun the cell there.")
    for key in ("device", "precision", "loader"):
        value = params[key]
        if not isinstance(value, str) or not value.strip():
            raise CellError(
                f"{path}: params.{key} is {value!r}, but every cell needs a {key} (with "
                "device and precision it names the cell's series in every table and chart): "
                f"{FIX}.")
        problem = enum_problem(key, value)
        if problem:
            raise CellError(f"{path}: params.{problem}: no cell of this mnistbench can have "
                            f"run so, and it names the cell's series in every table: {FIX}.")
    for key, low in (("batch_size", 1), ("repeat", 0)):
        value = params[key]
        if type(value) is not int or value < low:
            raise CellError(
                f"{path}: params.{key} is {value!r}, but every cell needs a whole number "
                f"{low} or more there: {FIX}.")
    return version


def _check_values(cell: Cell) -> None:
    """Every field's type and range; an ok cell's headline figures present."""
    for name, block in cell.sections.items():
        specs = SPECS[name]
        for key, value in block.items():
            spec = specs[key]
            if (name, key) in cell.bad_fields:
                continue
            if not spec.accepts(value):
                cell.bad_fields.add((name, key))
                cell.problems.append(f"{schema.SUMMARY_FILE} {name}.{key} is {show(value)}, "
                                     f"expected {spec.expected()}")
    for key in ENUMS:
        value = cell.sections["params"].get(key)
        # None: a field an older schema did not record (schema.ADDED_IN)
        problem = (None if value is None or ("params", key) in cell.bad_fields
                   else enum_problem(key, value))
        if problem:
            cell.bad_fields.add(("params", key))
            cell.problems.append(f"{schema.SUMMARY_FILE} params.{problem}")
    problem = (None if ("results", "achieved_gflops") in cell.bad_fields else ceiling_problem(
        cell.params.get("device"), "results.achieved_gflops",
        cell.sections["results"].get("achieved_gflops"),
        cell.sections["env"].get("cpu_cores_logical"), cell.sections["env"].get("gpu_name")))
    if problem:
        cell.bad_fields.add(("results", "achieved_gflops"))
        cell.problems.append(f"{schema.SUMMARY_FILE} {problem}")
    problem = combination_problem(cell.status, cell.params.get("device"),
                                  cell.params.get("precision"))
    if problem and ("params", "precision") not in cell.bad_fields:
        cell.bad_fields.add(("params", "precision"))
        cell.problems.append(f"{schema.SUMMARY_FILE} params.{problem}")
    if cell.status == "ok":
        for name, keys in OK_REQUIRED.items():
            for key in keys:
                if key in _unsplit(cell):
                    continue
                block = cell.sections[name]
                if (key in block or schema.ADDED_IN.get(key, 1) <= cell.version) and \
                        block.get(key) is None and (name, key) not in cell.bad_fields:
                    cell.bad_fields.add((name, key))
                    cell.problems.append(f"{schema.SUMMARY_FILE} {name}.{key} is empty, but "
                                         "an ok cell has one")


def show(value: object) -> str:
    text = json.dumps(value, allow_nan=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _read_rows(cell: Cell, table: str) -> bool:
    """Read the rows of the cell's epochs.csv or resources.csv (in schema column order) into
    the cell, each value checked; an ok cell needs both files, non-empty. Whether the file
    was read whole (a problem recorded otherwise; absent or empty counts as read for a cell
    that is not ok)."""
    name = _CSV_FILES[table]
    path = cell.folder / name
    columns = list(_TABLES[table])
    try:
        if not (path.exists() or path.is_symlink()):
            raise FileNotFoundError(path)
        text = untrusted.read_text_under(cell.folder, name, max_bytes=MAX_CSV_BYTES)
        with io.StringIO(text, newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            if header is None:
                if cell.status == "ok":
                    cell.problems.append(f"{name} is empty, but an ok cell has its header "
                                         + ("and one row per epoch" if table == "epochs"
                                            else "and its samples"))
                    return False
                return True
            # A cell of an older schema lacks the columns added since: they read as empty.
            added = [c for c in columns if c not in header
                     and schema.ADDED_IN.get(c, 1) > cell.version]
            if sorted(header) != sorted(c for c in columns if c not in added):
                missing = [c for c in columns if c not in header]
                extra = [c for c in header if c not in columns]
                cell.problems.append(
                    f"{name} has an unexpected header (missing: {', '.join(missing) or '-'}; "
                    f"unknown: {', '.join(extra) or '-'}; expected: {', '.join(columns)})")
                return False
            order = [header.index(c) if c in header else None for c in columns]
            rows = []
            for line_no, record in enumerate(reader, start=2):
                if not record:
                    continue
                if len(record) != len(header):
                    cell.problems.append(f"{name} line {line_no} has {len(record)} fields, "
                                         f"expected {len(header)} (truncated or damaged)")
                    return False
                row = [record[i] if i is not None else "" for i in order]
                if not _check_row(cell, table, name, line_no, row):
                    return False
                rows.append(row)
    except FileNotFoundError:
        if cell.status == "ok":
            cell.problems.append(f"{name} is missing, but an ok cell has one")
            return False
        return True
    except untrusted.UnsafeFile as exc:
        cell.problems.append(f"cannot read {name}: {exc.why}")
        return False
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        cell.problems.append(f"cannot read {name}: {why}")
        return False
    setattr(cell, table, rows)
    return True


def _check_row(cell: Cell, table: str, name: str, line_no: int, row: list[str]) -> bool:
    """Whether one CSV row's every value fits its column (else the problem is recorded)."""
    specs = SPECS[table]
    for column, text in zip(_TABLES[table], row, strict=True):
        spec = specs[column]
        if text == "":
            if column in ROW_REQUIRED[table] and column not in _unsplit(cell):
                cell.problems.append(f"{name} line {line_no} column {column} is empty")
                return False
            continue
        value = parse_csv_number(text, spec.kind) if spec.kind in ("int", "number") else text
        if value is None or not spec.accepts(value):
            cell.problems.append(f"{name} line {line_no} column {column} is {text[:40]!r}, "
                                 f"expected {spec.expected()}")
            return False
    return True


def parse_csv_number(text: str, kind: str = "number") -> int | float | None:
    """The number a CSV value spells (``int``: digits only), or None where it spells none:
    words, ``nan``, ``inf``, ``1e999``, digit groups (``1_000``)."""
    text = text.strip()
    if kind == "int":
        return int(text) if _INT.fullmatch(text) else None
    if not _FLOAT.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def _check_agreement(cell: Cell, *, epochs_read: bool) -> None:
    """Counts that must agree with the params, for the rows and results as read."""
    good = cell.table_sections() if cell.bad_fields else cell.sections
    params, results, timing = good["params"], cell.sections["results"], good["timing"]
    if cell.bad_fields:  # the results' good values only (table_sections empties them all)
        results = {k: (None if ("results", k) in cell.bad_fields else v)
                   for k, v in results.items()}
    epochs = params.get("epochs")
    if cell.epochs:
        numbers = [int(row[0]) for row in cell.epochs]
        if numbers != list(range(1, len(numbers) + 1)):
            cell.problems.append(f"{schema.EPOCHS_FILE} numbers its epochs "
                                 f"{_list(numbers)}, expected 1 to {len(numbers)} in order")
        elif cell.status != "ok" and isinstance(epochs, int) and len(numbers) > epochs:
            cell.problems.append(f"{schema.EPOCHS_FILE} has {len(numbers)} epoch rows, more "
                                 f"than params.epochs {epochs}")
        columns = list(schema.EPOCH_COLUMNS)
        steps_at, samples_at = columns.index("steps"), columns.index("samples")
        batch, cap = params["batch_size"], params.get("max_steps")
        for row in cell.epochs:
            steps, samples = int(row[steps_at]), int(row[samples_at])
            if samples > steps * batch:
                cell.problems.append(
                    f"{schema.EPOCHS_FILE} epoch {row[0]} has {samples} samples in {steps} "
                    f"steps, more than steps x params.batch_size {batch}")
                break
            if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 and steps > cap:
                cell.problems.append(f"{schema.EPOCHS_FILE} epoch {row[0]} has {steps} steps, "
                                     f"more than params.max_steps {cap}")
                break
    if cell.status != "ok":
        return
    if epochs_read and isinstance(epochs, int) and len(cell.epochs) != epochs:
        cell.problems.append(f"{schema.EPOCHS_FILE} has {len(cell.epochs)} epoch rows, but "
                             f"params.epochs is {epochs}")
    steps = results.get("steps_per_epoch")
    if cell.epochs and isinstance(steps, int) and steps != int(cell.epochs[0][1]):
        cell.problems.append(f"{schema.SUMMARY_FILE} results.steps_per_epoch is {steps}, but "
                             f"{schema.EPOCHS_FILE} epoch 1 has {cell.epochs[0][1]} steps")
    best = results.get("best_epoch")
    if isinstance(best, int) and isinstance(epochs, int) and best > epochs:
        cell.problems.append(f"{schema.SUMMARY_FILE} results.best_epoch is {best}, past "
                             f"params.epochs {epochs}")
    final, top = results.get("final_test_acc"), results.get("best_test_acc")
    if _both_numbers(final, top) and top < final:
        cell.problems.append(f"{schema.SUMMARY_FILE} results.best_test_acc {top} is below "
                             f"results.final_test_acc {final}")
    start, end = timing.get("start_unix"), timing.get("end_unix")
    if _both_numbers(start, end) and end < start:
        cell.problems.append(f"{schema.SUMMARY_FILE} timing.end_unix {end} is before "
                             f"timing.start_unix {start}")


def _both_numbers(a: object, b: object) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in (a, b))


def _list(numbers: list[int]) -> str:
    shown = ", ".join(map(str, numbers[:8]))
    return shown + (", ..." if len(numbers) > 8 else "")


# ---------------------------------------------------------------------------------------------
# Measured limits: runs/{env}/peak/{device}.json
class PeakError(ValueError):
    """A measured limit (``runs/{env}/peak/{device}.json``) that is not a record of
    :data:`mnistbench.core.schema.PEAK_FIELDS`; one paragraph naming the file and the fix."""


#: How to replace a bad measured limit.
PEAK_FIX = ("delete it and run the workflow again (its peak step measures the device again), "
            "or write it again with `mnistbench peak --device DEVICE --out FILE`")


@dataclass(frozen=True)
class Peak:
    """A device's measured limit as read: its ``status`` (``ok``, ``unavailable``,
    ``failed``), why, where it was measured from (threads, torch, source) and its ``rows``
    (one per kernel and precision, :data:`mnistbench.core.schema.PEAK_ROW_FIELDS`)."""

    path: Path
    status: str
    reason: str
    device: str
    threads: int | None
    torch: str | None
    source: str
    rows: list[dict]

    def limit(self, precision: str) -> Mapping | None:
        """The row of the highest GFLOP/s at ``precision``
        (:func:`mnistbench.core.schema.best_peak_row`); None when none was measured."""
        return schema.best_peak_row(self.rows, precision) if self.status == "ok" else None


def _is_count(value: object, low: int) -> bool:
    return type(value) is int and value >= low


def _is_positive(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


def read_peak(path: Path, device: str | None = None) -> Peak:
    """Read and check the measured limit at ``path`` strictly (strict JSON, exactly the
    schema's keys, each of its type, the rows of an ok record measured at precisions its
    device runs, none twice; ``device``: what the file's name says it holds). Raises
    :class:`PeakError` naming the file, the field and the fix."""
    from mnistbench.core.devices import DEVICES, is_supported

    path = Path(path)
    try:
        data = read_json_strict(path)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise PeakError(f"cannot read the measured limit {path}: {why}. The file is corrupt "
                        f"or truncated: {PEAK_FIX}.") from None

    def bad(what: str) -> PeakError:
        return PeakError(f"the measured limit {path}: {what}: {PEAK_FIX}.")

    if not isinstance(data, dict):
        raise bad(f"not a JSON object but {type(data).__name__}")
    fields = schema.PEAK_FIELDS
    missing = [k for k in fields if k not in data]
    unknown = sorted(set(data) - set(fields))
    if missing or unknown:
        raise bad(f"missing key(s) {', '.join(missing) or '-'}, unknown key(s) "
                  f"{', '.join(unknown) or '-'}; expected {', '.join(fields)}")
    status = data["status"]
    if status not in schema.PEAK_STATUSES:
        raise bad(f"status is {show(status)}, expected one of "
                  f"{', '.join(schema.PEAK_STATUSES)}")
    ok = status == "ok"
    recorded = data["device"]
    if recorded not in DEVICES:
        raise bad(f"device is {show(recorded)}, expected one of {', '.join(DEVICES)}")
    if device is not None and recorded != device:
        raise bad(f"device is {recorded!r}, but the file's name says {device!r} (a device's "
                  f"limit lives in {schema.PEAK_DIR}/{schema.peak_file(recorded)})")
    for key in ("reason", "source"):
        if not isinstance(data[key], str):
            raise bad(f"{key} is {show(data[key])}, expected a string")
    if ok and data["reason"]:
        raise bad(f"status is ok but reason is {show(data['reason'])}, expected empty")
    if not ok and not data["reason"].strip():
        raise bad(f"status is {status} but reason is empty; a limit not measured says why")
    if ok and not data["source"].startswith("measured"):
        raise bad(f"status is ok but source is {show(data['source'])}: a limit is measured "
                  "here (source 'measured: ...'), never taken from a datasheet")
    threads, version = data["threads"], data["torch"]
    if not (_is_count(threads, 1) or (threads is None and not ok)):
        raise bad(f"threads is {show(threads)}, expected a whole number 1 or more"
                  + ("" if ok else " or null"))
    if not ((isinstance(version, str) and version.strip()) or (version is None and not ok)):
        raise bad(f"torch is {show(version)}, expected the PyTorch version"
                  + ("" if ok else " or null"))
    rows = data["rows"]
    if not isinstance(rows, list):
        raise bad(f"rows is {show(rows)}, expected a list")
    if ok and not rows:
        raise bad("status is ok but rows is empty")
    if not ok and rows:
        raise bad(f"status is {status} but it holds {len(rows)} row(s), expected none")
    seen: set[tuple[str, str, str]] = set()
    for index, row in enumerate(rows):
        where = f"rows[{index}]"
        if not isinstance(row, dict) or set(row) != set(schema.PEAK_ROW_FIELDS):
            got = ", ".join(sorted(row)) if isinstance(row, dict) else type(row).__name__
            raise bad(f"{where} holds {got}, expected the keys "
                      f"{', '.join(schema.PEAK_ROW_FIELDS)}")
        for key in ("kernel", "shape"):
            if not isinstance(row[key], str) or not row[key].strip():
                raise bad(f"{where}.{key} is {show(row[key])}, expected a non-empty string")
        precision = row["precision"]
        if not isinstance(precision, str) or not is_supported(recorded, precision):
            raise bad(f"{where}.precision is {show(precision)}, expected a precision "
                      f"{recorded} runs")
        for key in ("gflops", "seconds"):
            if not _is_positive(row[key]):
                raise bad(f"{where}.{key} is {show(row[key])}, expected a finite number "
                          "above 0")
        if row["gflops"] > MAX_GFLOPS:
            raise bad(f"{where}.gflops is {show(row['gflops'])}, above {MAX_GFLOPS:g} "
                      "GFLOP/s (10 PFLOP/s, more than any device's datasheet peak): no "
                      "device measures that")
        if not _is_count(row["calls"], 1):
            raise bad(f"{where}.calls is {show(row['calls'])}, expected a whole number 1 or "
                      "more")
        if (row["kernel"], row["shape"], precision) in seen:
            raise bad(f"{where} times {row['kernel']} {row['shape']} at {precision} again "
                      "(each kernel and shape once per precision)")
        seen.add((row["kernel"], row["shape"], precision))
    return Peak(path=path, status=status, reason=data["reason"], device=recorded,
                threads=threads, torch=version, source=data["source"], rows=rows)


def peak_files(env_folder: Path) -> list[tuple[str, Path]]:
    """(device, path) of every measured limit of an environment folder
    (``runs/{env}/peak/*.json``; hidden names and other files left out), sorted. A JSON file
    there named after no device is a :class:`PeakError`."""
    from mnistbench.core.devices import DEVICES

    folder = Path(env_folder) / schema.PEAK_DIR
    if folder.is_symlink():
        raise PeakError(f"{folder} is a symbolic link (to {os.readlink(folder)}), which is not "
                        "followed: an environment's measured limits are read only where they "
                        "lie. Move the folder it points to into its place, or remove the link "
                        "(the workflow's peak step measures again).")
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.json")):
        if path.name.startswith("."):
            continue
        if path.stem not in DEVICES:
            raise PeakError(
                f"{path}: the folder {folder} holds the measured limit of each device, one "
                f"file per device ({', '.join(schema.peak_file(d) for d in DEVICES)}); "
                f"{path.name} names none. Move it out of {folder}.")
        found.append((path.stem, path))
    return found


def read_peaks(runs: Path) -> dict[tuple[str, str], Peak]:
    """Every measured limit under ``runs`` (``runs/{env}/peak/{device}.json``, hidden
    environment folders left out), by (env, device), each read by :func:`read_peak`."""
    runs = Path(runs)
    if not runs.is_dir():
        return {}
    peaks = {}
    for env_folder in sorted(p for p in runs.iterdir() if p.is_dir() and not p.is_symlink()
                             and not p.name.startswith(".")):
        for device, path in peak_files(env_folder):
            peaks[(env_folder.name, device)] = read_peak(path, device)
    return peaks
