"""Steps that write one JSON file, as ``mnistbench`` subcommands, so the workflow can run them
as commands instead of importing their modules into Snakemake's own process:

- :func:`write_peak` (``mnistbench peak``): the device's measured FLOP/s limit,
  :func:`mnistbench.measure.peak.measure`, and :func:`write_peak_status` the record of one
  that could not be measured (unavailable, failed);
- :func:`write_cost_model` (``mnistbench cost-model``): the cost model checked against its
  schema with every default filled, :func:`mnistbench.results.cost.resolve`: the workflow's
  ``cost_model`` job runs this command (workflow/rules/aggregate.smk).

Both write atomically (:mod:`mnistbench.core.atomic`): the file is whole or not there. A top
module: it imports ``measure`` (torch) only in :func:`write_peak`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mnistbench.core import atomic


class StepError(Exception):
    """A step's input is bad or its output cannot be written: one paragraph with the fix."""


def write_json(path: Path | str, data: object, what: str, option: str = "--out") -> Path:
    """Write ``data`` as strict JSON to ``path`` atomically, its folder made; a
    :class:`StepError` naming the path and the fix (phrased around ``option``) when it cannot
    be written (no folder it made is left)."""
    path = Path(path)
    created: list[Path] = []
    try:
        created = atomic.make_dirs(path.parent)
        return atomic.write_json(path, data)
    except OSError as exc:
        atomic.remove_dirs(created)
        raise StepError(atomic.folder_error(path.parent, exc, what, option, names_a_file=True)
                        ) from None


def write_peak(out: Path | str, device: str, precisions: Sequence[str],
               threads: int = 0) -> Path:
    """Measure ``device``'s limit at each of ``precisions`` with ``threads`` (0: torch's
    default) and write the record to ``out``; the path. An absent device raises
    :class:`mnistbench.measure.backends.DeviceUnavailable`, any other failure its exception,
    and neither writes anything (the caller records it: :func:`write_peak_status`)."""
    from mnistbench.measure import peak

    record = peak.measure(device, tuple(precisions), threads=threads or None)
    return write_json(out, record, "the measured limit")


def write_peak_status(out: Path | str, device: str, status: str, reason: str) -> Path:
    """Write the record of a limit that was not measured to ``out``: ``status``
    (``unavailable`` or ``failed``, :data:`mnistbench.core.schema.PEAK_STATUSES`) and
    ``reason``, no rows, so the aggregate and the report know why; the path. Imports no
    torch: the workflow's peak rule calls it (``mnistbench peak --record-failure``) when the
    measuring process itself failed."""
    from mnistbench.core import schema

    if status not in schema.PEAK_STATUSES or status == "ok":
        raise ValueError(f"status {status!r} is not a status of a limit not measured")
    record: dict[str, object] = {"status": status, "reason": reason, "device": device,
                                 "threads": None, "torch": None,
                                 "source": f"not measured: {status}", "rows": []}
    return write_json(out, record, "the measured limit")


def read_model(text: str, source: str | None = None) -> tuple[object, str]:
    """(the cost model document, what to call it) of ``text``: a JSON object, or the path of
    a file holding the model (JSON by a ``.json`` suffix, else YAML), either parsed bounded
    (:func:`mnistbench.results.cost.read_model_file`: a folder, an empty file or nesting
    5000 deep is a :class:`StepError`, not a traceback)."""
    from mnistbench.results import cost

    try:
        if text.lstrip().startswith("{"):
            source = source or "--config-json"
            return cost.parse_model_text(text, source), source
        path = Path(text)
        if not path.exists():
            raise StepError(f"--config-json {text!r} is neither a JSON object nor a readable "
                            "file (No such file or directory). Pass the model as {...}, or "
                            "the path of a JSON or YAML file.")
        return cost.read_model_file(path, "--config-json"), source or str(path)
    except cost.CostError as exc:
        raise StepError(str(exc)) from None


def write_cost_model(out: Path | str, text: str, source: str | None = None) -> Path:
    """Check the cost model ``text`` (:func:`read_model`) against its schema, fill every key
    left out with its default and write it to ``out`` as JSON; the path. A bad model is a
    :class:`StepError` naming the key and the fix, and writes nothing."""
    from mnistbench.results import cost

    data, source = read_model(text, source)
    try:
        model = cost.resolve(data, source=source)
        cost.validate(model, source)  # what the report builds from it
    except cost.CostError as exc:
        raise StepError(str(exc)) from None
    return write_json(out, model, "the cost model")
