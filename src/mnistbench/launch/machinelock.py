"""The machine-wide lock file that keeps timed cells of every study on one machine apart.

The workflow runs each timed cell under ``flock`` on one file, by default
``mnistbench-timed-cell.lock`` in the system's temporary folder, so that two studies (other
working directories, other users) never time cells at the same time. That folder is usually
world-writable (sticky ``/tmp``), so the file is handled as hostile ground:

- it is created only with ``O_CREAT | O_EXCL | O_NOFOLLOW``: a planted symlink, dangling or
  not, is never followed, and nothing is created anywhere else;
- only a file created by this call is ``chmod``-ed (to 0644: ``flock`` needs only a read-only
  descriptor, so nobody needs write permission on it);
- an existing path must be a regular file (``lstat``: not a symlink, folder, FIFO or device)
  with one link, readable by this user; anything else is refused with one paragraph naming
  the path and the fix.

Who can block whom: every user who can read the file can hold its lock and so make every
study on the machine wait (the workflow says so in the cell's log while it waits); the
file's owner can also make it unreadable, which stops other users' studies with the error
below until the owner or root removes it. A user who does not want to share the lock sets
config ``lock_file`` to a path of their own, and then their cells are no longer kept apart
from other users' cells. Root can always remove the file.

No torch, no Snakemake: each timed job (:mod:`mnistbench.launch.timedjob`: ``mnistbench
run-cell`` and ``run-peak``) and ``mnistbench lock-file PATH`` call :func:`prepare` before
they take the lock, and the workflow calls :func:`check` (no side effect, so a dry run creates
nothing) when it parses.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

#: The lock file's name in the system's temporary folder, when none is configured.
DEFAULT_NAME = "mnistbench-timed-cell.lock"
#: Mode of a lock file this module creates: readable by all (``flock`` needs no more).
MODE = 0o644


class LockFileError(Exception):
    """The lock file cannot be used safely; the message names the path and the fix."""


def default_path() -> Path:
    """``mnistbench-timed-cell.lock`` in the system's temporary folder ($TMPDIR or /tmp)."""
    return Path(tempfile.gettempdir(), DEFAULT_NAME)


def resolve(configured: str | os.PathLike[str] | None) -> Path:
    """The lock file's path: the configured one, else :func:`default_path`."""
    return Path(configured) if configured and str(configured).strip() else default_path()


def _owner(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _fix(path: Path) -> str:
    return (
        f"Remove {path} if you trust it not to be in use (its owner or root can), or give "
        "another lock file (config key lock_file, a path in a folder only you can write; "
        "cells of studies with different lock files are then not kept apart)."
    )


def _check_existing(path: Path, info: os.stat_result) -> None:
    """Refuse anything but a plain, singly linked, readable regular file."""
    if stat.S_ISLNK(info.st_mode):
        raise LockFileError(
            f"lock file {path} is a symbolic link (to {os.readlink(path)!r}), owned by "
            f"{_owner(info.st_uid)}; mnistbench never follows a link there, since anyone "
            f"who can write to {path.parent} could point it at a file of yours. {_fix(path)}"
        )
    if not stat.S_ISREG(info.st_mode):
        raise LockFileError(
            f"lock file {path} exists but is not a regular file (mode "
            f"{stat.filemode(info.st_mode)}, owned by {_owner(info.st_uid)}). {_fix(path)}"
        )
    if info.st_nlink != 1:
        raise LockFileError(
            f"lock file {path} has {info.st_nlink} hard links (owned by "
            f"{_owner(info.st_uid)}): it may be another file linked there. {_fix(path)}"
        )
    if not os.access(path, os.R_OK, follow_symlinks=False):
        raise LockFileError(
            f"lock file {path} is owned by {_owner(info.st_uid)} and not readable by you "
            f"(mode {stat.filemode(info.st_mode)}), so this study cannot take the machine's "
            f"lock of timed cells. Ask its owner to make it readable (chmod 644). {_fix(path)}"
        )


def check(path: Path) -> None:
    """Check ``path`` without creating or changing anything: an existing file must be a safe
    lock file, and a missing one must have a folder to be created in."""
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        parent = path.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            raise LockFileError(
                f"lock file {path} cannot be created: {parent} is not a folder. Give a lock "
                "file in a folder (config key lock_file)."
            ) from None
        if not os.access(parent, os.W_OK | os.X_OK):
            raise LockFileError(
                f"lock file {path} cannot be created: {parent} is not writable by you. Give "
                "a lock file in a folder you can write (config key lock_file)."
            ) from None
        return
    except OSError as exc:
        raise LockFileError(
            f"lock file {path} cannot be inspected: {exc.strerror}. Give another lock file "
            "(config key lock_file)."
        ) from None
    _check_existing(path, info)


def prepare(path: Path) -> Path:
    """Create ``path`` safely (readable by every user) or check the existing file; return it.

    Raises :class:`LockFileError` for anything that is not a plain lock file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LockFileError(
            f"lock file {path} cannot be created: its folder {path.parent} cannot be made "
            f"({exc.strerror}). Give a lock file in a folder you can write (config key "
            "lock_file)."
        ) from None
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, MODE)
    except FileExistsError:  # includes a symlink, dangling or not: O_EXCL never follows one
        check(path)
        return path
    except OSError as exc:
        raise LockFileError(
            f"lock file {path} cannot be created: {exc.strerror}. Give a lock file in a "
            "folder you can write (config key lock_file)."
        ) from None
    try:
        os.fchmod(fd, MODE)  # the file this call just created: readable despite the umask
    finally:
        os.close(fd)
    return path
