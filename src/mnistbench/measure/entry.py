"""The timed process's entry point: ``mnistbench train``'s arguments parsed, one cell run, its
result reported.

The CLI's ``train`` subcommand and the fork server's forked child both call :func:`run` (the
child through :func:`main`), so a forked cell runs exactly what a new process runs, and the
launcher never imports the CLI. Errors are one paragraph, as every ``mnistbench`` error: exit 1
for an output folder that cannot be written, 2 for a usage error (argparse), and the cell
statuses of :data:`mnistbench.core.schema.EXIT_CODES` otherwise.

After the cell ran (whatever its status, but never after a usage error, which writes no
summary), :func:`report` reads the ``summary.json`` it wrote and reports it, as ``fetch``
reports its files: one result line on stderr (status, s/epoch, samples/s, final accuracy, the
summary's path) with a warning line for a cell timed on a busy machine or with disturbed
epochs, and the summary's path on stdout; with ``--json`` the headline figures as one JSON
object on stdout instead of the path. ``--quiet`` (what the workflow passes) prints none of
it, but ``--json`` still prints its object.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mnistbench.core import options, schema
from mnistbench.core.durations import seconds
from mnistbench.measure import train
from mnistbench.measure.cellconfig import TrainConfig
from mnistbench.measure.outputs import OutputError

#: The summary's fields that ``--json`` prints: the cell's identity and settings (params), and
#: its headline figures (results), beside the status, the exit code and the summary's path.
JSON_PARAMS = ("env", "experiment", "cell", "repeat", "device", "precision", "loader",
               "batch_size", "epochs")
JSON_RESULTS = ("epoch_s_median", "epoch_s_mean", "total_s", "samples_per_s",
                "steps_per_epoch", "final_test_acc", "best_test_acc", "best_epoch",
                "final_test_loss", "peak_rss_mb", "peak_device_mem_mb", "gpu_energy_j",
                "cpu_energy_j", "others_load_mean", "busy", "disturbed_epochs")


def run(args) -> int:
    """Run the cell of parsed ``train`` arguments ``args``, report it (:func:`report`) and
    return its exit code. An output folder that cannot be written raises
    :class:`mnistbench.measure.outputs.OutputError`."""
    code = train.run_cell(TrainConfig.from_namespace(args))
    if code in schema.EXIT_CODES.values():  # a usage error (2) wrote no summary
        report(Path(args.out) / schema.SUMMARY_FILE, quiet=args.quiet,
               as_json=getattr(args, "json", False), code=code)
    return code


def main(argv: list[str]) -> int:
    """Parse ``argv`` (the arguments after ``train``) and run the cell; its exit code."""
    args = options.train_parser().parse_args(argv)
    try:
        return run(args)
    except OutputError as exc:
        print(f"mnistbench train: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("mnistbench train: interrupted", file=sys.stderr)
        return 130


# ---------------------------------------------------------------------------------------------
# The report of a finished cell
def report(path: Path, *, quiet: bool = False, as_json: bool = False,
           code: int | None = None) -> None:
    """Report the cell whose ``summary.json`` is ``path``: unless ``quiet``, the result line
    (:func:`result_line`) and any warnings (:func:`warnings`) on stderr and, without
    ``as_json``, ``path`` on stdout; with ``as_json`` the headline (:func:`headline`) as one
    JSON object on stdout. A summary that cannot be read is a warning, never an error (the
    cell's exit code stands)."""
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(summary, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        if not quiet:
            print(f"mnistbench train: warning: cannot read back {path}: {exc}",
                  file=sys.stderr)
        return
    if not quiet:
        for line in [result_line(summary, path), *warnings(summary)]:
            print(line, file=sys.stderr)
    if as_json:
        print(json.dumps(headline(summary, path, code), allow_nan=False), flush=True)
    elif not quiet:
        print(path, flush=True)


def _section(summary: dict, key: str) -> dict:
    value = summary.get(key)
    return value if isinstance(value, dict) else {}


def _number(value) -> float | None:
    """``value`` when it is a number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def result_line(summary: dict, path: Path) -> str:
    """One line: the status, the median s/epoch, the samples/s, the final test accuracy and
    the summary's path, e.g. ``mnistbench train: ok: 2.35 s/epoch (median of 3 epochs), 25,600
    samples/s, final test accuracy 98.91 %; summary results/x/summary.json``."""
    params, results = _section(summary, "params"), _section(summary, "results")
    status = summary.get("status") or "?"
    if status != "ok":
        return f"mnistbench train: {status}: no figures (the reason is above); summary {path}"
    epochs = params.get("epochs")
    rate, accuracy = _number(results.get("samples_per_s")), _number(results.get("final_test_acc"))
    of = f" (median of {epochs} epoch{'' if epochs == 1 else 's'})" if epochs else ""
    disturbed = _number(results.get("disturbed_epochs"))
    if epochs and disturbed and 0 < disturbed < epochs:
        # the trainer's medians leave disturbed epochs out (all of them: none is left out)
        quiet = epochs - int(disturbed)
        of = f" (median of the {quiet} quiet epoch{'' if quiet == 1 else 's'} of {epochs})"
    figures = (f"{seconds(_number(results.get('epoch_s_median')))} s/epoch{of}, "
               f"{'–' if rate is None else f'{rate:,.0f}'} samples/s, final test accuracy "
               f"{'–' if accuracy is None else f'{accuracy:.2f} %'}")
    return f"mnistbench train: {status}: {figures}; summary {path}"


def warnings(summary: dict) -> list[str]:
    """One warning line (none when quiet) when the cell was timed on a busy machine
    (``results.busy``) or epochs were disturbed (``results.disturbed_epochs`` above 0; the
    field is absent in older summaries)."""
    params, results = _section(summary, "params"), _section(summary, "results")
    what = []
    if results.get("busy") is True:
        others = _number(results.get("others_load_mean"))
        share = f" (other processes used {others:.0f} % of it on average)" if others else ""
        what.append(f"it was timed on a busy machine{share}")
    disturbed = _number(results.get("disturbed_epochs"))
    if disturbed:
        epochs = params.get("epochs")
        of = f" of {epochs}" if isinstance(epochs, int) and not isinstance(epochs, bool) else ""
        what.append(f"{disturbed:.0f}{of} timed epoch(s) were disturbed (epochs.csv's "
                    "disturbed column)")
    if not what:
        return []
    return [f"mnistbench train: warning: {' and '.join(what)}: its times may be pessimistic; "
            "time the cell again on a quiet machine"]


def headline(summary: dict, path: Path, code: int | None = None) -> dict:
    """The summary's headline figures, what ``--json`` prints: status, reason, exit code,
    the summary's path, :data:`JSON_PARAMS` and :data:`JSON_RESULTS` (None where absent)."""
    params, results = _section(summary, "params"), _section(summary, "results")
    status = summary.get("status")
    if code is None:
        code = schema.EXIT_CODES.get(status) if isinstance(status, str) else None
    return {"status": status, "reason": summary.get("reason"), "exit_code": code,
            "summary": str(path),
            **{k: params.get(k) for k in JSON_PARAMS},
            **{k: results.get(k) for k in JSON_RESULTS}}
