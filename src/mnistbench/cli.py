"""The ``mnistbench`` command: a thin layer that parses and validates arguments, then hands off
to the package. Heavy modules (torch, pandas, matplotlib) are imported only by the subcommand
that needs them, so ``--help`` and ``fetch`` start fast.

Exit codes: 0 success; 1 bad input (data, results, config) or an output folder that cannot
be written (a file in the way, no permission, a full disk), each with a one-paragraph message
naming the path and the fix; 2 usage error; for ``train`` the cell statuses of
:data:`mnistbench.core.schema.EXIT_CODES` (10 unavailable, 11 oom, 12 failed); 130 after
SIGINT (Ctrl-C), 143 after SIGTERM and 129 after SIGHUP, which ``fetch``, ``aggregate``,
``report``, ``pack``, ``unpack``, ``publish``, ``peak`` and ``cost-model`` handle as an error:
their temporary files and staging folders are removed and the previous outputs stay whole.
``peak`` exits 10 when its device is absent; ``train`` and ``peak`` exit 1 with one paragraph
naming envs/pip/torch.txt where torch cannot be imported. Every ``--help`` shows each
option's default (:class:`mnistbench.core.options.DefaultsHelpFormatter`). The logic of a
subcommand lives below it (``table``: :mod:`mnistbench.results.table`; ``peak`` and
``cost-model``: :mod:`mnistbench.steps`; ``completion``: :mod:`mnistbench.completion`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sys
import threading
from pathlib import Path

from mnistbench import __version__
from mnistbench.core import untrusted
from mnistbench.core.envvars import MIRROR_VAR
from mnistbench.core.options import (
    TRAIN_DESCRIPTION,
    TRAIN_HELP,
    add_train_arguments,
    non_negative_int,
    positive_float,
    use_defaults_help,
)
from mnistbench.core.study import StudyError
from mnistbench.launch import estimate, timedjob  # the estimate, run-cell, run-peak commands


class CliError(Exception):
    """A user-facing error: printed as one paragraph, exit code 1."""


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the command is (as SIGINT raises KeyboardInterrupt),
    so that it runs the clean-up of an error: temporary files, ``.part`` files and staging
    folders removed, the previous outputs left whole."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def _signals_as_errors(enabled: bool):
    """While the block runs (in the main thread), the first SIGTERM or SIGHUP raises
    :class:`Terminated`; a later one is ignored, so that it cannot cut the clean-up short
    (SIGKILL still ends the process). The previous handlers come back after."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return
    raised: list[int] = []

    def terminate(signum, frame) -> None:
        if not raised:
            raised.append(signum)
            raise Terminated(signum)

    previous = {}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is signal.SIG_IGN:
            continue  # ignored on purpose (nohup): stays ignored
        with contextlib.suppress(OSError, ValueError):
            previous[signum] = signal.signal(signum, terminate)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _add_fetch(sub) -> None:
    p = sub.add_parser(
        "fetch",
        help="download and verify the four MNIST files",
        description="Fetch the four MNIST IDX files into DEST, trying mirrors in order, and "
        "verify their decompressed contents against the official MD5 digests. Files already "
        "present and verified are kept. Mirrors given with --mirror, then those in "
        f"${MIRROR_VAR} (separated by whitespace or commas), come before the defaults.",
    )
    p.add_argument("--dest", type=Path, default=Path("resources/mnist"),
                   help="destination folder (default: %(default)s)")
    p.add_argument("--mirror", action="append", default=[], metavar="DIR_OR_URL",
                   help="a mirror tried before the defaults: a directory, file:// or "
                   "http(s):// URL holding the files, gzipped or not (repeatable)")
    p.add_argument("--no-default-mirrors", action="store_true",
                   help="try only the mirrors given with --mirror / $" + MIRROR_VAR)
    p.add_argument("--retries", type=non_negative_int, default=2,
                   help="retries per mirror and file after the first try (default: %(default)s)")
    p.add_argument("--timeout", type=positive_float, default=30.0,
                   help="network timeout in seconds (default: %(default)s)")
    p.add_argument("--file", action="append", dest="files", metavar="NAME",
                   help="fetch only this file, e.g. train-images-idx3-ubyte (repeatable; "
                   "default: all four); the workflow fetches one file per job")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    p.set_defaults(func=_cmd_fetch)


def _cmd_fetch(args) -> int:
    from mnistbench.data import files
    from mnistbench.data import mnist as data

    mirrors = list(args.mirror)
    env_value = os.environ.get(MIRROR_VAR, "")
    mirrors += [m for m in env_value.replace(",", " ").split() if m]
    if not args.no_default_mirrors:
        mirrors += list(files.DEFAULT_MIRRORS)
    if not mirrors:
        raise CliError("no mirror to fetch from: give --mirror DIR_OR_URL or drop "
                       "--no-default-mirrors.")
    try:
        paths = data.fetch(args.dest, mirrors, retries=args.retries, timeout=args.timeout,
                           log=None if args.quiet else _stderr, names=args.files)
    except (data.DataError, ValueError) as exc:
        raise CliError(str(exc)) from None
    if not args.quiet:
        for path in paths:
            print(path)
    return 0


def _add_train(sub) -> None:
    p = sub.add_parser("train", help=TRAIN_HELP, description=TRAIN_DESCRIPTION)
    add_train_arguments(p).set_defaults(func=_cmd_train)


#: Where the pinned torch build is listed (the one home of the pin: envs/README.md).
TORCH_REQUIREMENTS = "envs/pip/torch.txt"


def torch_missing(exc: ModuleNotFoundError) -> str:
    """The paragraph of a ``train`` run where torch cannot be imported (``exc``): what is
    missing, for which Python, and how to install the pinned build."""
    return (f"torch cannot be imported in this Python ({sys.executable}): {exc}. `mnistbench "
            "train` and `mnistbench peak` run the timed process, which needs PyTorch at the "
            f"build the study pins; install it with `pip install -r {TORCH_REQUIREMENTS}` "
            "from the project's folder (scripts/setup does that, and the Docker images have "
            "it), then run the command again. The other commands (fetch, env, aggregate, "
            "table, report, pack, unpack, publish) work without torch.")


def _import_measure(name: str):
    """``mnistbench.measure.NAME``, or :class:`CliError` with :func:`torch_missing` when it
    cannot be imported for want of torch (or of a package of its build)."""
    import importlib

    try:
        return importlib.import_module(f"mnistbench.measure.{name}")
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in ("torch", "torchvision"):
            raise
        raise CliError(torch_missing(exc)) from None


def _cmd_train(args) -> int:
    entry = _import_measure("entry")
    from mnistbench.measure import train

    try:
        return entry.run(args)
    except train.OutputError as exc:
        raise CliError(str(exc)) from None


def _add_peak(sub) -> None:
    from mnistbench.core.devices import DEVICES, PRECISIONS

    p = sub.add_parser(
        "peak", help="measure the device's FLOP/s limit and write it as JSON",
        description="Time a dense matmul and the study's second convolution on DEVICE at "
        "each PRECISION, with the cell's threads, and write the measured GFLOP/s (with the "
        "shapes, calls and seconds) to --out atomically (mnistbench.measure.peak). As with "
        "`train`, a device that does not exist here writes a record of status unavailable "
        "and exits 10, a measurement that fails one of status failed and exits 12 "
        "(mnistbench.steps; the fields: docs/columns.md).")
    p.add_argument("--device", choices=DEVICES, default="cpu", help="the device to measure")
    p.add_argument("--precision", action="append", choices=PRECISIONS, default=None,
                   dest="precisions", metavar="PRECISION",
                   help=f"a precision to measure ({', '.join(PRECISIONS)}; repeatable; "
                   "default: fp32)")
    p.add_argument("--threads", type=non_negative_int, default=0,
                   help="torch intra-op CPU threads (0: torch's default)")
    p.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    p.add_argument("--record-failure", metavar="REASON", default=None,
                   help="measure nothing: write a record of status failed with REASON (the "
                   "workflow's peak rule does when the measuring process itself failed, so "
                   "the study goes on); needs no torch")
    p.set_defaults(func=_cmd_peak, parser=p)


def _cmd_peak(args) -> int:
    from mnistbench import steps
    from mnistbench.core import devices

    if args.record_failure is not None:
        try:
            print(steps.write_peak_status(args.out, args.device, "failed",
                                          args.record_failure))
        except steps.StepError as exc:
            raise CliError(str(exc)) from None
        return 0
    precisions = tuple(dict.fromkeys(args.precisions or ["fp32"]))
    for precision in precisions:
        if not devices.is_supported(args.device, precision):
            args.parser.error(f"precision {precision!r} is not supported on {args.device}; "
                              f"allowed on {args.device}: "
                              f"{', '.join(devices.SUPPORTED[args.device])}")
    # A fork server this workflow run started may still be importing torch on one core: the
    # measurement waits for that to end (its socket appears), as a train client does.
    from mnistbench.launch import forkserver

    forkserver.wait_while_starting()
    _import_measure("peak")
    from mnistbench.measure import backends

    try:
        print(steps.write_peak(args.out, args.device, precisions, args.threads))
    except backends.DeviceUnavailable as exc:
        print(f"mnistbench peak: {args.device} unavailable: {exc}", file=sys.stderr)
        return _peak_status(steps, args, "unavailable", str(exc))
    except steps.StepError as exc:
        raise CliError(str(exc)) from None
    except Exception as exc:  # a failed measurement is a result, as a failed cell is
        import traceback

        traceback.print_exc()
        return _peak_status(steps, args, "failed", f"{type(exc).__name__}: {exc}")
    return 0


def _peak_status(steps, args, status: str, reason: str) -> int:
    """Record that ``args.device``'s limit was not measured; the status's exit code."""
    from mnistbench.core import schema

    try:
        print(steps.write_peak_status(args.out, args.device, status, reason))
    except steps.StepError as exc:
        raise CliError(str(exc)) from None
    return schema.EXIT_CODES[status]


def _add_cost_model(sub) -> None:
    p = sub.add_parser(
        "cost-model", help="write the resolved cost model (every default filled) as JSON",
        description="Check a cost model (the workflow's config key cost) against "
        "cost_model.schema.yaml, fill every key left out with its default, and write it to "
        "--out atomically as the JSON that `mnistbench report --cost-model` reads "
        "(mnistbench.steps: what the workflow's cost_model job does).")
    p.add_argument("--config-json", required=True, metavar="JSON_OR_FILE",
                   help="the model as a JSON object ({...}), or a file holding it (JSON by a "
                   ".json suffix, else YAML); {} gives the built-in model")
    p.add_argument("--source", default=None,
                   help="what the model is called in error messages (default: the file, or "
                   "--config-json)")
    p.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    p.set_defaults(func=_cmd_cost_model)


def _cmd_cost_model(args) -> int:
    from mnistbench import steps

    try:
        print(steps.write_cost_model(args.out, args.config_json, source=args.source))
    except steps.StepError as exc:
        raise CliError(str(exc)) from None
    return 0


def _add_env(sub) -> None:
    p = sub.add_parser("env", help="print the environment capture as JSON",
                       description="Print what every summary records about the machine: "
                       "versions, CPU (model, ISA, bf16 path, oneDNN/MKL), GPU, OS, host and "
                       "git revision.")
    p.add_argument("--collect-env", type=Path, default=None, metavar="FILE",
                   help="instead, write torch's collect_env report to FILE (each cell writes "
                   "it once per environment as results/runs/ENV/collect_env.txt)")
    p.set_defaults(func=_cmd_env)


def _cmd_env(args) -> int:
    if args.collect_env is not None:
        from mnistbench.measure import hardware

        try:
            print(hardware.save_collect_env(args.collect_env))
        except OSError as exc:
            raise CliError(f"cannot write {args.collect_env}: {exc}") from None
        return 0
    from mnistbench.measure import sysinfo

    print(json.dumps(sysinfo.capture(), indent=2, sort_keys=True, allow_nan=False))
    return 0


def _add_env_name(sub) -> None:
    p = sub.add_parser("env-name", help="print the environment name results are filed under",
                       description="Print the name of this environment (a folder under "
                       "results/runs): $MNISTBENCH_ENV, else the host name and the runtime, "
                       "e.g. myhost-local or myhost-docker-mnistbench-cpu (mnistbench.core.study).")
    p.add_argument("--runtime", choices=["local", "docker", "apptainer"], default=None,
                   help="the runtime of the cells instead of this process's own")
    p.set_defaults(func=_cmd_env_name)


def _cmd_env_name(args) -> int:
    from mnistbench.core import study

    print(study.environment_name(runtime=args.runtime))
    return 0


def _add_lock_file(sub) -> None:
    p = sub.add_parser("lock-file", help="create or check the machine-wide lock file of timed "
                       "cells, safely", description="Create PATH as the lock file that keeps "
                       "timed cells of every study on this machine apart (readable by all, "
                       "never through a symlink), or check the existing one; exit 1 with the "
                       "reason and the fix when it is not a plain file "
                   "(mnistbench.launch.machinelock).")
    p.add_argument("path", type=Path, help="the lock file (the workflow's config lock_file)")
    p.set_defaults(func=_cmd_lock_file)


def _cmd_lock_file(args) -> int:
    from mnistbench.launch import machinelock

    try:
        machinelock.prepare(args.path)
    except machinelock.LockFileError as exc:
        raise CliError(str(exc)) from None
    return 0


def _add_aggregate(sub) -> None:
    p = sub.add_parser(
        "aggregate",
        help="merge cells into summary.csv, epochs.csv and resources.csv",
        description="Read every cell under RUNS (layout RUNS/{env}/{experiment}/{cell}/) and "
        "write tidy tables into --out-dir. Cells copied in from other machines merge. Each ok "
        "cell is set against its environment's measured limit of its device where there is "
        "one (RUNS/{env}/peak/{device}.json, `mnistbench peak`): summary.csv's limit_* "
        "columns.",
    )
    p.add_argument("runs", type=Path, nargs="?", default=Path("results/runs"),
                   help="runs folder (default: %(default)s)")
    p.add_argument("--out-dir", type=Path, default=Path("results"),
                   help="where the CSVs go (default: %(default)s)")
    p.set_defaults(func=_cmd_aggregate)


def _cmd_aggregate(args) -> int:
    from mnistbench.results import aggregate

    try:
        paths = aggregate.aggregate(args.runs, args.out_dir)
    except aggregate.AggregateError as exc:
        raise CliError(str(exc)) from None
    for path in paths:
        print(path)
    return 0


def _add_table(sub) -> None:
    p = sub.add_parser(
        "table", help="print the headline figures as a Markdown or CSV table, to paste",
        description="Print, from the aggregated summary.csv in RESULTS, one row per cell of "
        "the study but its repeat (experiment, device, precision, loader, batch size; the "
        "tip or width where a row has one) with each environment's medians over its ok runs "
        "of the epoch time, samples/s and final test accuracy, and its runs: every "
        "environment one after the other, or those named with --env side by side (two get "
        "the speed-up of the second over the first). Markdown, ready to paste into an issue, "
        "or CSV (mnistbench.results.table).")
    p.add_argument("--results", type=Path, default=Path("results"),
                   help="folder with the aggregated summary.csv (report/data for the "
                   "published study)")
    p.add_argument("--env", action="append", default=[], metavar="ENV", dest="envs",
                   help="an environment to show, side by side with the others named "
                   "(repeatable, in the order of the columns; default: every environment, "
                   "one after the other)")
    p.add_argument("--experiment", action="append", default=[], metavar="NAME",
                   dest="experiments",
                   help="only this experiment's rows (repeatable; default: every experiment)")
    p.add_argument("--format", choices=("markdown", "csv"), default="markdown",
                   help="Markdown (GitHub-flavoured) or CSV (plain numbers)")
    p.set_defaults(func=_cmd_table, parser=p)


def _cmd_table(args) -> int:
    from mnistbench.results import table

    twice = dict.fromkeys(e for e in args.envs if args.envs.count(e) > 1)
    if twice:
        args.parser.error(f"--env names {', '.join(twice)} more than once: each column "
                          "of environments shows one; name each environment once")
    try:
        text = table.render(args.results, envs=args.envs, experiments=args.experiments,
                            fmt=args.format)
    except table.TableError as exc:
        raise CliError(str(exc)) from None
    untrusted.write_stdout(text, "the table")
    return 0


def _add_report(sub) -> None:
    p = sub.add_parser(
        "report",
        help="render the self-contained HTML report",
        description="Render one self-contained HTML file (CSS inline, charts embedded) from "
        "the aggregated tables and a cost model.",
    )
    p.add_argument("--results", type=Path, default=Path("results"),
                   help="folder with summary.csv, epochs.csv, resources.csv "
                   "(default: %(default)s)")
    p.add_argument("--cost-model", type=Path, default=None,
                   help="YAML or JSON file with the cost model (prices, power, life); "
                   "default: the built-in model")
    p.add_argument("--out", type=Path, default=Path("results/report/index.html"),
                   help="the HTML file to write")
    p.add_argument("--figures-dir", type=Path, default=None,
                   help="also write each chart as a PNG file here")
    p.add_argument("--command", default=None,
                   help="the command that reproduces this report, shown in the methodology")
    p.set_defaults(func=_cmd_report)


def _cmd_report(args) -> int:
    from mnistbench.report import render as report

    try:
        path = report.render_report(args.results, args.out, cost_model_path=args.cost_model,
                                    figures_dir=args.figures_dir, command=args.command)
    except report.ReportError as exc:
        raise CliError(str(exc)) from None
    print(path)
    return 0


def _add_pack(sub) -> None:
    p = sub.add_parser(
        "pack", help="write one archive of an environment's results, to merge elsewhere",
        description="Write RUNS/ENV (every complete cell, and the environment's own files) "
        "into one .tar.gz with a manifest of sizes and SHA-256 checksums, checked as "
        "`mnistbench unpack` checks it before it is renamed into place (docs/publish.md).")
    p.add_argument("env", nargs="?", default=None,
                   help="the environment folder under RUNS (default: this machine's, "
                   "`mnistbench env-name`)")
    p.add_argument("--runs", type=Path, default=Path("results/runs"),
                   help="runs folder (default: %(default)s)")
    p.add_argument("--out", type=Path, default=None,
                   help="the archive to write (default: ENV.mnistbench.tar.gz here)")
    p.set_defaults(func=_cmd_pack)


def _cmd_pack(args) -> int:
    from mnistbench.core import study
    from mnistbench.results import archive

    env = args.env or study.environment_name()
    try:
        path = archive.pack(args.runs, env, args.out, log=_stderr)
    except archive.ArchiveError as exc:
        raise CliError(str(exc)) from None
    print(path)
    return 0


def _add_unpack(sub) -> None:
    p = sub.add_parser(
        "unpack", aliases=["import"],
        help="check an archive of `mnistbench pack` and merge it into the runs folder",
        description="Check ARCHIVE (members only plain files under runs/ENV, no links or "
        "devices, sizes and SHA-256 as its manifest says, a schema version the aggregate "
        "reads, cells that aggregate) and merge its environment into RUNS/ENV. Nothing is "
        "changed when a check fails; an environment already there is replaced only with "
        "--replace. Then rerun the workflow or `mnistbench aggregate` (docs/publish.md).")
    p.add_argument("archive", type=Path, help="the .tar.gz `mnistbench pack` wrote")
    p.add_argument("--runs", type=Path, default=Path("results/runs"),
                   help="runs folder to merge into (default: %(default)s)")
    p.add_argument("--replace", action="store_true",
                   help="replace the environment when RUNS already holds it")
    p.add_argument("--check", action="store_true",
                   help="only check the archive (merges nothing: takes no --replace)")
    p.set_defaults(func=_cmd_unpack, parser=p)


def _cmd_unpack(args) -> int:
    from mnistbench.results import archive

    if args.check and args.replace:
        args.parser.error("--check only checks the archive and merges nothing: --replace "
                          "would have no effect; drop it or --check")

    try:
        if args.check:
            with args.archive.open("rb") as handle:
                result = archive.check_archive(handle, name=str(args.archive))
        else:
            result = archive.unpack(args.archive, args.runs, replace=args.replace)
    except OSError as exc:
        raise CliError(f"cannot read the archive {args.archive}: {exc.strerror or exc}."
                       ) from None
    except archive.ArchiveError as exc:
        raise CliError(str(exc)) from None
    print(archive.describe(result))
    return 0


def _add_publish(sub) -> None:
    p = sub.add_parser(
        "publish", help="copy the current results into report/ with a manifest (or check it)",
        description="Copy the tables and cost model of RESULTS into REPORT/data with "
        "manifest.json (environments, hardware, dates, git revision, cells per status, "
        "checksums), render REPORT/index.html from them and write REPORT/README.md. Refuses, "
        "naming the cells, when cells of the config's study are missing, failed or stale "
        "(measured by other code than this checkout's), unless allowed with a --reason that "
        "the manifest records. Run it from the project's folder (docs/publish.md).")
    p.add_argument("--results", type=Path, default=Path("results"),
                   help="results folder: runs/, the tables, cost_model.json "
                   "(default: %(default)s)")
    p.add_argument("--report", type=Path, default=Path("report"),
                   help="the publication folder (default: %(default)s)")
    p.add_argument("--configfile", type=Path, action="append", default=None,
                   help="the config(s) the study ran with, in Snakemake's order (repeatable; "
                   "default: config/config.yaml)")
    p.add_argument("--env-configfile", action="append", default=[], metavar="ENV=FILE",
                   type=_env_file,
                   help="environment ENV ran a study of its own: FILE was its --configfile, "
                   "loaded after the --configfile(s); its cells are checked against that "
                   "study (repeatable; e.g. the container's part of the matrix)")
    p.add_argument("--cost-model", type=Path, default=None,
                   help="cost model to publish (default: RESULTS/cost_model.json)")
    for kind, what in (("missing", "cells of the study that never ran or did not finish"),
                       ("failed", "cells with status failed"),
                       ("stale", "cells measured by other code than this checkout's")):
        p.add_argument(f"--allow-{kind}", action="store_true",
                       help=f"publish despite {what} (needs --reason)")
    p.add_argument("--reason", default="", help="why checks were waived (in the manifest)")
    p.add_argument("--keep-published", action="store_true",
                   help="keep the environments of REPORT's publication that RESULTS/runs "
                   "does not hold, as published (e.g. a lent machine's: their rows, and "
                   "their checks from that publication)")
    p.add_argument("--check", action="store_true",
                   help="instead, check the publication in REPORT: checksums, and that "
                   "rendering its data again gives its index.html but for the date (takes "
                   "only --report)")
    p.set_defaults(func=_cmd_publish, parser=p)


def _env_file(text: str) -> tuple[str, Path]:
    """``ENV=FILE`` of ``publish --env-configfile``."""
    env, sep, path = text.partition("=")
    if not sep or not env or not path:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not ENV=FILE (e.g. myhost-docker-cpu=config/container.yaml)")
    return env, Path(path)


def _publish_usage(args) -> None:
    """Contradictory flags of ``publish`` are usage errors (exit 2): ``--check`` publishes
    nothing, so no flag of a publication applies; ``--reason`` explains a waiver, so it needs
    an ``--allow-*`` flag."""
    allows = [f"--allow-{kind}" for kind in ("missing", "failed", "stale")
              if getattr(args, f"allow_{kind}")]
    if args.check:
        given = [*allows]
        given += [flag for flag, on in (
            ("--reason", bool(args.reason)), ("--cost-model", args.cost_model is not None),
            ("--configfile", args.configfile is not None),
            ("--env-configfile", bool(args.env_configfile)),
            ("--results", args.results != Path("results"))) if on]
        if given:
            args.parser.error(f"--check checks the publication in --report and publishes "
                              f"nothing: {', '.join(given)} would have no effect; drop "
                              f"{'them' if len(given) > 1 else 'it'} or --check")
    elif args.reason.strip() and not allows:
        args.parser.error("--reason says why checks were waived, but no --allow-missing, "
                          "--allow-failed or --allow-stale waives any: add the one it "
                          "explains, or drop --reason")


def _cmd_publish(args) -> int:
    from mnistbench import publish

    _publish_usage(args)
    if args.check:
        problems = publish.verify(args.report)
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            raise CliError(f"{len(problems)} problem(s) with the publication in {args.report} "
                           "(listed above); publish again (make publish).")
        print(f"{args.report}: every checksum matches, and its data renders to its "
              "index.html")
        return 0
    env_configfiles: dict[str, list[Path]] = {}
    for env, path in args.env_configfile:
        env_configfiles.setdefault(env, []).append(path)
    try:
        result = publish.publish(
            args.results, args.report, configfiles=args.configfile or [publish.DEFAULT_CONFIG],
            env_configfiles=env_configfiles, cost_model=args.cost_model,
            allow_missing=args.allow_missing, allow_failed=args.allow_failed,
            allow_stale=args.allow_stale, reason=args.reason,
            keep_published=args.keep_published, log=_stderr)
    except publish.PublishError as exc:
        raise CliError(str(exc)) from None
    cells = result.manifest["cells"]
    print(f"{result.report}: {cells['total']} cells of {len(result.manifest['environments'])} "
          f"environment(s); manifest {result.report / publish.DATA_DIR / publish.MANIFEST}")
    return 0


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _add_docker(sub) -> None:
    p = sub.add_parser(
        "docker",
        help="the workflow's docker runner: check the engine, build an image, run a cell",
        description="Run timed cells in the project's container images (what the workflow "
        "does with runner: docker; docs/docker.md). `check` asks the Docker engine for its "
        "version; `build` builds an image and records its ID; `run` runs one `mnistbench "
        "train` cell in a recorded image.",
    )
    verbs = p.add_subparsers(dest="docker_command", required=True, metavar="ACTION")
    option_help = ("one argument passed to docker %s as it is (repeatable; write "
                   "--docker-option=VALUE for values that start with -)")

    check = verbs.add_parser("check", help="print the Docker server version, or why none "
                             "answers (exit 1)")
    check.set_defaults(func=_cmd_docker_check)

    build = verbs.add_parser(
        "build", help="build an image and write its record (ID, tag, inputs) as JSON",
        description="docker build -f DOCKERFILE -t TAG CONTEXT, then write RECORD (image ID, "
        "tag, Dockerfile digest, build arguments, engine version, build time) atomically. "
        "IMAGE_NAME (the tag), REVISION (git revision) and CREATED (now) are passed as build "
        "arguments unless given. A failed build leaves no record.")
    build.add_argument("--dockerfile", type=Path, required=True,
                       help="the Dockerfile, e.g. docker/cpu.Dockerfile")
    build.add_argument("--tag", required=True, help="image name:tag")
    build.add_argument("--context", type=Path, default=Path("."),
                       help="build context: the project's root folder (default: %(default)s)")
    build.add_argument("--build-arg", type=_key_value, action="append", default=[],
                       metavar="KEY=VALUE", help="a build argument (repeatable)")
    build.add_argument("--docker-option", action="append", default=[], metavar="ARG",
                       help=option_help % "build")
    build.add_argument("--record", type=Path, required=True, help="JSON record to write")
    build.set_defaults(func=_cmd_docker_build)

    run = verbs.add_parser(
        "run", help="run one `mnistbench train` cell in a recorded image",
        description="docker run --rm the image of RECORD (by ID) with `mnistbench train ARGS`: "
        "--data mounted read-only, the results folder mounted at /work/results (the cell's "
        "files belong to that folder's owner), --network none, --gpus for cuda cells. Exits "
        "with the trainer's code (10 unavailable, 11 oom, 12 failed); a cuda cell whose "
        "container Docker cannot give a GPU records status unavailable.",
        usage="mnistbench docker run [-h] --record RECORD [--results DIR] [--shm-size SIZE] "
        "[--docker-option=ARG ...] -- train ARGS...")
    run.add_argument("--record", type=Path, required=True,
                     help="image record written by `mnistbench docker build`")
    run.add_argument("--results", type=Path, default=Path("results"), metavar="DIR",
                     help="host folder mounted at /work/results; the train command's --out "
                     "must lie in it (default: %(default)s)")
    run.add_argument("--shm-size", default="2g", metavar="SIZE",
                     help="shared memory of the container, e.g. 512m or 2g (DataLoader "
                     "workers pass batches through it; default: %(default)s)")
    run.add_argument("--docker-option", action="append", default=[], metavar="ARG",
                     help=option_help % "run")
    run.add_argument("train_args", nargs=argparse.REMAINDER, metavar="-- train ARGS",
                     help="the mnistbench train command of the cell")
    run.set_defaults(func=_cmd_docker_run)


def _cmd_docker_check(args) -> int:
    from mnistbench.launch import container

    try:
        print(container.check_engine())
    except container.ContainerError as exc:
        raise CliError(str(exc)) from None
    return 0


def _cmd_docker_build(args) -> int:
    from mnistbench.launch import container

    try:
        record = container.build_image(args.dockerfile, args.tag, dict(args.build_arg),
                                       args.docker_option, args.context, args.record)
    except container.ContainerError as exc:
        raise CliError(str(exc)) from None
    print(record["image_id"])
    return 0


def _cmd_docker_run(args) -> int:
    from mnistbench.launch import container

    train_args = list(args.train_args)
    if train_args[:1] == ["--"]:
        train_args = train_args[1:]
    if not re.fullmatch(r"[1-9][0-9]*[bkmg]?", args.shm_size):
        raise CliError(f"--shm-size {args.shm_size!r}: give a number of bytes with an "
                       "optional unit b, k, m or g, e.g. 2g.")
    try:
        return container.run_cell(args.record, train_args, args.results, args.shm_size,
                                  args.docker_option)
    except container.ContainerError as exc:
        raise CliError(str(exc)) from None


def _add_completion(sub) -> None:
    p = sub.add_parser(
        "completion", help="print the shell completion script (bash or zsh)",
        description="Print a completion script of the mnistbench command for SHELL, made "
        "from its own parser: subcommands, flags, the allowed values of a flag, file names "
        "where a flag takes a path. bash: `mnistbench completion bash > "
        "~/.local/share/bash-completion/completions/mnistbench`, or `source <(mnistbench "
        "completion bash)` in ~/.bashrc; zsh: `source <(mnistbench completion zsh)` in "
        "~/.zshrc after compinit.")
    p.add_argument("shell", choices=("bash", "zsh"), help="the shell")
    p.set_defaults(func=_cmd_completion)


def _cmd_completion(args) -> int:
    from mnistbench import completion

    untrusted.write_stdout(completion.script(build_parser(), args.shell), "the script")
    return 0


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="mnistbench",
        description="How much faster, and at what cost, does a GPU train a CNN than a CPU?",
    )
    parser.add_argument("--version", action="version", version=f"mnistbench {__version__}")
    # dest is not "command": `report --command` would overwrite it.
    sub = parser.add_subparsers(dest="subcommand", required=True, metavar="COMMAND")
    for add in (_add_fetch, _add_train, _add_peak, _add_env, _add_env_name, _add_lock_file,
                _add_aggregate, _add_table, _add_report, _add_pack, _add_unpack, _add_publish,
                _add_cost_model, _add_docker, _add_completion):
        add(sub)
    estimate.add_command(sub)
    timedjob.add_commands(sub)
    return use_defaults_help(parser)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: the process's) and run the subcommand in this process. The
    ``mnistbench`` console script (mnistbench.console) first offers ``train`` to a fork
    server; a forked cell comes back here."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    try:
        with _signals_as_errors(args.func in _CLEANS_UP):
            return args.func(args)
    except (CliError, StudyError, untrusted.StdoutError) as exc:  # StudyError: $MNISTBENCH_ENV
        print(f"mnistbench {args.subcommand}: error: {exc}", file=sys.stderr)
        return 1
    except Terminated as exc:
        print(f"mnistbench {args.subcommand}: interrupted by {exc.args[0]}; nothing "
              "half-written was left", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print(f"mnistbench {args.subcommand}: interrupted", file=sys.stderr)
        return 130


#: Subcommands that write files: SIGTERM and SIGHUP run their clean-up as an error does
#: (train keeps its own signal handling: the fork server and the trainer's time limit).
_CLEANS_UP = frozenset({_cmd_fetch, _cmd_aggregate, _cmd_report, _cmd_pack, _cmd_unpack,
                        _cmd_publish, _cmd_peak, _cmd_cost_model})


if __name__ == "__main__":
    sys.exit(main())
