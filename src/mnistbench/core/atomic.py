"""Atomic file writes: a temporary file in the same folder, flushed, then renamed over the
target, so that a reader (or Snakemake) never sees a half-written output. :func:`write_together`
extends this to a group of files that appear together or not at all, and :func:`make_dirs` /
:func:`remove_dirs` undo the folders a failed write created. Every JSON written is strict
(``allow_nan=False``): NaN and Infinity are not JSON. Temporary files and staging folders
carry their owner's host and pid (:func:`owner_prefix`), and those of a run that died are
removed at the next start (:func:`remove_dead`).

A writer never destroys what it replaces: the rename would put a regular file in place of a
device (``--out /dev/full`` as root), a FIFO, a socket or a folder, so a target that exists
and is not a regular file (after following symbolic links) is refused with
:class:`NotARegularFile` before anything is written (:func:`check_target`)."""

from __future__ import annotations

import contextlib
import csv
import errno
import json
import os
import re
import secrets
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: Mode of every output file: what a plain ``open()`` would give (mkstemp's default is 0600,
#: which would hide reports and tables from a web server or other users).
FILE_MODE = 0o666 & ~_umask()


# ---------------------------------------------------------------------------------------------
# Temporary files and staging folders name their owner, so that the next start can remove
# those of a run that died (SIGKILL, power loss): ``{prefix}{host}-{pid}-{random}{suffix}``.
def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())[:40] or "host"


def owner_prefix(prefix: str) -> str:
    """``prefix`` followed by this process's tag (host and pid): the name start of a
    temporary file or staging folder that :func:`remove_dead` can attribute to it."""
    return f"{prefix}{_host()}-{os.getpid()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process (or no such pid to ask about): keep it
    return True


def remove_dead(parent: Path | str, prefix: str, suffix: str = "") -> list[Path]:
    """Remove the temporary files and staging folders in ``parent`` named
    ``{prefix}{host}-{pid}-...{suffix}`` (:func:`owner_prefix`) of a process of this host that
    no longer runs; return what was removed. Names without a tag, another host's, and those
    of running processes are left alone; errors are ignored (it is a clean-up)."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    host = _host()
    for entry in entries:
        name = entry.name
        if not name.startswith(prefix) or not name.endswith(suffix):
            continue
        parts = name[len(prefix):].split("-", 2)
        if len(parts) != 3 or parts[0] != host or not parts[1].isdigit():
            continue
        if int(parts[1]) == os.getpid() or _alive(int(parts[1])):
            continue
        path = Path(entry.path)
        with contextlib.suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(path)
    return removed


class NotARegularFile(OSError):
    """The target of a write exists but is not a regular file (a device, FIFO, socket or
    folder): renaming a new file over it would destroy it. ``filename`` is the target,
    ``kind`` what it is, in words."""

    def __init__(self, path: Path | str, kind: str) -> None:
        super().__init__(errno.EEXIST, f"{path} is {kind}, not a regular file: writing it "
                         "would rename a new file over it and destroy it", str(path))
        self.kind = kind

    def __str__(self) -> str:
        return str(self.strerror)


class UnderAFile(NotADirectoryError):
    """A write's target lies under a file (``--out notes.txt/report.html``): its folder can
    never be made. ``filename`` is the target, ``blocking`` the file in the way."""

    def __init__(self, path: Path | str, blocking: Path | str) -> None:
        super().__init__(errno.ENOTDIR, f"{blocking} is a file, not a folder, so {path} "
                         "cannot be written under it: move that file out of the way, or "
                         "write elsewhere", str(path))
        self.blocking = str(blocking)

    def __str__(self) -> str:
        return str(self.strerror)


def file_kind(mode: int) -> str:
    """What the file of ``mode`` (an ``os.stat`` ``st_mode``) is, in words: "a folder",
    "a FIFO (named pipe)", "a character device", ..."""
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symbolic link"),
                       (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "a special file"


def not_there(path: Path | str, wanted: str = "a regular file") -> str:
    """Why ``path`` is not ``wanted`` (``a regular file``, ``a folder``), in words for an
    error: ``does not exist``, ``is a folder, not a regular file``, ``is a symbolic link to
    nothing``; a folder named in place of a file was said not to exist."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return ("is a symbolic link to nothing" if os.path.islink(path)
                else "does not exist")
    except OSError as exc:
        return f"cannot be looked at ({exc.strerror})"
    return f"is {file_kind(mode)}, not {wanted}"


def check_target(path: Path | str) -> None:
    """Raise :class:`NotARegularFile` when ``path`` exists (following symbolic links) and is
    not a regular file; nothing there, or a path that cannot be looked at (the write then
    fails with its own error), passes."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        raise NotARegularFile(path, file_kind(mode))


@contextlib.contextmanager
def atomic_open(path: Path | str, mode: str = "w", **kwargs) -> Iterator[IO]:
    """Open a temporary sibling of ``path`` for writing; rename it to ``path`` on success,
    delete it on any error. ``mode`` is ``"w"`` or ``"wb"``. Raises :class:`NotARegularFile`
    (writing nothing) when ``path`` is a device, FIFO, socket or folder."""
    path = Path(path)
    check_target(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # "[Errno 17] File exists" named no fix
        blocking = blocking_file(path.parent)
        if blocking is None:
            raise
        raise UnderAFile(path, blocking) from None
    remove_dead(path.parent, f".{path.name}.", ".part")  # a killed writer's temporary
    fd, tmp = tempfile.mkstemp(prefix=owner_prefix(f".{path.name}."), suffix=".part",
                               dir=path.parent)
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, mode, **kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        check_target(path)  # again: it may have appeared while the file was written
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text(path: Path | str, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return Path(path)


def write_json(path: Path | str, data: object) -> Path:
    """Write ``data`` as indented, strict JSON to ``path`` atomically; a NaN or infinite float
    raises ValueError (they are not JSON) before anything is written."""
    text = json.dumps(data, indent=2, sort_keys=False, default=str, allow_nan=False)
    return write_text(path, text + "\n")


def write_csv(path: Path | str, columns: Sequence[str],
              rows: Iterable[Mapping[str, object]]) -> Path:
    """Write dict rows under a fixed header to ``path`` atomically; missing values are empty."""
    with atomic_open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns), extrasaction="raise",
                                restval="")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return Path(path)


def write_together(files: Sequence[tuple[Path | str, Callable[[Path], object]]]) -> list[Path]:
    """Write a group of files that appear together or not at all.

    ``files`` holds ``(target, write)`` pairs; ``write(stage)`` writes the whole file at
    ``stage``, a hidden sibling of ``target`` (e.g. ``lambda p: write_csv(p, ...)``). Every
    file is staged first; only then are they renamed into place, in the given order, so the
    last one (e.g. summary.json) appears last and its presence means the group is complete.
    On any error no new file is left: every staged file is removed, and so is every target
    already renamed into place (only a failing rename gets that far); targets not yet
    replaced keep their earlier content. The error is raised again."""
    token = secrets.token_hex(4)
    pairs = [(Path(t), Path(t).with_name(owner_prefix(f".{Path(t).name}.") + f"{token}.staged"),
              write) for t, write in files]
    for target, _, _ in pairs:
        check_target(target)
        remove_dead(target.parent, f".{target.name}.", ".staged")
    placed: list[Path] = []
    try:
        for _, stage, write in pairs:
            write(stage)
        for target, stage, _ in pairs:
            check_target(target)
            os.replace(stage, target)
            placed.append(target)
    except BaseException:
        for target, stage, _ in pairs:
            with contextlib.suppress(OSError):
                stage.unlink(missing_ok=True)
            if target in placed:
                with contextlib.suppress(OSError):
                    target.unlink(missing_ok=True)
        raise
    return [target for target, _, _ in pairs]


def blocking_file(path: Path | str) -> Path | None:
    """What keeps ``path`` from being a folder: ``path`` itself or the nearest of its parents
    that exists but is not a folder (None when there is no such file)."""
    for candidate in (Path(path), *Path(path).parents):
        if candidate.exists() or candidate.is_symlink():
            return None if candidate.is_dir() else candidate
    return None


def make_dirs(path: Path | str) -> list[Path]:
    """``mkdir -p path``; return the folders it created, deepest first, for
    :func:`remove_dirs` to undo. Raises what :meth:`Path.mkdir` raises, having removed the
    folders it made before the error."""
    path = Path(path)
    missing = []
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            break
        missing.append(candidate)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except BaseException:
        remove_dirs(missing)  # those made before the failure
        raise
    return missing


def remove_dirs(created: Iterable[Path]) -> None:
    """Remove the folders :func:`make_dirs` created, deepest first, where they are empty."""
    for folder in created:
        try:
            folder.rmdir()
        except OSError:
            return


def folder_error(folder: Path | str, exc: OSError, what: str, option: str,
                 names_a_file: bool = False) -> str:
    """One sentence naming ``folder``, why ``what`` cannot be written there (``exc``) and the
    fix, phrased around the command-line ``option`` that chose the folder (``names_a_file``:
    the option names a file in ``folder``, as ``--out`` of ``pack`` does, not the folder)."""
    folder = Path(folder)
    if isinstance(exc, NotARegularFile):
        fix = (f"pass {option} a file name inside that folder (e.g. {exc.filename}/NAME)"
               if exc.kind == "a folder" else
               f"pass {option} the path of a regular file, or of a new one")
        return (f"cannot write {what} to {exc.filename}: it is {exc.kind}, not a regular "
                f"file, and writing renames a new file over its target, which would destroy "
                f"it. Nothing was written: {fix}.")
    blocking = blocking_file(folder)
    if blocking is not None:
        where = "it" if blocking == folder else blocking
        wanted = "the path of a file in a folder" if names_a_file else "a folder"
        return (f"cannot write {what} into {folder}: {where} is a file, not a folder. Pass "
                f"{option} {wanted} (or move that file out of the way).")
    reason = exc.strerror or str(exc)
    if exc.filename and Path(exc.filename) != folder:
        reason += f" ({exc.filename})"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = f"Free space on that disk, or pass {option} a folder on another disk."
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = (f"Make the folder writable for this user, or pass {option} a folder this user "
               "can write.")
    else:
        fix = f"Check that folder and its disk, or pass {option} another folder."
    return f"cannot write {what} into {folder}: {reason}. {fix}"
