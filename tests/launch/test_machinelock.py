"""Tests of mnistbench.launch.machinelock, the machine-wide lock file of timed cells: it is created
only where nothing is (never through a planted symlink), never chmod-ed unless just created,
and anything but a plain readable file is refused with the path and the fix; the workflow
stops at a planted symlink naming config key lock_file and creates nothing. (The workflow's
check, mnistbench.launch.plan.timing_lock_file, is unit-tested in tests/launch/test_plan.py; that a
dry run creates no lock file, in tests/workflow/test_workflow.py's dry run.)"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mnistbench.launch import machinelock
from mnistbench.launch.machinelock import LockFileError, check, prepare
from tests.workflow.test_workflow import snakemake, tiny_config

MNISTBENCH = Path(sys.executable).parent / "mnistbench"


def test_prepare_creates_a_file_every_user_can_read_despite_the_umask(tmp_path):
    """A missing lock file is created as a regular file with mode 0644, even under umask 077."""
    path = tmp_path / "sub" / "cells.lock"
    old = os.umask(0o077)
    try:
        assert prepare(path) == path
    finally:
        os.umask(old)
    info = os.lstat(path)
    assert stat.S_ISREG(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == machinelock.MODE


def test_a_planted_dangling_symlink_is_refused_and_creates_nothing(tmp_path):
    """The issue's reproduction: a symlink to a missing file elsewhere is neither followed
    nor created; the error names the link, its target and the fix."""
    victim = tmp_path / "root-owned" / "file"
    victim.parent.mkdir()
    link = tmp_path / machinelock.DEFAULT_NAME
    link.symlink_to(victim)
    with pytest.raises(LockFileError) as error:
        prepare(link)
    assert not victim.exists()
    message = str(error.value)
    assert "symbolic link" in message and str(victim) in message and "lock_file" in message


def test_a_symlink_to_an_existing_file_is_refused_and_its_mode_kept(tmp_path):
    """A symlink to an existing file is refused and the target's mode is left as it was."""
    target = tmp_path / "secret"
    target.write_text("x")
    target.chmod(0o600)
    link = tmp_path / "cells.lock"
    link.symlink_to(target)
    with pytest.raises(LockFileError, match="symbolic link"):
        prepare(link)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_an_existing_lock_file_is_used_as_it_is(tmp_path):
    """A lock file that exists already is accepted and never chmod-ed (its mode stays 0600)."""
    path = tmp_path / "cells.lock"
    path.write_text("")
    path.chmod(0o600)
    prepare(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("kind", ["folder", "fifo", "hardlink"])
def test_anything_but_a_plain_file_is_refused(tmp_path, kind):
    """A folder, a FIFO or a file with a second hard link at the path is refused."""
    path = tmp_path / "cells.lock"
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        other = tmp_path / "other"
        other.write_text("")
        os.link(other, path)
    with pytest.raises(LockFileError, match=r"not a regular file|hard links"):
        prepare(path)


def test_an_unreadable_lock_file_names_its_owner_and_the_fix(tmp_path, monkeypatch):
    """A lock file this user cannot read (another user's, mode 0600) is refused, naming the
    owner and what to do (root reads anything, so the check is simulated)."""
    path = tmp_path / "cells.lock"
    path.write_text("")
    monkeypatch.setattr(machinelock.os, "access", lambda *args, **kwargs: False)
    with pytest.raises(LockFileError) as error:
        prepare(path)
    assert "not readable by you" in str(error.value) and "uid" in str(error.value)


def test_check_creates_nothing_and_refuses_a_folder_that_is_a_file(tmp_path):
    """check() leaves a missing lock file missing, and refuses one whose folder is a file."""
    check(tmp_path / "missing" / "cells.lock")
    assert not (tmp_path / "missing").exists()
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(LockFileError, match="is not a folder"):
        check(blocker / "sub" / "cells.lock")
    with pytest.raises(LockFileError, match="cannot be created"):
        prepare(blocker / "sub" / "cells.lock")


def test_cli_lock_file_refuses_a_planted_symlink_with_one_paragraph(tmp_path):
    """`mnistbench lock-file` exits 1 with the message and no traceback for a planted link."""
    link = tmp_path / "cells.lock"
    link.symlink_to(tmp_path / "elsewhere")
    proc = subprocess.run([str(MNISTBENCH), "lock-file", str(link)], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 1
    assert "symbolic link" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "elsewhere").exists()
    ok = tmp_path / "ok.lock"
    proc = subprocess.run([str(MNISTBENCH), "lock-file", str(ok)], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert ok.is_file()


@pytest.mark.slow
def test_workflow_with_a_planted_symlink_in_tmpdir_stops_and_creates_nothing(
        tmp_path, tiny_mnist):
    """TMPDIR holding a planted mnistbench-timed-cell.lock symlink: a real run stops naming
    config key lock_file, and the link's target is never created (a dry run takes the same
    check, when the DAG is built)."""
    shared_tmp = tmp_path / "tmp"
    shared_tmp.mkdir(mode=0o1777)
    victim = tmp_path / "victim"
    (shared_tmp / machinelock.DEFAULT_NAME).symlink_to(victim)
    workdir = tmp_path / "work"
    workdir.mkdir()
    config = tiny_config(tiny_mnist, workdir, lock_file="")
    env = dict(os.environ, TMPDIR=str(shared_tmp))
    proc = snakemake(workdir, config, "--cores", "2", env=env)
    assert proc.returncode != 0, proc.stdout
    assert "config key lock_file" in proc.stdout and "symbolic link" in proc.stdout
    assert "Traceback" not in proc.stdout
    assert not victim.exists()
    assert not (workdir / "results" / "runs").exists()
