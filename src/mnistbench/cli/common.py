"""What more than one subcommand module needs: the error a command raises to exit 1 with one
paragraph (:class:`CliError`), SIGTERM and SIGHUP turned into an error's clean-up
(:class:`Terminated`, :func:`signals_as_errors`), stdout whose failed writes are one line
(:func:`guarded_stdout`), progress lines on stderr (:func:`to_stderr`),
and the timed process imported where torch may be missing (:func:`import_measure`).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any


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
def signals_as_errors(enabled: bool) -> Iterator[None]:
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

    previous: dict[signal.Signals, Any] = {}
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


class _GuardedStdout:
    """``sys.stdout`` while a subcommand runs: a failed write or flush (``> /dev/full``, a
    closed pipe) is :class:`~mnistbench.core.untrusted.StdoutError`, one line naming the fix,
    whichever ``print`` made it; everything else is the real stream's."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        #: the first failure, kept: argparse swallows the one of ``--help`` and ``--version``
        self.failed: OSError | None = None

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise self._failure(exc) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise self._failure(exc) from None

    def _failure(self, exc: OSError) -> OSError:
        from mnistbench.core import untrusted

        self.failed = self.failed or untrusted.stdout_error(exc)
        return self.failed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def guarded_stdout() -> Iterator[None]:
    """While the block runs, writes to stdout that fail raise
    :class:`~mnistbench.core.untrusted.StdoutError` (never a traceback of ``print``); stdout
    is flushed at the end of the block, inside it, so that a full disk is found there and
    not by Python's flush at exit (a traceback and exit 120). A ``SystemExit(0)`` of
    ``--help`` or ``--version`` whose text did not reach stdout becomes that error too."""
    stream = sys.stdout
    guard = _GuardedStdout(stream)
    sys.stdout = guard  # type: ignore[assignment]
    try:
        yield
        guard.flush()
    except SystemExit as exc:
        if exc.code in (0, None):  # --help, --version: argparse swallowed a failed write
            guard.flush()
            if guard.failed is not None:
                raise guard.failed from None
        raise
    finally:
        sys.stdout = stream


def to_stderr(message: str) -> None:
    """One progress line on stderr, flushed (the ``log`` of fetch, pack and publish)."""
    print(message, file=sys.stderr, flush=True)


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


def import_measure(name: str) -> ModuleType:
    """``mnistbench.measure.NAME``, or :class:`CliError` with :func:`torch_missing` when it
    cannot be imported for want of torch (or of a package of its build)."""
    import importlib

    try:
        return importlib.import_module(f"mnistbench.measure.{name}")
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in ("torch", "torchvision"):
            raise
        raise CliError(torch_missing(exc)) from None
