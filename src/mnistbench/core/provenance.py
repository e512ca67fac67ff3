"""Where a result came from: the project's git revision (information: a checkout's state,
``-dirty`` when ``git status`` lists changes).

Standard library only (:mod:`mnistbench.core`).
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from pathlib import Path

from mnistbench.core.envvars import GIT_REVISION_VAR

#: Seconds each git command may take before the revision is treated as unknown.
GIT_TIMEOUT_S = 2.0


def _run_git(args: list[str], cwd: Path) -> str | None:
    """stdout of ``git ARGS`` in ``cwd``, stripped, or None on any failure or timeout."""
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", LC_ALL="C")  # never take the index lock
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S, env=env, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def git_revision_from_checkout() -> str | None:
    """The full commit hash of the git checkout holding this package's source, with ``-dirty``
    when ``git status --porcelain`` lists changes; None when the package is not in a git
    checkout (e.g. installed into site-packages) or git is missing. Cached per process."""
    here = Path(__file__).resolve().parent
    out = _run_git(["rev-parse", "--show-toplevel", "HEAD"], here)
    if not out or len(out.splitlines()) != 2:
        return None
    top, rev = out.splitlines()
    try:
        here.relative_to(Path(top).resolve())
    except ValueError:  # not our checkout
        return None
    if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", rev):
        return None
    status = _run_git(["status", "--porcelain"], Path(top))
    if status is None:
        return rev
    return f"{rev}-dirty" if status else rev


def git_revision() -> str:
    """The project's git revision: from the checkout, else ``$MNISTBENCH_GIT_REVISION``,
    else ``""``."""
    return git_revision_from_checkout() or os.environ.get(GIT_REVISION_VAR, "").strip()
