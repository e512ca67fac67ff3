"""The last step of ``mnistbench publish``: the staged publication, whole, takes the place of
the old one in ``report/``, ``data/`` first and ``index.html`` last, and a swap cut short (an
error or a signal at any point of it) puts the old one back (:func:`swap_in`). Nothing else
of the publication renames anything in ``report/``."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path

from mnistbench.core import atomic
from mnistbench.publish.checks import PublishError
from mnistbench.publish.layout import DATA_DIR, INDEX, README


def check_targets(report: Path) -> None:
    """Refuse a ``report/`` whose index.html or README.md is not a regular file, or whose
    data/ is not a folder: the publication renames over them, which would destroy them."""
    for name in (INDEX, README):
        atomic.check_target(report / name)
    data = report / DATA_DIR
    with contextlib.suppress(FileNotFoundError):
        mode = os.stat(data).st_mode
        if not stat.S_ISDIR(mode):
            raise PublishError(
                f"{data} is {atomic.file_kind(mode)}, not a folder: publishing replaces "
                f"{data} with the new tables' folder, which would destroy it. Move it out of "
                "the way (or pass --report another folder); nothing was written.")


def swap_in(report: Path, stage: Path) -> None:
    """Move the publication staged in ``stage`` (its ``data/`` with the manifest, its
    ``index.html`` and ``README.md``) into ``report``: data first, index.html last, so that
    until then ``report`` is the old publication, whole. The old files go to ``stage``
    (removed with it). Cut short, the old publication is put back and the error raised
    again."""
    for name in (README, INDEX):
        if (report / name).is_file():
            shutil.copy2(report / name, stage / f"old-{name}")
    check_targets(report)
    data = report / DATA_DIR
    had_data = data.exists() or data.is_symlink()
    try:
        if had_data:
            os.rename(data, stage / "old-data")
        os.rename(stage / DATA_DIR, data)
        for name in (README, INDEX):
            os.replace(stage / name, report / name)
    except BaseException:
        _put_back(report, stage, had_data)
        raise


def _put_back(report: Path, stage: Path, had_data: bool) -> None:
    """Undo a swap cut short (an error or a signal at any point of it), judging by what is
    where: the old data/, README.md and index.html back in place, the new ones gone."""
    data, old_data, staged = report / DATA_DIR, stage / "old-data", stage / DATA_DIR
    with contextlib.suppress(OSError):
        if old_data.exists() or old_data.is_symlink():
            if data.exists():
                shutil.rmtree(data)
            os.rename(old_data, data)
        elif not had_data and not staged.exists() and data.exists():
            shutil.rmtree(data)  # the new data went in where there was none
    for name in (README, INDEX):
        if (stage / name).exists():
            continue  # not moved in yet
        backup = stage / f"old-{name}"
        with contextlib.suppress(OSError):
            if backup.is_file():
                os.replace(backup, report / name)
            else:
                (report / name).unlink()
