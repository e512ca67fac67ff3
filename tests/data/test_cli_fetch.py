"""Tests of the ``mnistbench fetch`` subcommand: help, mirrors from flags and the environment,
exit codes and error messages. No test reaches the network: every run passes
``--no-default-mirrors``."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys

import pytest

from mnistbench import cli
from mnistbench.core.envvars import MIRROR_VAR
from mnistbench.data import files


@pytest.fixture(autouse=True)
def _no_env_mirror(monkeypatch):
    """Run without the caller's MNISTBENCH_MIRROR."""
    monkeypatch.delenv(MIRROR_VAR, raising=False)


def run_fetch(*args: str) -> int:
    """``mnistbench fetch ARGS --no-default-mirrors --retries 0`` in-process; its exit code."""
    return cli.main(["fetch", *args, "--no-default-mirrors", "--retries", "0"])


def test_fetch_help_lists_the_options(capsys):
    """`mnistbench fetch --help` exits 0 and documents the mirror options."""
    with pytest.raises(SystemExit) as info:
        cli.main(["fetch", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for option in ("--dest", "--mirror", "--no-default-mirrors", "--retries", "--timeout",
                   "MNISTBENCH_MIRROR"):
        assert option in out


def test_fetch_error_exits_1_with_one_paragraph_and_no_traceback(tmp_path):
    """The console command prints the DataError as one line and exits 1, without traceback."""
    empty = tmp_path / "empty"
    empty.mkdir()
    dest = tmp_path / "dest"
    env = {k: v for k, v in os.environ.items() if k != MIRROR_VAR}
    proc = subprocess.run(
        [sys.executable, "-m", "mnistbench.cli", "fetch", "--dest", str(dest), "--mirror",
         str(empty), "--no-default-mirrors", "--retries", "0"],
        capture_output=True, text=True, env=env, timeout=60, check=False)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines()
             if line.startswith("mnistbench fetch: error:")]
    assert len(lines) == 1
    assert f"could not get a verified copy of {files.FILES[0]}" in lines[0]
    assert f"{empty / files.FILES[0]}.gz: no such file" in lines[0]
    assert "--mirror DIR_OR_URL" in lines[0]
    assert list(dest.iterdir()) == []


def test_fetch_mirror_order_flag_then_environment(tmp_path, monkeypatch, capsys):
    """--mirror comes first, then the MNISTBENCH_MIRROR entries (comma or space separated)."""
    flag, env_a, env_b = (tmp_path / name for name in ("flag", "env-a", "env-b"))
    monkeypatch.setenv(MIRROR_VAR, f"{env_a}, {env_b}")
    assert run_fetch("--dest", str(tmp_path / "dest"), "--mirror", str(flag)) == 1
    err = capsys.readouterr().err
    positions = [err.find(f"no such directory {folder}") for folder in (flag, env_a, env_b)]
    assert -1 not in positions and positions == sorted(positions)


def test_fetch_checksum_mismatch_exits_1_and_keeps_nothing(tiny_mnist, tmp_path, capsys):
    """The CLI always checks the official digests, so a mirror of other data fails cleanly."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for name in files.FILES:
        raw = (tiny_mnist / name).read_bytes()
        (mirror / f"{name}.gz").write_bytes(gzip.compress(raw, compresslevel=1))
    dest = tmp_path / "dest"
    assert run_fetch("--dest", str(dest), "--mirror", str(mirror)) == 1
    err = capsys.readouterr().err
    assert "fails its checksum" in err and f"expected {files.MD5[files.FILES[0]]}" in err
    assert list(dest.iterdir()) == []


def test_fetch_without_any_mirror_exits_1(tmp_path, capsys):
    """--no-default-mirrors with no --mirror and no MNISTBENCH_MIRROR is a clear error."""
    assert run_fetch("--dest", str(tmp_path / "dest")) == 1
    assert "no mirror to fetch from: give --mirror DIR_OR_URL" in capsys.readouterr().err


def test_fetch_rejects_negative_retries(capsys):
    """--retries must be 0 or more (a usage error, exit 2)."""
    with pytest.raises(SystemExit) as info:
        cli.main(["fetch", "--retries", "-1"])
    assert info.value.code == 2
    assert "must be 0 or more" in capsys.readouterr().err


def test_fetch_from_environment_mirror_prints_the_paths(real_mnist_mirror, tmp_path,
                                                        monkeypatch, capsys):
    """MNISTBENCH_MIRROR alone fetches the real files; their paths go to stdout."""
    monkeypatch.setenv(MIRROR_VAR, real_mnist_mirror.as_uri())
    dest = tmp_path / "dest"
    assert run_fetch("--dest", str(dest)) == 0
    captured = capsys.readouterr()
    assert captured.out.split() == [str(dest / name) for name in files.FILES]
    assert f"verified (MD5 {files.MD5[files.FILES[0]]})" in captured.err
    assert sorted(p.name for p in dest.iterdir()) == sorted(files.FILES)


def test_fetch_quiet_prints_nothing_and_keeps_verified_files(real_mnist_mirror, tmp_path,
                                                             capsys):
    """--quiet prints nothing; a second run keeps the verified files without a mirror."""
    dest = tmp_path / "dest"
    assert run_fetch("--dest", str(dest), "--mirror", str(real_mnist_mirror), "--quiet") == 0
    assert capsys.readouterr() == ("", "")
    mtimes = [(dest / name).stat().st_mtime_ns for name in files.FILES]
    assert run_fetch("--dest", str(dest), "--mirror", str(tmp_path / "gone")) == 0
    assert [(dest / name).stat().st_mtime_ns for name in files.FILES] == mtimes
    assert "already present and verified" in capsys.readouterr().err


def test_fetch_dest_under_a_file_blames_the_file(tmp_path, capsys):
    """--dest file/sub names `file` (the file in the way), not file/sub, and exits 1."""
    blocker = tmp_path / "file"
    blocker.write_text("keep")
    assert run_fetch("--dest", str(blocker / "sub"), "--mirror", str(tmp_path)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mnistbench fetch: error: ")
    assert f"{blocker} is a file, not a folder" in err[0] and "Pass --dest a folder" in err[0]
    assert "exists but is not a directory" not in err[0]
    assert blocker.read_text() == "keep"


def fetch_in_thread(*args: str) -> int:
    """:func:`run_fetch` in a thread, failing the test (not hanging it) after 20 s: a FIFO
    opened for reading would block for ever."""
    import threading

    result: list[int] = []
    worker = threading.Thread(target=lambda: result.append(run_fetch(*args)), daemon=True)
    worker.start()
    worker.join(20)
    assert result, f"mnistbench fetch {' '.join(args)} hung"
    return result[0]


def place(path, kind: str) -> None:
    """Put a FIFO, a folder or a symbolic link loop at ``path``."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
        (path / "inside").write_text("keep")
    else:
        path.symlink_to(path.name)  # a link to itself: a loop


@pytest.mark.parametrize(("kind", "words"), [
    ("fifo", "is a FIFO (named pipe) where the MNIST file"),
    ("folder", "is a folder where the MNIST file"),
    ("loop", "is a symbolic link loop where the MNIST file"),
])
def test_fetch_names_what_is_where_a_file_should_be(tmp_path, capsys, kind, words):
    """A FIFO, a folder or a link loop in --dest in place of an MNIST file: fetch exits 1 at
    once, naming the path and what it is, and leaves it as it was (a FIFO is never opened,
    so fetch never hangs on it)."""
    dest = tmp_path / "dest"
    dest.mkdir()
    target = dest / files.FILES[0]
    place(target, kind)
    assert fetch_in_thread("--dest", str(dest), "--mirror", str(tmp_path)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{target} {words}" in err[0]
    assert "Move it out of the way" in err[0]
    assert os.path.lexists(target) and sorted(p.name for p in dest.iterdir()) == [target.name]


@pytest.mark.parametrize(("kind", "words"), [
    ("file", "is a regular file, not a directory"),
    ("fifo", "is a FIFO (named pipe), not a directory"),
    ("loop", "is a symbolic link loop, not a directory"),
])
def test_fetch_mirror_that_is_not_a_folder_says_what_it_is(tmp_path, capsys, kind, words):
    """`--mirror FILE` (or a FIFO, or a link loop) is named as what it is, not "no such
    directory"."""
    mirror = tmp_path / "mirror"
    if kind == "file":
        mirror.write_text("not a folder")
    else:
        place(mirror, kind)
    assert fetch_in_thread("--dest", str(tmp_path / "dest"), "--mirror", str(mirror)) == 1
    err = capsys.readouterr().err
    assert f"{mirror} {words} (a mirror is a folder holding the files" in err
    assert "no such directory" not in err


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_fetch_a_fifo_or_folder_in_the_mirror_is_named_and_never_blocks(tmp_path, capsys,
                                                                          kind):
    """A FIFO (or a folder) in the mirror named like an MNIST file is opened without blocking
    and reported as what it is."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    place(mirror / f"{files.FILES[0]}.gz", kind)
    assert fetch_in_thread("--dest", str(tmp_path / "dest"), "--mirror", str(mirror)) == 1
    what = "a FIFO (named pipe)" if kind == "fifo" else "a folder"
    assert f"{files.FILES[0]}.gz: cannot read it ({mirror / files.FILES[0]}.gz is {what}, " \
           "not a regular file)" in capsys.readouterr().err


def test_fetch_dest_that_is_a_fifo_says_so(tmp_path, capsys):
    """--dest naming a FIFO says it is one."""
    os.mkfifo(tmp_path / "dest")
    assert fetch_in_thread("--dest", str(tmp_path / "dest"), "--mirror", str(tmp_path)) == 1
    assert "exists but is not a directory (it is a FIFO (named pipe))" in \
        capsys.readouterr().err
