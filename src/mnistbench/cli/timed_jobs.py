"""``mnistbench run-cell`` and ``run-peak``: the workflow's bench and peak rules, one command
each (the jobs themselves: :mod:`mnistbench.launch.timedjob`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mnistbench.core.devices import DEVICES, PRECISIONS
from mnistbench.core.options import path_of, threads_of
from mnistbench.launch import machinelock, timedjob


def _job_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lock", type=path_of, default=None,
                        help="the machine-wide lock file of timed cells, created or checked "
                        "safely (the workflow's config lock_file; default: "
                        f"{machinelock.DEFAULT_NAME} in the temporary folder)")
    parser.add_argument("--log", type=path_of, required=True,
                        help="the job's log, written afresh: the wait, the command's output, "
                        "how it ended")
    parser.add_argument("--launcher", default="mnistbench",
                        help="the command that starts mnistbench where the cells run, as one "
                        "shell-quoted string (the workflow's runner: `mnistbench docker run "
                        "... --` for runner docker)")


def register(sub: Any) -> None:
    """Add the ``run-cell`` and ``run-peak`` subcommands to the CLI's subparsers ``sub``."""
    cell = sub.add_parser(
        "run-cell", help="run one timed cell as the workflow's bench rule does",
        description="Take the machine-wide lock of timed cells (waiting, and saying so in the "
        "log, while another study holds it), run `LAUNCHER train TRAIN_ARGS --out OUT` "
        "without the thread variables Snakemake sets, its output into --log, and exit 0 for "
        "its results 0, 10 unavailable, 11 oom and 12 failed (each has written its summary), "
        "else with its exit code (128 + N after signal N) (mnistbench.launch.timedjob).",
        usage="mnistbench run-cell [-h] [--lock LOCK] --log LOG [--launcher LAUNCHER] "
        "[--workflow-digest DIGEST] --out OUT -- TRAIN_ARGS...")
    _job_arguments(cell)
    cell.add_argument("--workflow-digest", default=None, metavar="DIGEST",
                      help="the workflow's digest, recorded by the cell as env.workflow_digest "
                      "(the workflow passes its bench rule's)")
    cell.add_argument("--out", type=path_of, required=True,
                      help="the cell's folder (train --out)")
    cell.add_argument("train_args", nargs=argparse.REMAINDER, metavar="-- TRAIN_ARGS",
                      help="the cell's `mnistbench train` flags but --out")
    cell.set_defaults(func=cell_command)

    peak = sub.add_parser(
        "run-peak", help="measure one device's limit as the workflow's peak rule does",
        description="Take the machine-wide lock of timed cells, run `LAUNCHER peak --device "
        "DEVICE --precision P ... --threads N --out OUT` without the thread variables "
        "Snakemake sets, its output into --log, and exit 0 unless a signal ended it (then "
        "128 + N, and no record): a status other than 0 leaves a record of status failed "
        "where `peak` wrote none (mnistbench.launch.timedjob).")
    _job_arguments(peak)
    peak.add_argument("--device", choices=DEVICES, required=True, help="the device to measure")
    peak.add_argument("--precision", action="append", choices=PRECISIONS, default=None,
                      dest="precisions", metavar="PRECISION",
                      help="a precision to measure (repeatable; none: peak's own default)")
    peak.add_argument("--threads", type=threads_of, default=0,
                      help="torch intra-op CPU threads (0: torch's default)")
    peak.add_argument("--out", type=path_of, required=True, help="the record to write (JSON)")
    peak.set_defaults(func=peak_command)


def _lock_of(args: argparse.Namespace) -> Path:
    return machinelock.resolve(args.lock)


def _failed(command: str, exc: timedjob.TimedJobError) -> int:
    print(f"mnistbench {command}: error: {exc}", file=sys.stderr)
    return 1


def cell_command(args: argparse.Namespace) -> int:
    """``mnistbench run-cell``: the job's exit code."""
    train_args = list(args.train_args)
    if train_args[:1] == ["--"]:
        train_args = train_args[1:]
    try:
        return timedjob.run_cell(args.launcher, train_args, args.out, args.log,
                                 lock=_lock_of(args),
                                 workflow_digest=args.workflow_digest).exit_code
    except timedjob.TimedJobError as exc:
        return _failed("run-cell", exc)


def peak_command(args: argparse.Namespace) -> int:
    """``mnistbench run-peak``: the job's exit code."""
    try:
        return timedjob.run_peak(args.launcher, args.device, args.precisions or [],
                                 args.threads, args.out, args.log,
                                 lock=_lock_of(args)).exit_code
    except timedjob.TimedJobError as exc:
        return _failed("run-peak", exc)
