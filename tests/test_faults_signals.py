"""Interrupted steps leave nothing behind: SIGTERM, SIGHUP and Ctrl-C (SIGINT) during
``fetch``, ``aggregate``, ``pack`` and ``unpack`` run the clean-up of an error (temporary
files, ``.part`` files and ``.unpack-*`` staging folders removed, the previous outputs
whole), and a run killed outright (SIGKILL) has its leftovers removed by the next start.
(``publish`` is tried in tests/publish/test_publish.py, with its project.)"""

from __future__ import annotations

import gzip
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mnistbench import cli
from mnistbench.core import atomic
from mnistbench.data import files
from mnistbench.data import mnist as data
from mnistbench.results import aggregate, archive
from tests.fakes import make_study

ENV = "alpha"
SMALL = {"devices": ("cpu",), "precisions": ("fp32",), "loaders": ("resident",),
         "batch_sizes": (64,), "repeats": 1, "convergence_epochs": 2}


def tree(folder: Path) -> dict[str, bytes]:
    """Every entry under ``folder`` (hidden ones included), files with their bytes."""
    return {p.relative_to(folder).as_posix(): (p.read_bytes() if p.is_file() else b"/")
            for p in sorted(folder.rglob("*"))}


def interrupt_at(monkeypatch, module, name: str, how: str) -> list[int]:
    """Replace ``module.name`` by a function that interrupts the command the way ``how``
    says: a real SIGTERM or SIGHUP sent to this process (cli.main turns it into
    cli.Terminated where the command is), or Ctrl-C's KeyboardInterrupt. Returns a list that
    gets one item per call."""
    real = getattr(module, name)
    calls: list[int] = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if how == "SIGINT":
            raise KeyboardInterrupt
        os.kill(os.getpid(), getattr(signal, how))
        time.sleep(5)  # the handler raises before this returns
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, interrupted)
    return calls


CODES = {"SIGTERM": 143, "SIGHUP": 129, "SIGINT": 130}


@pytest.fixture(autouse=True)
def signals_not_ignored():
    """SIGTERM and SIGHUP at their default disposition while a test runs: under nohup (the
    suite started with SIGHUP ignored, which cli.main respects on purpose) the hang-up tests
    would not be interrupted at all."""
    previous = {sig: signal.signal(sig, signal.SIG_DFL) for sig in (signal.SIGTERM,
                                                                    signal.SIGHUP)}
    yield
    for sig, handler in previous.items():
        signal.signal(sig, handler)


@pytest.fixture()
def runs(tmp_path) -> Path:
    root = tmp_path / "runs"
    make_study(root, envs=(ENV,), **SMALL)
    (root / ENV / "collect_env.txt").write_text("collect_env\n")
    return root


@pytest.mark.parametrize("how", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_an_interrupted_pack_leaves_no_archive_and_no_temporary(tmp_path, runs, monkeypatch,
                                                                capsys, how):
    """Interrupted while the archive is checked (its temporary .part file written), pack exits
    128 + the signal with one line; neither the archive nor its temporary is left, and an
    older archive at --out is kept whole."""
    out = tmp_path / "out" / "alpha.tar.gz"
    out.parent.mkdir()
    out.write_bytes(b"the previous archive")
    calls = interrupt_at(monkeypatch, archive, "check_archive", how)
    assert cli.main(["pack", ENV, "--runs", str(runs), "--out", str(out)]) == CODES[how]
    assert calls == [1]
    assert tree(out.parent) == {"alpha.tar.gz": b"the previous archive"}
    assert "mnistbench pack: interrupted" in capsys.readouterr().err


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_an_interrupted_unpack_leaves_the_runs_folder_as_it_was(tmp_path, runs, monkeypatch,
                                                                how):
    """Interrupted after extracting into its staging folder, unpack removes the folder;
    results/runs holds what it held before, and nothing of the archive."""
    packed = archive.pack(runs, ENV, tmp_path / "alpha.tar.gz")
    target = tmp_path / "b" / "runs"
    make_study(target, envs=("beta",), **SMALL)
    before = tree(target)
    calls = interrupt_at(monkeypatch, archive, "_check_cells", how)
    assert cli.main(["unpack", str(packed), "--runs", str(target)]) == CODES[how]
    assert calls == [1]
    assert tree(target) == before


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_an_interrupted_replace_keeps_the_old_environment(tmp_path, runs, monkeypatch, how):
    """Interrupted in the middle of `unpack --replace`, the environment already there is
    kept as it was."""
    packed = archive.pack(runs, ENV, tmp_path / "alpha.tar.gz")
    target = tmp_path / "b" / "runs"
    archive.unpack(packed, target)
    (target / ENV / "sweep" / "extra").mkdir()
    before = tree(target)
    interrupt_at(monkeypatch, archive, "_check_cells", how)
    assert cli.main(["unpack", str(packed), "--runs", str(target), "--replace"]) == CODES[how]
    assert tree(target) == before


@pytest.mark.parametrize("after", [1, 2])
def test_a_signal_between_the_renames_of_replace_keeps_the_old_environment(
        tmp_path, runs, monkeypatch, after):
    """SIGTERM right after the old environment was moved aside (1), or right after the new
    one was moved in (2): the old environment is put back whole, nothing else is left."""
    packed = archive.pack(runs, ENV, tmp_path / "alpha.tar.gz")
    target = tmp_path / "b" / "runs"
    archive.unpack(packed, target)
    (target / ENV / "sweep" / "extra").mkdir()
    before = tree(target)
    real = os.rename
    calls: list[int] = []

    def rename(src, dst):
        real(src, dst)
        calls.append(1)
        if len(calls) == after:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)

    monkeypatch.setattr(archive.os, "rename", rename)
    assert cli.main(["unpack", str(packed), "--runs", str(target), "--replace"]) == 143
    monkeypatch.setattr(archive.os, "rename", real)
    assert tree(target) == before


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_an_interrupted_aggregate_keeps_the_last_tables(tmp_path, runs, monkeypatch, how):
    """Interrupted while the tables are staged, aggregate leaves the last tables byte for
    byte and no staged file."""
    out = tmp_path / "tables"
    aggregate.aggregate(runs, out)
    before = tree(out)
    interrupt_at(monkeypatch, aggregate, "write_rows", how)
    assert cli.main(["aggregate", str(runs), "--out-dir", str(out)]) == CODES[how]
    assert tree(out) == before


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_an_interrupted_fetch_leaves_no_part_file(tmp_path, tiny_mnist, monkeypatch, how):
    """Interrupted in the middle of a download (its .part file open), fetch leaves --dest
    as it was: no partial file, no temporary."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for name in files.FILES:
        (mirror / f"{name}.gz").write_bytes(gzip.compress((tiny_mnist / name).read_bytes()))
    dest = tmp_path / "dest"
    dest.mkdir()
    calls = interrupt_at(monkeypatch, data, "_check_stream", how)
    assert cli.main(["fetch", "--dest", str(dest), "--mirror", str(mirror),
                     "--no-default-mirrors", "--retries", "0", "--quiet"]) == CODES[how]
    assert calls == [1]
    assert list(dest.iterdir()) == []


def test_sigterm_from_outside_ends_an_unpack_cleanly(tmp_path, runs):
    """A real `mnistbench unpack` process sent SIGTERM (as Snakemake, a scheduler or `kill`
    do) while it checks the cells exits 143 with one line, leaving no staging folder."""
    packed = archive.pack(runs, ENV, tmp_path / "alpha.tar.gz")
    target = tmp_path / "b" / "runs"
    target.mkdir(parents=True)
    marker = tmp_path / "paused"
    driver = ("import sys, time\n"
              "from pathlib import Path\n"
              "from mnistbench import cli\n"
              "from mnistbench.results import archive\n"
              "real = archive._check_cells\n"
              "def paused(*a, **k):\n"
              "    Path(sys.argv[1]).touch()\n"
              "    time.sleep(60)\n"
              "    return real(*a, **k)\n"
              "archive._check_cells = paused\n"
              "sys.exit(cli.main(sys.argv[2:]))\n")
    proc = subprocess.Popen([sys.executable, "-c", driver, str(marker), "unpack", str(packed),
                             "--runs", str(target)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.02)
        assert [p.name for p in target.iterdir() if p.name.startswith(".unpack-")]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1].startswith("mnistbench unpack: interrupted by SIGTERM")
    assert list(target.iterdir()) == []


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_leftovers_of_killed_runs_are_removed_at_the_next_start(tmp_path, runs):
    """A staging folder of an unpack, and a temporary archive of a pack, that were killed
    outright (SIGKILL: no clean-up ran) are removed by the next unpack and pack; those of a
    process that still runs, and names without an owner, are kept."""
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        tag = atomic.owner_prefix("")  # this host and pid, "host-pid-"
        host = tag.split("-")[0]
        target = tmp_path / "b" / "runs"
        target.mkdir(parents=True)
        dead = target / f".unpack-{host}-{dead_pid()}-{ENV}-abc123"
        live = target / f".unpack-{host}-{sleeper.pid}-{ENV}-def456"
        other = target / ".unpack-notmine"
        for folder in (dead, live, other):
            (folder / "runs").mkdir(parents=True)
        packed = archive.pack(runs, ENV, tmp_path / "out" / "alpha.tar.gz")
        archive.unpack(packed, target)
        assert sorted(p.name for p in target.iterdir()) == sorted([ENV, live.name, other.name])
        part = packed.parent / f".{packed.name}.{host}-{dead_pid()}-xyz.part"
        part.write_bytes(b"half an archive")
        kept = packed.parent / f".{packed.name}.{host}-{sleeper.pid}-uvw.part"
        kept.write_bytes(b"being written")
        archive.pack(runs, ENV, packed)
        assert sorted(p.name for p in packed.parent.iterdir()) == sorted([packed.name,
                                                                          kept.name])
    finally:
        sleeper.kill()
        sleeper.wait()


def test_remove_dead_keeps_other_hosts_and_untagged_names(tmp_path):
    """Only this host's tags are judged: a folder tagged by another host (a shared disk) is
    never removed, whatever its pid."""
    pid = dead_pid()
    (tmp_path / f".stage-otherhost-{pid}-x").mkdir()
    (tmp_path / f".stage-{atomic.owner_prefix('').split('-')[0]}-{pid}-y").mkdir()
    (tmp_path / ".stage-plain").mkdir()
    removed = atomic.remove_dead(tmp_path, ".stage-")
    assert [p.name for p in removed] == [f".stage-{atomic.owner_prefix('').split('-')[0]}-"
                                         f"{pid}-y"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".stage-otherhost-{pid}-x",
                                                          ".stage-plain"]
    shutil.rmtree(tmp_path / ".stage-plain")


def test_a_second_sigterm_does_not_cut_the_clean_up_short(tmp_path, runs, monkeypatch):
    """SIGTERM again while the first one's clean-up runs (a scheduler that signals twice) is
    ignored: the staging folder is still removed."""
    packed = archive.pack(runs, ENV, tmp_path / "alpha.tar.gz")
    target = tmp_path / "b" / "runs"
    interrupt_at(monkeypatch, archive, "_check_cells", "SIGTERM")
    real = shutil.rmtree

    def rmtree(path, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # while cleaning up
        return real(path, *args, **kwargs)

    monkeypatch.setattr(archive.shutil, "rmtree", rmtree)
    assert cli.main(["unpack", str(packed), "--runs", str(target)]) == 143
    monkeypatch.setattr(archive.shutil, "rmtree", real)
    assert not target.exists() or list(target.iterdir()) == []


def test_an_ignored_sighup_stays_ignored(tmp_path, runs, monkeypatch):
    """Under nohup (SIGHUP ignored) a hang-up does not interrupt the command: only signals
    left at their default are turned into the clean-up."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        real = archive.check_archive
        sent: list[int] = []

        def hang_up(*args, **kwargs):
            sent.append(1)
            os.kill(os.getpid(), signal.SIGHUP)
            return real(*args, **kwargs)

        monkeypatch.setattr(archive, "check_archive", hang_up)
        out = tmp_path / "alpha.tar.gz"
        assert cli.main(["pack", ENV, "--runs", str(runs), "--out", str(out)]) == 0
        assert sent == [1] and out.is_file()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
