"""``mnistbench train``: one timed cell in this process (:mod:`mnistbench.measure.entry`;
its arguments: :func:`mnistbench.core.options.add_train_arguments`). It keeps its own signal
handling (the fork server's and the trainer's time limit)."""

from __future__ import annotations

from mnistbench.cli.common import CliError, import_measure
from mnistbench.core.options import TRAIN_DESCRIPTION, TRAIN_HELP, add_train_arguments


def register(sub) -> None:
    p = sub.add_parser("train", help=TRAIN_HELP, description=TRAIN_DESCRIPTION)
    add_train_arguments(p).set_defaults(func=command)


def command(args) -> int:
    entry = import_measure("entry")
    from mnistbench.measure import train

    try:
        return entry.run(args)
    except train.OutputError as exc:
        raise CliError(str(exc)) from None
