"""Tests for mnistbench.core.atomic: outputs appear whole or not at all."""

from __future__ import annotations

import csv
import errno
import json
import os

import pytest

from mnistbench.core import atomic


def test_write_text_json_csv(tmp_path) -> None:
    """Each writer leaves exactly the target file with the content."""
    atomic.write_text(tmp_path / "a.txt", "hé")
    atomic.write_json(tmp_path / "b.json", {"x": 1})
    atomic.write_csv(tmp_path / "c.csv", ["a", "b"], [{"a": 1, "b": None}])
    assert (tmp_path / "a.txt").read_text(encoding="utf-8") == "hé"
    assert json.loads((tmp_path / "b.json").read_text()) == {"x": 1}
    assert list(csv.reader((tmp_path / "c.csv").open())) == [["a", "b"], ["1", ""]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.json", "c.csv"]


def test_failure_keeps_the_old_file_and_no_temporary(tmp_path) -> None:
    """An error while writing leaves the previous content and no partial file."""
    target = tmp_path / "t.csv"
    target.write_text("old")
    with pytest.raises(ValueError):
        atomic.write_csv(target, ["a"], [{"a": 1}, {"zzz": 2}])
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"]


def test_files_get_the_umask_mode(tmp_path) -> None:
    """Outputs get the mode a plain open() gives (0666 less the umask), not mkstemp's 0600: in
    this process, and in fresh ones under umask 022 (0644: readable by all) and 077 (0600)."""
    import subprocess
    import sys

    path = atomic.write_text(tmp_path / "report.html", "x")
    (tmp_path / "plain.html").write_text("x")
    assert os.stat(path).st_mode & 0o777 == os.stat(tmp_path / "plain.html").st_mode & 0o777
    code = ("import os, sys; os.umask(int(sys.argv[1], 8)); from pathlib import Path; "
            "from mnistbench.core import atomic; d = Path(sys.argv[2]); "
            "p = atomic.write_json(d / 'a.json', {}); (d / 'plain').write_text('x'); "
            "print(oct(os.stat(p).st_mode & 0o777), oct(os.stat(d / 'plain').st_mode & 0o777))")
    for umask, mode in (("022", "0o644"), ("077", "0o600")):
        folder = tmp_path / umask
        folder.mkdir()
        out = subprocess.run([sys.executable, "-c", code, umask, str(folder)], check=True,
                             capture_output=True, text=True).stdout.split()
        assert out == [mode, mode], f"umask {umask}: atomic {out[0]}, plain open() {out[1]}"


def test_write_json_is_strict(tmp_path) -> None:
    """NaN and Infinity are not JSON: write_json refuses them and leaves no file."""
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError, match="JSON compliant"):
            atomic.write_json(tmp_path / "x.json", {"loss": bad})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("failing", [0, 1, 2])
def test_write_together_gives_all_files_or_none(tmp_path, failing) -> None:
    """A full disk while staging any one of three files leaves none of the new files and no
    staged file; an earlier version of a target is left as it was."""
    (tmp_path / "a.csv").write_text("stale")

    def writer(index: int):
        def write(path):
            path.write_text("part")  # a partial file, as a full disk leaves one
            if index == failing:
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return write

    targets = [tmp_path / n for n in ("a.csv", "b.csv", "summary.json")]
    with pytest.raises(OSError) as info:
        atomic.write_together([(t, writer(i)) for i, t in enumerate(targets)])
    assert info.value.errno == errno.ENOSPC
    assert [p.name for p in tmp_path.iterdir()] == ["a.csv"]
    assert (tmp_path / "a.csv").read_text() == "stale"


def test_write_together_renames_the_last_file_last(tmp_path, monkeypatch) -> None:
    """On success every target holds its content, and the last one appears last."""
    order = []
    real = os.replace
    monkeypatch.setattr(atomic.os, "replace", lambda a, b: (order.append(b), real(a, b)))
    names = ("epochs.csv", "resources.csv", "summary.json")
    atomic.write_together([(tmp_path / n, lambda p, n=n: atomic.write_text(p, n))
                           for n in names])
    placed = [os.path.basename(p) for p in order]  # staging renames hidden files first
    assert [n for n in placed if not n.startswith(".")] == list(names)
    assert placed.index("epochs.csv") > max(i for i, n in enumerate(placed)
                                            if n.startswith("."))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)
    assert (tmp_path / "summary.json").read_text() == "summary.json"


def test_make_dirs_undoes_only_what_it_made(tmp_path) -> None:
    """make_dirs returns the folders it created, and remove_dirs removes just those."""
    (tmp_path / "keep").mkdir()
    created = atomic.make_dirs(tmp_path / "keep" / "a" / "b")
    assert created == [tmp_path / "keep" / "a" / "b", tmp_path / "keep" / "a"]
    atomic.remove_dirs(created)
    assert [p.name for p in tmp_path.iterdir()] == ["keep"]
    assert not any((tmp_path / "keep").iterdir())
    (tmp_path / "file").write_text("x")
    assert atomic.blocking_file(tmp_path / "file" / "sub" / "deeper") == tmp_path / "file"
    assert atomic.blocking_file(tmp_path / "keep" / "new") is None


def special_file(tmp_path, kind: str):
    """A file of ``kind`` at ``tmp_path/target``: fifo, socket, folder, device (a copy of
    /dev/null's device numbers, made with mknod: skipped without the privilege) or a
    symbolic link to such a device."""
    import socket
    import stat

    target = tmp_path / "target"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "folder":
        target.mkdir()
        (target / "inside").write_text("keep")
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(target))
        server.close()
    else:
        device = tmp_path / "device"
        try:
            os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("mknod needs CAP_MKNOD (run as root to make a device file)")
        if kind == "device":
            device.rename(target)
        else:
            target.symlink_to(device)
    return target


def snapshot(path) -> tuple:
    info = os.lstat(path)
    return info.st_mode, info.st_ino, info.st_rdev


@pytest.mark.parametrize("kind", ["fifo", "socket", "folder", "device", "link to a device"])
@pytest.mark.parametrize("writer", ["write_text", "atomic_open", "write_together"])
def test_a_target_that_is_not_a_regular_file_is_refused_and_kept(tmp_path, kind, writer):
    """A device (as root, `pack --out /dev/full` once turned /dev/full into a regular file),
    a FIFO, a socket, a folder or a link to a device is never renamed over: NotARegularFile
    names the path and what it is, nothing is written and no temporary file is left."""
    target = special_file(tmp_path, kind)
    before = snapshot(target)
    with pytest.raises(atomic.NotARegularFile) as info:
        if writer == "write_text":
            atomic.write_text(target, "x")
        elif writer == "atomic_open":
            with atomic.atomic_open(target, "wb") as handle:
                handle.write(b"x")
        else:
            atomic.write_together([(tmp_path / "first.csv", lambda p: atomic.write_text(p, "a")),
                                   (target, lambda p: atomic.write_text(p, "b"))])
    message = str(info.value)
    assert message.startswith(f"{target} is a") and "not a regular file" in message
    assert snapshot(target) == before
    leftovers = [p.name for p in tmp_path.iterdir() if p.name not in ("target", "device")]
    assert leftovers == []


def test_folder_error_of_a_special_target_says_what_it_is_and_the_fix(tmp_path):
    """The one-paragraph message names the target, its kind and the fix; a folder's says to
    name a file inside it."""
    fifo = special_file(tmp_path, "fifo")
    try:
        atomic.write_text(fifo, "x")
    except atomic.NotARegularFile as exc:
        text = atomic.folder_error(tmp_path, exc, "the archive", "--out")
    assert text == (f"cannot write the archive to {fifo}: it is a FIFO (named pipe), not a "
                    "regular file, and writing renames a new file over its target, which "
                    "would destroy it. Nothing was written: pass --out the path of a regular "
                    "file, or of a new one.")
    folder = tmp_path / "dir"
    folder.mkdir()
    with pytest.raises(atomic.NotARegularFile) as info:
        atomic.write_text(folder, "x")
    assert f"pass --out a file name inside that folder (e.g. {folder}/NAME)" in \
        atomic.folder_error(tmp_path, info.value, "the archive", "--out")


def test_a_regular_file_and_a_link_to_one_are_replaced(tmp_path):
    """Regular files are what the writers replace (a symbolic link to one is replaced by the
    new file; its target is left as it was)."""
    (tmp_path / "old.txt").write_text("old")
    atomic.write_text(tmp_path / "old.txt", "new")
    (tmp_path / "real.txt").write_text("real")
    (tmp_path / "link.txt").symlink_to(tmp_path / "real.txt")
    atomic.write_text(tmp_path / "link.txt", "new")
    assert (tmp_path / "old.txt").read_text() == "new"
    assert (tmp_path / "real.txt").read_text() == "real"
    assert not (tmp_path / "link.txt").is_symlink()


def test_a_target_under_a_file_names_that_file_not_errno_17(tmp_path, capsys):
    """Weak case of the sweep of issue 41: a target under a file (`env --collect-env
    notes.txt/env.txt`, `report --out notes.txt/x/index.html`) failed with "[Errno 17] File
    exists: 'notes.txt'", which names no fix. Now the file in the way is named, with the
    fix; nothing is written, the file is kept."""
    from mnistbench import cli

    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    for target in (notes / "env.txt", notes / "x" / "index.html"):
        with pytest.raises(atomic.UnderAFile) as info:
            atomic.write_text(target, "new")
        assert str(info.value) == (f"{notes} is a file, not a folder, so {target} cannot be "
                                   "written under it: move that file out of the way, or "
                                   "write elsewhere")
        assert isinstance(info.value, OSError) and info.value.blocking == str(notes)
    assert notes.read_text() == "mine" and list(tmp_path.iterdir()) == [notes]
    assert cli.main(["env", "--collect-env", str(notes / "env.txt")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Errno" not in err[0] and f"{notes} is a file" in err[0], err


def test_an_out_file_under_a_file_is_told_to_be_a_file_in_a_folder(tmp_path, capsys):
    """Weak case of the sweep of issue 41: `cost-model`, `peak` and `pack` with `--out
    notes.txt/x` said "Pass --out a folder", but their --out names a file. The fix now says
    a file in a folder; a folder option (`aggregate --out-dir`) keeps "a folder"."""
    from mnistbench import cli
    from tests.fakes import make_study

    make_study(tmp_path / "runs", gpu=False, devices=("cpu",), precisions=("fp32",),
               batch_sizes=(64,), repeats=1, convergence_epochs=1)
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    for argv, what in (
            (["cost-model", "--config-json", "{}", "--out", str(notes / "c.json")],
             "the cost model"),
            (["peak", "--out", str(notes / "p.json"), "--record-failure", "x"],
             "the measured limit"),
            (["pack", "alpha", "--runs", str(tmp_path / "runs"), "--out", str(notes / "a.tgz")],
             "the archive")):
        assert cli.main(argv) == 1, argv
        err = capsys.readouterr().err
        assert (f"cannot write {what} into {notes}: it is a file, not a folder. Pass --out "
                "the path of a file in a folder (or move that file out of the way).") in err, err
    assert atomic.folder_error(notes, OSError(17, "File exists"), "the archive", "--out",
                               names_a_file=True).endswith(
        "Pass --out the path of a file in a folder (or move that file out of the way).")
    assert atomic.folder_error(notes, OSError(17, "File exists"), "the tables",
                               "--out-dir").endswith(
        "Pass --out-dir a folder (or move that file out of the way).")
    assert notes.read_text() == "mine"
