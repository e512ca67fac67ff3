"""The ``mnistbench`` console script: ``train`` goes to the workflow's fork server when one is
set ($MNISTBENCH_FORKSERVER) and serves it; everything else, and a ``train`` the server does
not take, runs here through :func:`mnistbench.cli.main`.

This is the only module that imports both the launcher and the CLI, so neither imports the
other: a forked cell runs :func:`mnistbench.measure.entry.main` in the server's child
(:mod:`mnistbench.launch.forkserver`), never the CLI.
"""

from __future__ import annotations

import os
import sys

from mnistbench import cli
from mnistbench.core import cpuruntime
from mnistbench.core.envvars import FORKSERVER_SOCKET_VAR
from mnistbench.launch import forkserver


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mnistbench`` console script."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["train"]:
        # The allocator's library must be preloaded at process start: re-executes once if not.
        cpuruntime.ensure_allocator(argv[1:])
    if argv[:1] == ["train"] and os.environ.get(FORKSERVER_SOCKET_VAR):
        code = forkserver.delegate(argv)
        if code is not None:
            return code
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
