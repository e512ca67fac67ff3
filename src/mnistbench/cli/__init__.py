"""The ``mnistbench`` command: one module here per subcommand or group of subcommands.

The rule: a module parses and validates its subcommands' arguments, then hands off to the
package, where the logic lives; it imports heavy modules (torch, pandas, matplotlib) only in
the command that needs them, so ``--help`` and ``fetch`` start fast. Each module has
``register(sub)``, which adds its subcommands' parsers; :data:`COMMANDS` lists the modules in
the order of ``--help``. What more than one module needs is public in
:mod:`mnistbench.cli.common`; a module's private names stay in it.

Exit codes: 0 success; 1 bad input (data, results, config) or an output folder that cannot
be written (a file in the way, no permission, a full disk), each with a one-paragraph message
naming the path and the fix, or a stdout that cannot be written (one line,
:func:`mnistbench.cli.common.guarded_stdout`); 2 usage error; for ``train`` the cell statuses of
:data:`mnistbench.core.schema.EXIT_CODES` (10 unavailable, 11 oom, 12 failed); 130 after
SIGINT (Ctrl-C), 143 after SIGTERM and 129 after SIGHUP, which ``fetch``, ``aggregate``,
``report``, ``pack``, ``unpack``, ``publish``, ``peak`` and ``cost-model`` handle as an error
(their parsers' default ``cleans_up``): their temporary files and staging folders are removed
and the previous outputs stay whole. ``peak`` exits 10 when its device is absent; ``train``
and ``peak`` exit 1 with one paragraph naming envs/pip/torch.txt where torch cannot be
imported. Every ``--help`` shows each option's default
(:class:`mnistbench.core.options.DefaultsHelpFormatter`).
"""

from __future__ import annotations

import argparse
import sys

from mnistbench import __version__
from mnistbench.cli import (
    completion,
    cost_model,
    docker,
    env,
    estimate,
    fetch,
    lock_file,
    pack,
    peak,
    publish,
    report,
    tables,
    timed_jobs,
    train,
)
from mnistbench.cli.common import CliError, Terminated, guarded_stdout, signals_as_errors
from mnistbench.core import untrusted
from mnistbench.core.options import use_defaults_help
from mnistbench.core.study import StudyError

#: The subcommand modules, in the order of ``mnistbench --help``; ``register(sub)`` of each
#: adds its subcommands. A new subcommand: a module with ``register``, named here.
COMMANDS = (fetch, train, peak, env, lock_file, tables, report, pack, publish, cost_model,
            docker, completion, estimate, timed_jobs)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand. Every namespace it parses holds it as
    ``root_parser`` (``mnistbench completion`` prints its script)."""
    parser = argparse.ArgumentParser(
        prog="mnistbench",
        description="How much faster, and at what cost, does a GPU train a CNN than a CPU?",
    )
    parser.add_argument("--version", action="version", version=f"mnistbench {__version__}")
    # dest is not "command": `report --command` would overwrite it.
    sub = parser.add_subparsers(dest="subcommand", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.register(sub)
    parser.set_defaults(root_parser=parser, cleans_up=False)
    return use_defaults_help(parser)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: the process's) and run the subcommand in this process. The
    ``mnistbench`` console script (mnistbench.console) first offers ``train`` to a fork
    server; a forked cell runs :func:`mnistbench.measure.entry.main` instead."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        with guarded_stdout():  # --help or --version > /dev/full: one line, exit 1
            args = build_parser().parse_args(argv)
    except untrusted.StdoutError as exc:
        print(f"mnistbench: error: {exc}", file=sys.stderr)
        return 1
    try:
        # cleans_up: the subcommand writes files, so SIGTERM and SIGHUP run its clean-up as
        # an error does (train keeps its own signal handling: the fork server and the
        # trainer's time limit).
        # guarded_stdout: a print to a full disk or a closed pipe is one line, not a traceback
        with signals_as_errors(args.cleans_up), guarded_stdout():
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
