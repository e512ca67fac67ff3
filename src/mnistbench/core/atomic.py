"""Atomic file writes: a temporary file in the same folder, flushed, then renamed over the
target, so that a reader (or Snakemake) never sees a half-written output. :func:`write_together`
extends this to a group of files that appear together or not at all, and :func:`make_dirs` /
:func:`remove_dirs` undo the folders a failed write created. Every JSON written is strict
(``allow_nan=False``): NaN and Infinity are not JSON."""

from __future__ import annotations

import contextlib
import csv
import errno
import json
import os
import secrets
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


@contextlib.contextmanager
def atomic_open(path: Path | str, mode: str = "w", **kwargs) -> Iterator[IO]:
    """Open a temporary sibling of ``path`` for writing; rename it to ``path`` on success,
    delete it on any error. ``mode`` is ``"w"`` or ``"wb"``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, mode, **kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
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
    pairs = [(Path(t), Path(t).with_name(f".{Path(t).name}.{token}.staged"), write)
             for t, write in files]
    placed: list[Path] = []
    try:
        for _, stage, write in pairs:
            write(stage)
        for target, stage, _ in pairs:
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


def folder_error(folder: Path | str, exc: OSError, what: str, option: str) -> str:
    """One sentence naming ``folder``, why ``what`` cannot be written there (``exc``) and the
    fix, phrased around the command-line ``option`` that chose the folder."""
    folder = Path(folder)
    blocking = blocking_file(folder)
    if blocking is not None:
        where = "it" if blocking == folder else blocking
        return (f"cannot write {what} into {folder}: {where} is a file, not a folder. Pass "
                f"{option} a folder (or move that file out of the way).")
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
