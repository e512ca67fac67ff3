"""The workflow's timed jobs, one command each: ``mnistbench run-cell`` is the bench rule,
``mnistbench run-peak`` the peak rule. Each takes the machine-wide lock of timed cells, runs
the cell's ``train`` (or the device's ``peak``) through the cell's launcher, and turns the
command's exit into the job's. scripts/gpu-study calls :func:`run_peak` too.

One timed job, in order:

1. its log is opened afresh (``append`` keeps what is there), and everything below goes in;
2. the lock file is created or checked safely (:func:`mnistbench.launch.machinelock.prepare`);
   one that is not a plain lock file stops the job: exit 1, the reason in the log;
3. the lock is taken with ``flock(2)``, the lock the ``flock`` command takes, on a read-only
   descriptor that the command inherits, so it is held while either process lives. A job
   that has to wait says so in the log first; a failed wait is status 1;
4. the command runs with the thread variables Snakemake sets removed
   (:data:`mnistbench.launch.plan.THREAD_VARIABLES`: config threads 0 means torch's own
   default) and, for a cell, the workflow's digest in ``$MNISTBENCH_WORKFLOW_DIGEST``;
5. its status, as a shell gives it (128 + N after signal N; 124 past ``timeout``), gives the
   job's exit code:

   - a cell: 0, and the results 10 unavailable, 11 oom and 12 failed (whose summary is
     written; the log names it) exit 0, so the study goes on; any other status is the job's
     exit code: a crash or a kill fails the job, and the next run redoes the cell;
   - a peak: 0 exits 0; a signal (128 or more) is the job's exit code (no record is written,
     so the next run measures again); any other status (10 and 12 with their record, a
     crash) exits 0, after writing a record of status failed where none was written
     (``mnistbench peak --record-failure``, which needs no torch).

The launcher (:func:`mnistbench.launch.plan.cell_launcher`: ``mnistbench``, or ``mnistbench
docker run ... --``) starts the command. Its leading ``mnistbench`` is this interpreter's
(``python -m mnistbench.console``, which hands ``train`` to the workflow's fork server), so
the job runs the same package under the project's .venv, a conda env (where ``mnistbench``
is a shell function) or an Apptainer image.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from mnistbench.core import atomic, schema
from mnistbench.core.envvars import WORKFLOW_DIGEST_VAR
from mnistbench.launch import machinelock, plan

#: A shell's status of a command ended by signal N is SIGNALLED + N.
SIGNALLED = 128
#: The status of a command stopped at its time limit (the ``timeout`` command's).
TIMED_OUT = 124
#: The status of a command that cannot be started (a shell's "command not found").
NOT_STARTED = 127
#: The status of a job whose lock could not be taken (as ``flock 9 || exit 1``).
LOCK_FAILED = 1
#: Seconds a command stopped at its time limit has between SIGTERM and SIGKILL.
KILL_GRACE_S = 15.0
#: Seconds the record of a failed peak may take, where the job has a time limit.
RECORD_FAILURE_S = 60.0
#: The statuses of ``train`` that are results (its summary says which): exit code -> status.
CELL_RESULTS = {code: status for status, code in schema.EXIT_CODES.items() if code}
#: The statuses of ``peak`` that are results (its record says which).
PEAK_RESULTS = {code: status for code, status in CELL_RESULTS.items()
                if status in schema.PEAK_STATUSES}

Flock = Callable[[int, int], None]


class TimedJobError(Exception):
    """The job cannot start: one paragraph naming the path and the fix."""


@dataclass(frozen=True)
class Ended:
    """How a timed job ended: its command's ``status`` as a shell gives it (128 + N after
    signal N, 124 past its time limit) and the job's ``exit_code``."""

    status: int
    exit_code: int


def results_text(results: Mapping[int, str]) -> str:
    """``10 unavailable, 12 failed``: the result codes and their statuses."""
    return ", ".join(f"{code} {status}" for code, status in results.items())


def command_of(launcher: str | Sequence[str], *args: str) -> list[str]:
    """``launcher`` (a shell-quoted string, or its words) followed by ``args``; a leading
    ``mnistbench`` is this interpreter's ``python -m mnistbench.console``."""
    words = shlex.split(launcher) if isinstance(launcher, str) else list(launcher)
    if not words:
        raise TimedJobError("the launcher is empty: give the command that starts mnistbench "
                            "(--launcher mnistbench, the default).")
    if words[0] == "mnistbench":
        words = [sys.executable, "-m", "mnistbench.console", *words[1:]]
    return [*words, *args]


def shell_status(returncode: int) -> int:
    """A process's return code as a shell's ``$?`` gives it: 128 + N after signal N."""
    return SIGNALLED - returncode if returncode < 0 else returncode


def say(log: IO[bytes], line: str) -> None:
    """Write ``line`` into the job's log, before anything its command writes later."""
    log.write(line.encode("utf-8", "replace") + b"\n")
    log.flush()


def waiting_message(lock: str | os.PathLike[str]) -> str:
    """What a job's log says while another job holds the lock of timed cells."""
    return (f"waiting for the machine's lock of timed cells, {os.fspath(lock)}: another study "
            "is timing a cell")


# ---------------------------------------------------------------------------------------------
# The lock and the command
def wait_for_lock(fd: int, lock: str | os.PathLike[str], log: IO[bytes],
                  flock: Flock = fcntl.flock) -> bool:
    """Take the exclusive lock on ``fd`` (the lock file ``lock``, open), saying in ``log``
    first when it has to wait; False when it cannot be taken (the reason in ``log``)."""
    try:
        flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        pass
    say(log, waiting_message(lock))
    try:
        flock(fd, fcntl.LOCK_EX)
    except OSError as exc:
        say(log, f"the lock of timed cells, {os.fspath(lock)}, cannot be taken: "
                 f"{exc.strerror or exc}")
        return False
    return True


@contextlib.contextmanager
def machine_lock(lock: str | os.PathLike[str], log: IO[bytes],
                 flock: Flock = fcntl.flock) -> Iterator[int | None]:
    """Hold the machine-wide lock of timed cells, the file ``lock`` (created or checked safely
    first): the read-only descriptor that holds it (for the command to inherit), or None when
    it cannot be opened or taken. Raises :class:`TimedJobError` (its reason in ``log`` too)
    for a lock file that is not a plain lock file."""
    try:
        machinelock.prepare(Path(lock))
    except machinelock.LockFileError as exc:
        say(log, f"error: {exc}")
        raise TimedJobError(str(exc)) from None
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        say(log, f"the lock of timed cells, {os.fspath(lock)}, cannot be opened: "
                 f"{exc.strerror or exc}")
        yield None
        return
    try:
        yield fd if wait_for_lock(fd, lock, log, flock) else None
    finally:
        os.close(fd)


def run_command(command: Sequence[str], log: IO[bytes], env: Mapping[str, str],
                pass_fds: Sequence[int] = (), timeout: float | None = None) -> int:
    """Run ``command`` with its output into ``log``; its status as a shell gives it, or
    :data:`TIMED_OUT` when it ran past ``timeout`` seconds (then stopped: SIGTERM, SIGKILL
    after :data:`KILL_GRACE_S`). A Ctrl-C reaches the command too (the terminal signals the
    whole group): its end decides, as a shell waiting for it does."""
    log.flush()
    try:
        proc = subprocess.Popen(list(command), stdout=log, stderr=subprocess.STDOUT,
                                env=dict(env), pass_fds=tuple(pass_fds))
    except OSError as exc:  # as a shell says of a command it cannot start
        say(log, f"{command[0]}: {exc.strerror or exc}")
        return NOT_STARTED
    deadline = None if timeout is None else time.monotonic() + max(timeout, 1.0)
    while True:
        try:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            return shell_status(proc.wait(timeout=left))
        except KeyboardInterrupt:
            continue
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            return TIMED_OUT


def run_timed(command: Sequence[str], log: IO[bytes], env: Mapping[str, str],
              lock: str | os.PathLike[str] | None, timeout: float | None = None,
              flock: Flock = fcntl.flock) -> int:
    """``command``'s status (:func:`run_command`), run under the lock of timed cells ``lock``
    (None: no lock); :data:`LOCK_FAILED` without running it when the lock cannot be taken."""
    if lock is None:
        return run_command(command, log, env, timeout=timeout)
    with machine_lock(lock, log, flock) as fd:
        if fd is None:
            return LOCK_FAILED
        return run_command(command, log, env, pass_fds=(fd,), timeout=timeout)


@contextlib.contextmanager
def open_log(path: str | os.PathLike[str], append: bool = False) -> Iterator[IO[bytes]]:
    """The job's log, emptied first unless ``append``; its folder is made. Every write, the
    command's too, goes to its end (``O_APPEND``), as the rules' ``>>`` did."""
    shown = os.fspath(path)
    if os.path.exists(shown) and not os.path.isfile(shown):  # /dev/full: "Invalid argument"
        raise TimedJobError(f"the log {shown} {atomic.not_there(shown)}: a job "
                            "empties its log first. Give --log the path of a regular file, or "
                            "of a new one.")
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "ab")  # noqa: SIM115 (closed below)
        if not append:
            handle.truncate(0)
    except OSError as exc:
        raise TimedJobError(f"the log {os.fspath(path)} cannot be written: "
                            f"{exc.strerror or exc}. Give a log in a folder you can write "
                            "(--log).") from None
    with handle:
        yield handle


# ---------------------------------------------------------------------------------------------
# The two jobs
def run_cell(launcher: str | Sequence[str], train_args: Sequence[str],
             out: str | os.PathLike[str], log: str | os.PathLike[str], *,
             lock: str | os.PathLike[str] | None, workflow_digest: str | None = None,
             env: Mapping[str, str] | None = None, timeout: float | None = None,
             append: bool = False, flock: Flock = fcntl.flock) -> Ended:
    """The bench rule's job: ``LAUNCHER train TRAIN_ARGS --out OUT`` under the lock, in
    ``env`` (default: this process's) without the thread variables and with
    ``workflow_digest`` (when given); the results 10-12 exit 0, any other status is the
    job's exit code (module docstring)."""
    environment = plan.cell_environment(os.environ if env is None else env)
    if workflow_digest is not None:
        environment[WORKFLOW_DIGEST_VAR] = workflow_digest
    command = command_of(launcher, "train", *train_args, "--out", os.fspath(out))
    with open_log(log, append) as handle:
        status = run_timed(command, handle, environment, lock, timeout, flock)
        if status in CELL_RESULTS:
            summary = os.path.join(os.fspath(out), schema.SUMMARY_FILE)
            say(handle, f"exit {status} ({results_text(CELL_RESULTS)}): see {summary}")
            return Ended(status, 0)
    return Ended(status, status)


def run_peak(launcher: str | Sequence[str], device: str, precisions: Sequence[str],
             threads: int, out: str | os.PathLike[str], log: str | os.PathLike[str], *,
             lock: str | os.PathLike[str] | None, env: Mapping[str, str] | None = None,
             timeout: float | None = None, append: bool = False,
             flock: Flock = fcntl.flock) -> Ended:
    """The peak rule's job: ``LAUNCHER peak --device D --precision P... --threads N --out
    OUT`` under the lock, in ``env`` (default: this process's) without the thread variables;
    a status that is neither 0 nor a signal exits 0, with a record of status failed written
    where the command wrote none (module docstring)."""
    environment = plan.cell_environment(os.environ if env is None else env)
    flags = [flag for precision in precisions for flag in ("--precision", precision)]
    command = command_of(launcher, "peak", "--device", device, *flags,
                         "--threads", str(threads), "--out", os.fspath(out))
    with open_log(log, append) as handle:
        status = run_timed(command, handle, environment, lock, timeout, flock)
        if status == 0 or status >= SIGNALLED:
            return Ended(status, status)
        say(handle, f"mnistbench peak exited {status} ({results_text(PEAK_RESULTS)}): the "
                    "study goes on without this limit")
        if os.path.exists(out):
            return Ended(status, 0)
        record = command_of("mnistbench", "peak", "--device", device, "--out", os.fspath(out),
                            "--record-failure",
                            f"mnistbench peak exited {status}; see {os.fspath(log)}")
        code = run_command(record, handle, environment,
                           timeout=None if timeout is None else RECORD_FAILURE_S)
    return Ended(status, code)
