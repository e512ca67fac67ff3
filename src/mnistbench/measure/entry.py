"""The timed process's entry point: ``mnistbench train``'s arguments parsed, one cell run.

The CLI's ``train`` subcommand and the fork server's forked child both call :func:`main`, so a
forked cell runs exactly what a new process runs, and the launcher never imports the CLI.
Errors are one paragraph, as every ``mnistbench`` error: exit 1 for an output folder that
cannot be written, 2 for a usage error (argparse), and the cell statuses of
:data:`mnistbench.core.schema.EXIT_CODES` otherwise.
"""

from __future__ import annotations

import sys

from mnistbench.core import options
from mnistbench.measure import train


def run(args) -> int:
    """Run the cell of parsed ``train`` arguments ``args``; its exit code. An output folder
    that cannot be written raises :class:`mnistbench.measure.train.OutputError`."""
    return train.run_cell(train.TrainConfig.from_namespace(args))


def main(argv: list[str]) -> int:
    """Parse ``argv`` (the arguments after ``train``) and run the cell; its exit code."""
    args = options.train_parser().parse_args(argv)
    try:
        return run(args)
    except train.OutputError as exc:
        print(f"mnistbench train: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("mnistbench train: interrupted", file=sys.stderr)
        return 130
