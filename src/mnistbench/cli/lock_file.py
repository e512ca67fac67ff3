"""``mnistbench lock-file``: create or check the machine-wide lock file of timed cells
(:func:`mnistbench.launch.machinelock.prepare`)."""

from __future__ import annotations

from mnistbench.cli.common import CliError
from mnistbench.core.options import path_of


def register(sub) -> None:
    p = sub.add_parser("lock-file", help="create or check the machine-wide lock file of timed "
                       "cells, safely", description="Create PATH as the lock file that keeps "
                       "timed cells of every study on this machine apart (readable by all, "
                       "never through a symlink), or check the existing one; exit 1 with the "
                       "reason and the fix when it is not a plain file "
                   "(mnistbench.launch.machinelock).")
    p.add_argument("path", type=path_of, help="the lock file (the workflow's config lock_file)")
    p.set_defaults(func=command)


def command(args) -> int:
    from mnistbench.launch import machinelock

    try:
        machinelock.prepare(args.path)
    except machinelock.LockFileError as exc:
        raise CliError(str(exc)) from None
    return 0
