"""Atomic file writes: a temporary file in the same folder, flushed, then renamed over the
target, so that a reader (or Snakemake) never sees a half-written output."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
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
    """Write ``data`` as indented JSON to ``path`` atomically."""
    return write_text(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


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
