"""Tests of ``mnistbench pack`` / ``unpack`` (mnistbench.results.archive): the round trip
between two machines' ``results/runs``, and archives that must be refused (traversal, links,
devices,
truncated or altered members, a newer schema, an environment already there, too much data),
each leaving the receiving runs folder as it was."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from mnistbench import cli
from mnistbench.core import schema
from mnistbench.results import aggregate, archive
from tests.fakes import make_study

ENV = "alpha"


def small_study(runs: Path, env: str = ENV, **kwargs) -> list[Path]:
    """A small CPU-only fake study of ``env`` with the environment's own collect_env.txt."""
    options = {"devices": ("cpu",), "precisions": ("fp32",), "loaders": ("resident",),
               "batch_sizes": (64,), "repeats": 1, "convergence_epochs": 2}
    options.update(kwargs)
    cells = make_study(runs, envs=(env,), **options)
    (runs / env / "collect_env.txt").write_text(f"collect_env of {env}\n", encoding="utf-8")
    return cells


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by its relative path, with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture()
def packed(tmp_path) -> Path:
    """An archive of a small study of environment alpha."""
    small_study(tmp_path / "a" / "runs")
    return archive.pack(tmp_path / "a" / "runs", ENV, tmp_path / "alpha.tar.gz")


def read_members(path: Path) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    """Every member of an archive with its content (None for non-files)."""
    with tarfile.open(path, "r:gz") as tar:
        return [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar]


def write_members(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]],
                  refresh_manifest: bool = True) -> Path:
    """Write ``members`` as a .tar.gz; with ``refresh_manifest``, the manifest (the first
    member) first lists exactly the file members with their true sizes and checksums, so the
    archive fails only on what the test put in it."""
    members = list(members)
    if refresh_manifest:
        info, raw = members[0]
        manifest = json.loads(raw)
        manifest["files"] = {m.name: {"bytes": len(data), "sha256": hashlib.sha256(data)
                                      .hexdigest()}
                             for m, data in members[1:] if m.isfile() and data is not None}
        members[0] = (info, json.dumps(manifest).encode())
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return path


def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes | None = b"x\n",
           linkname: str = "") -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, 0o644
    return info, (data if kind == tarfile.REGTYPE else None)


def assert_refused(path: Path, runs: Path, *words: str) -> str:
    """Unpacking ``path`` into ``runs`` fails naming ``words``, leaving ``runs`` as it was
    (no staging folder, no environment)."""
    before = tree(runs) if runs.exists() else None
    with pytest.raises(archive.ArchiveError) as info:
        archive.unpack(path, runs)
    message = str(info.value)
    for word in words:
        assert word in message, message
    after = tree(runs) if runs.exists() else None
    assert after == before
    if runs.exists():
        assert [p.name for p in runs.iterdir() if p.name.startswith(".")] == []
    return message


# --------------------------------------------------------------------------- round trip
def test_pack_then_unpack_merges_the_environment_beside_the_existing_one(tmp_path, packed):
    """Machine A's environment, packed and unpacked on machine B, lands byte for byte in B's
    runs folder beside B's own, and the aggregate then holds both environments."""
    runs_b = tmp_path / "b" / "runs"
    small_study(runs_b, env="beta")
    result = archive.unpack(packed, runs_b)
    assert (result.env, result.path, result.replaced) == (ENV, runs_b / ENV, False)
    assert result.cells == 2 and result.statuses == {"ok": 2}
    assert tree(runs_b / ENV) == tree(tmp_path / "a" / "runs" / ENV)
    assert sorted(p.name for p in runs_b.iterdir()) == ["alpha", "beta"]
    aggregate.aggregate(runs_b, tmp_path / "tables")
    rows = (tmp_path / "tables" / "summary.csv").read_text().splitlines()[1:]
    assert sorted({row.split(",")[0] for row in rows}) == ["alpha", "beta"]


def test_pack_as_another_name_refuses_a_summary_nested_deep_in_one_paragraph(tmp_path,
                                                                             capsys):
    """Weak case of the sweep of issue 41 (deep nesting): `pack --as NAME` renamed each
    cell's environment through json.loads, so a summary.json nested 5000 deep was a
    RecursionError traceback. It is now read bounded: one paragraph naming the file and
    the fix; no archive."""
    runs = tmp_path / "runs"
    small_study(runs)
    summary = next(runs.glob(f"{ENV}/*/*/summary.json"))
    summary.write_text("[" * 5000 + "]" * 5000)
    out = tmp_path / "gamma.tar.gz"
    assert cli.main(["pack", ENV, "--runs", str(runs), "--as", "gamma", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(summary) in err[0], err
    assert "nested deeper than 64 levels" in err[0] and not out.exists()


def test_pack_as_another_name_merges_beside_an_environment_of_the_same_name(tmp_path):
    """Two machines with one host name (so one default environment name): packed with --as,
    the first lands beside the second under the new name; each cell's params.env is the new
    name and nothing else of it changed; the manifest records the old name; the source is
    untouched."""
    runs_a, runs_b = tmp_path / "a" / "runs", tmp_path / "b" / "runs"
    small_study(runs_a)
    small_study(runs_b)  # the other machine's "alpha"
    before = tree(runs_a)
    out = tmp_path / "cli" / "gamma.tar.gz"
    assert cli.main(["pack", ENV, "--runs", str(runs_a), "--as", "gamma", "--out", str(out)]) \
        == 0
    assert tree(runs_a) == before
    manifest = json.loads(read_members(out)[0][1])
    assert (manifest["env"], manifest["renamed_from"]) == ("gamma", ENV)
    result = archive.unpack(out, runs_b)
    assert result.env == "gamma" and result.cells == 2
    assert sorted(p.name for p in runs_b.iterdir()) == ["alpha", "gamma"]
    old, new = tree(runs_a / ENV), tree(runs_b / "gamma")
    assert set(old) == set(new)
    for name, data in old.items():
        if name.endswith(schema.SUMMARY_FILE):
            was, now = json.loads(data), json.loads(new[name])
            assert now["params"].pop("env") == "gamma" and was["params"].pop("env") == ENV
            assert now == was
        else:
            assert new[name] == data, name
    aggregate.aggregate(runs_b, tmp_path / "tables")
    rows = (tmp_path / "tables" / "summary.csv").read_text().splitlines()[1:]
    assert sorted({row.split(",")[0] for row in rows}) == ["alpha", "gamma"]
    with pytest.raises(archive.ArchiveError, match="Give another name"):
        archive.pack(runs_a, ENV, tmp_path / "x.tar.gz", rename="../x")


def test_pack_writes_the_manifest_first_with_every_file_and_its_checksum(tmp_path, packed):
    """The archive's first member is the manifest; it lists every other member with its size
    and SHA-256, the environment, the cells per status and the schema version."""
    members = read_members(packed)
    assert members[0][0].name == archive.MANIFEST
    manifest = json.loads(members[0][1])
    assert manifest["format"] == archive.FORMAT and manifest["env"] == ENV
    assert manifest["schema_version"] == schema.SCHEMA_VERSION
    assert manifest["cells"] == 2 and manifest["statuses"] == {"ok": 2}
    files = {m.name: data for m, data in members[1:]}
    assert set(files) == set(manifest["files"])
    assert "runs/alpha/collect_env.txt" in files
    for name, data in files.items():
        assert manifest["files"][name] == {"bytes": len(data),
                                           "sha256": hashlib.sha256(data).hexdigest()}
    assert all(m.uid == 0 and m.uname == "" for m, _ in members)


def test_pack_leaves_out_incomplete_cells_and_hidden_files(tmp_path):
    """A cell folder without summary.json and hidden files are not packed."""
    runs = tmp_path / "runs"
    small_study(runs)
    (runs / ENV / "sweep" / "cpu-fp32-resident-b512-r0").mkdir()
    (runs / ENV / "sweep" / "cpu-fp32-resident-b512-r0" / "resources.csv").write_text("t_s\n")
    (runs / ENV / ".snakemake_timestamp").write_text("")
    logged: list[str] = []
    path = archive.pack(runs, ENV, tmp_path / "a.tar.gz", log=logged.append)
    names = [m.name for m, _ in read_members(path)]
    assert not any("b512" in n or ".snakemake" in n for n in names)
    assert len(logged) == 1 and "incomplete cell" in logged[0]


def test_pack_refuses_a_symlink_and_a_missing_environment(tmp_path):
    """A symbolic link in the environment and an unknown environment are refused, and no
    archive is left."""
    runs = tmp_path / "runs"
    small_study(runs)
    out = tmp_path / "a.tar.gz"
    with pytest.raises(archive.ArchiveError, match=r"no environment 'gamma'.*alpha"):
        archive.pack(runs, "gamma", out)
    (runs / ENV / "link.txt").symlink_to("/etc/hostname")
    with pytest.raises(archive.ArchiveError, match=r"link\.txt is a symbolic link"):
        archive.pack(runs, ENV, out)
    assert not out.exists()


# --------------------------------------------------------------------------- merge rules
def test_unpack_refuses_an_environment_already_there_and_replace_replaces_it(tmp_path,
                                                                             packed):
    """A second unpack of the same environment is refused without --replace (nothing
    changes); with it, the environment is exactly the archive's (a cell only the old copy had
    is gone)."""
    runs = tmp_path / "b" / "runs"
    archive.unpack(packed, runs)
    extra = runs / ENV / "sweep" / "cpu-fp32-resident-b999-r0"
    extra.mkdir()
    (extra / "note.txt").write_text("only here\n")
    assert_refused(packed, runs, "environment 'alpha' already exists", "--replace")
    result = archive.unpack(packed, runs, replace=True)
    assert result.replaced
    assert not extra.exists()
    assert tree(runs / ENV) == tree(tmp_path / "a" / "runs" / ENV)
    assert [p.name for p in runs.iterdir()] == [ENV]


def test_unpack_accepts_an_older_schema_version_as_the_aggregate_does(tmp_path):
    """Cells of schema version 1 (fields added later absent) merge, as the aggregate reads
    them; the result counts them by version."""
    runs = tmp_path / "a" / "runs"
    cells = small_study(runs)
    for cell in cells:
        path = cell / schema.SUMMARY_FILE
        data = json.loads(path.read_text())
        data["schema_version"] = 1
        for section in ("params", "env", "timing", "results"):
            data[section] = {k: v for k, v in data[section].items()
                             if schema.ADDED_IN.get(k, 1) <= 1}
        path.write_text(json.dumps(data))
    packed = archive.pack(runs, ENV, tmp_path / "old.tar.gz")
    result = archive.unpack(packed, tmp_path / "b" / "runs")
    assert result.schema_versions == {1: 2}


def test_unpack_refuses_a_newer_schema_version(tmp_path, packed):
    """An archive of cells of a schema version newer than this mnistbench reads is refused,
    saying to update; so is a cell of that version in an archive whose manifest hides it."""
    members = read_members(packed)
    manifest = json.loads(members[0][1])
    manifest["schema_version"] = schema.SCHEMA_VERSION + 1
    newer = [(members[0][0], json.dumps(manifest).encode()), *members[1:]]
    runs = tmp_path / "b" / "runs"
    assert_refused(write_members(tmp_path / "newer.tar.gz", newer), runs,
                   f"schema version {schema.SCHEMA_VERSION + 1}", "Update this checkout")
    cell = next(i for i, (m, _) in enumerate(members) if m.name.endswith("summary.json"))
    data = json.loads(members[cell][1])
    data["schema_version"] = schema.SCHEMA_VERSION + 1
    members[cell] = (members[cell][0], json.dumps(data).encode())
    message = assert_refused(write_members(tmp_path / "hidden.tar.gz", members), runs,
                             "do not aggregate", members[cell][0].name)
    assert str(tmp_path / "b") not in message  # the member, not the staging folder


# --------------------------------------------------------------------------- hostile archives
HOSTILE = {
    "traversal": (member("runs/alpha/../../evil.txt"), "climbs out of its folder with '..'"),
    "absolute": (member("/tmp/evil.txt"), "absolute path"),
    "symlink": (member("runs/alpha/sweep/cpu-x/summary.json", tarfile.SYMTYPE,
                       linkname="/etc/passwd"), "is a symbolic link"),
    "hardlink": (member("runs/alpha/sweep/cpu-x/epochs.csv", tarfile.LNKTYPE,
                        linkname="runs/alpha/collect_env.txt"), "is a hard link"),
    "device": (member("runs/alpha/sweep/cpu-x/dev", tarfile.CHRTYPE), "is a device file"),
    "block device": (member("runs/alpha/sda", tarfile.BLKTYPE), "is a device file"),
    "fifo": (member("runs/alpha/sweep/fifo", tarfile.FIFOTYPE), "is a FIFO"),
    "outside runs": (member("evil.txt"), "lies outside runs/ENV/"),
    "hidden name": (member("runs/alpha/.bashrc"), "is not a plain name"),
    "other environment": (member("runs/beta/sweep/cpu-x/summary.json"),
                          "lies outside runs/alpha/"),
    "too deep": (member("runs/alpha/sweep/cpu-x/sub/summary.json"), "is deeper than"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_unpack_refuses_a_hostile_member_naming_it(tmp_path, packed, case):
    """An archive with a traversal, an absolute name, a link, a device, a FIFO or a member
    outside its environment is refused with an error naming the member, and nothing lands in
    the runs folder (nor outside it)."""
    (info, data), problem = HOSTILE[case]
    hostile = write_members(tmp_path / "hostile.tar.gz", [*read_members(packed), (info, data)])
    runs = tmp_path / "b" / "runs"
    assert_refused(hostile, runs, repr(info.name), problem)
    assert not runs.exists()
    assert not (tmp_path / "evil.txt").exists()


NOT_RESULTS = {
    "a note in a cell": member("runs/alpha/sweep/cpu-x/notes.txt"),
    "a script beside the cells": member("runs/alpha/run.sh"),
    "a summary at the experiment level": member("runs/alpha/sweep/summary.json"),
    "collect_env.txt in a cell": member("runs/alpha/sweep/cpu-x/collect_env.txt"),
}


@pytest.mark.parametrize("case", sorted(NOT_RESULTS))
def test_unpack_refuses_a_file_that_is_not_a_result(tmp_path, packed, case):
    """Only the known files of a cell (summary.json, epochs.csv, resources.csv) and of an
    environment (collect_env.txt) travel; any other name, or a known name in the wrong
    folder, is refused naming the member and what an archive holds."""
    info, data = NOT_RESULTS[case]
    hostile = write_members(tmp_path / "x.tar.gz", [*read_members(packed), (info, data)])
    runs = tmp_path / "b" / "runs"
    assert_refused(hostile, runs, repr(info.name), "is not a file of the results",
                   "summary.json, epochs.csv, resources.csv")
    assert not runs.exists()


def test_unpack_refuses_a_folder_inside_a_cell(tmp_path, packed):
    """A folder below a cell's folder is deeper than any file of the results."""
    info, _ = member("runs/alpha/sweep/cpu-x/sub", tarfile.DIRTYPE)
    hostile = write_members(tmp_path / "d.tar.gz", [*read_members(packed), (info, None)])
    assert_refused(hostile, tmp_path / "runs", "'runs/alpha/sweep/cpu-x/sub'", "is deeper than")


def test_unpack_caps_a_summary_below_the_member_limit(tmp_path, packed):
    """summary.json and collect_env.txt are capped at Limits.small_bytes (4 MiB by default;
    the trainer's are a few KB), before their data is read."""
    runs = tmp_path / "runs"
    with pytest.raises(archive.ArchiveError) as info:
        archive.unpack(packed, runs, limits=archive.Limits(small_bytes=64))
    assert "more than the 64 a results file" in str(info.value)
    assert not runs.exists()
    assert archive.Limits().small_bytes == 4 << 20


def test_unpack_refuses_an_invalid_cell_naming_it(tmp_path):
    """An archive whose cell holds an accuracy of 140 % (its manifest matching) is refused
    naming the cell, the file, the field and the value: results enter only checked."""
    runs = tmp_path / "a" / "runs"
    cells = small_study(runs)
    good = archive.pack(runs, ENV, tmp_path / "good.tar.gz")
    members = read_members(good)
    index = next(i for i, (m, _) in enumerate(members) if m.name.endswith("summary.json"))
    data = json.loads(members[index][1])
    data["results"]["final_test_acc"] = 140.0
    members[index] = (members[index][0], json.dumps(data).encode())
    message = assert_refused(write_members(tmp_path / "bad.tar.gz", members),
                             tmp_path / "b" / "runs", "is invalid",
                             "summary.json results.final_test_acc is 140.0")
    assert members[index][0].name.rsplit("/", 1)[0] in message
    path = cells[0] / "summary.json"
    data = json.loads(path.read_text())
    data["timing"]["timed_s"] = -1
    path.write_text(json.dumps(data))
    with pytest.raises(archive.ArchiveError, match=r"is invalid: summary.json timing.timed_s"):
        archive.pack(runs, ENV, tmp_path / "again.tar.gz")
    assert not (tmp_path / "again.tar.gz").exists()


def test_unpack_refuses_a_manifest_with_a_non_json_number(tmp_path, packed):
    """A manifest holding NaN (which json.loads would take) is not JSON: refused."""
    members = read_members(packed)
    version = f'"archive_version": {archive.ARCHIVE_VERSION}'
    assert version in members[0][1].decode()
    text = members[0][1].decode().replace(version, '"archive_version": NaN')
    members[0] = (members[0][0], text.encode())
    assert_refused(write_members(tmp_path / "n.tar.gz", members, refresh_manifest=False),
                   tmp_path / "runs", "is not valid JSON", "archive_version is NaN")


def test_pack_leaves_out_files_that_are_not_results(tmp_path):
    """A note in a cell folder and a script beside the cells are left out, each named in a
    log line; the archive unpacks."""
    runs = tmp_path / "runs"
    small_study(runs)
    cell = next((runs / ENV / "sweep").iterdir())
    (cell / "notes.txt").write_text("mine\n")
    (runs / ENV / "run.sh").write_text("#!/bin/sh\n")
    logged: list[str] = []
    path = archive.pack(runs, ENV, tmp_path / "a.tar.gz", log=logged.append)
    names = [m.name for m, _ in read_members(path)]
    assert not any(n.endswith(("notes.txt", "run.sh")) for n in names)
    assert sorted(line.split(":")[0] for line in logged) == sorted(
        [f"leaving out {cell / 'notes.txt'}", f"leaving out {runs / ENV / 'run.sh'}"])
    archive.unpack(path, tmp_path / "b" / "runs")


def test_unpack_refuses_a_duplicate_member(tmp_path, packed):
    """A member name that appears twice (the second copy would replace the first) is
    refused."""
    members = read_members(packed)
    dup = next((m, d) for m, d in members if m.name.endswith("summary.json"))
    assert_refused(write_members(tmp_path / "dup.tar.gz", [*members, dup]),
                   tmp_path / "runs", repr(dup[0].name), "appears twice")


def test_unpack_refuses_a_truncated_archive_naming_the_member(tmp_path, packed):
    """An archive cut short is refused, naming where it ends; the runs folder is untouched."""
    runs = tmp_path / "b" / "runs"
    small_study(runs, env="beta")
    data = packed.read_bytes()
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(data[: len(data) // 2])
    assert_refused(cut, runs, "truncated", "member 'runs/alpha/")
    cut.write_bytes(data[:50])
    assert_refused(cut, runs, "truncated")


def test_unpack_refuses_a_tampered_member(tmp_path, packed):
    """A member whose content no longer matches the manifest's SHA-256 (same size) is
    refused, naming it; one whose size differs from the manifest too."""
    members = read_members(packed)
    index = next(i for i, (m, _) in enumerate(members) if m.name.endswith("epochs.csv"))
    info, data = members[index]
    altered = data.replace(b"1", b"2") if b"1" in data else b"2" + data[1:]
    assert altered != data and len(altered) == len(data)
    members[index] = (info, altered)
    tampered = write_members(tmp_path / "t.tar.gz", members, refresh_manifest=False)
    assert_refused(tampered, tmp_path / "runs", repr(info.name), "checksum")
    members[index] = (info, data + b"9,9\n")
    longer = write_members(tmp_path / "l.tar.gz", members, refresh_manifest=False)
    assert_refused(longer, tmp_path / "runs", repr(info.name), "the manifest says")


def test_unpack_refuses_members_the_manifest_does_not_list_and_listed_ones_absent(tmp_path,
                                                                                  packed):
    """A member added after packing, or a listed member taken out, is refused."""
    members = read_members(packed)
    added = [*members, member("runs/alpha/sweep/cpu-added/summary.json")]
    assert_refused(write_members(tmp_path / "a.tar.gz", added, refresh_manifest=False),
                   tmp_path / "runs", "'runs/alpha/sweep/cpu-added/summary.json'",
                   "not listed in the manifest")
    gone = members[-1][0].name
    assert_refused(write_members(tmp_path / "g.tar.gz", members[:-1], refresh_manifest=False),
                   tmp_path / "runs", repr(gone), "missing from the archive")


def test_unpack_refuses_an_archive_without_manifest_first(tmp_path, packed):
    """An ordinary tar of a runs folder (no manifest first) is refused."""
    members = read_members(packed)
    assert_refused(write_members(tmp_path / "m.tar.gz", [*members[1:], members[0]],
                                 refresh_manifest=False),
                   tmp_path / "runs", "not the manifest")


def test_unpack_limits_refuse_an_archive_too_large(tmp_path, packed):
    """An archive whose members add up to more than the limit (a zip bomb), or with one
    member above the per-member limit, is refused before its data is written."""
    runs = tmp_path / "runs"
    with pytest.raises(archive.ArchiveError, match="add up to more than 2000 bytes"):
        archive.unpack(packed, runs, limits=archive.Limits(total_bytes=2000))
    with pytest.raises(archive.ArchiveError,
                       match=r"more than the 100 a results file epochs\.csv may"):
        archive.unpack(packed, runs, limits=archive.Limits(member_bytes=100))
    with pytest.raises(archive.ArchiveError, match="more than 3 members"):
        archive.unpack(packed, runs, limits=archive.Limits(members=3))
    assert not runs.exists()


# --------------------------------------------------------------------------- command line
def test_cli_pack_unpack_and_import(tmp_path, capsys, monkeypatch):
    """`mnistbench pack` prints the archive; `unpack --check` checks without merging;
    `unpack` merges; `import` (its alias) refuses the same environment again with exit 1 and
    one error line."""
    runs_a = tmp_path / "a" / "runs"
    small_study(runs_a)
    out = tmp_path / "x.tar.gz"
    assert cli.main(["pack", ENV, "--runs", str(runs_a), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    runs_b = tmp_path / "b" / "runs"
    assert cli.main(["unpack", str(out), "--runs", str(runs_b), "--check"]) == 0
    assert "(checked only)" in capsys.readouterr().out and not runs_b.exists()
    assert cli.main(["unpack", str(out), "--runs", str(runs_b)]) == 0
    assert "added environment alpha: 2 cells" in capsys.readouterr().out
    assert cli.main(["import", str(out), "--runs", str(runs_b)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mnistbench import: error:")
    assert "already exists" in err[0]


def test_cli_pack_defaults_to_this_machines_environment(tmp_path, capsys, monkeypatch):
    """Without ENV, pack takes this machine's environment name and writes ENV.mnistbench.tar.gz
    in the current folder."""
    monkeypatch.setenv("MNISTBENCH_ENV", ENV)
    monkeypatch.chdir(tmp_path)
    small_study(tmp_path / "results" / "runs")
    assert cli.main(["pack"]) == 0
    assert (tmp_path / f"{ENV}{archive.SUFFIX}").is_file()


@pytest.mark.parametrize("kind", ["device", "fifo", "folder"])
def test_cli_pack_out_that_is_not_a_regular_file_is_refused_and_kept(tmp_path, capsys, kind):
    """`pack --out` a device (as root, /dev/full once became a regular file), a FIFO or a
    folder exits 1 with one paragraph naming it and the fix; it is left as it was and no
    temporary archive remains."""
    import os
    import stat

    runs = tmp_path / "runs"
    small_study(runs)
    out = tmp_path / "out"
    if kind == "device":
        try:
            os.mknod(out, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("mknod needs CAP_MKNOD")
    elif kind == "fifo":
        os.mkfifo(out)
    else:
        out.mkdir()
    before = os.lstat(out)
    assert cli.main(["pack", ENV, "--runs", str(runs), "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"mnistbench pack: error: cannot write the archive to {out}: it is a")
    fix = "a file name inside that folder" if kind == "folder" else "the path of a regular"
    assert fix in err[0]
    after = os.lstat(out)
    assert (after.st_mode, after.st_ino, after.st_rdev) == (before.st_mode, before.st_ino,
                                                            before.st_rdev)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "runs"]


def test_unpack_check_with_replace_is_a_usage_error(tmp_path, packed, capsys):
    """`unpack --check --replace` contradicts itself: exit 2 naming the flag, nothing read
    or written."""
    with pytest.raises(SystemExit) as info:
        cli.main(["unpack", str(packed), "--check", "--replace", "--runs",
                  str(tmp_path / "elsewhere")])
    assert info.value.code == 2
    assert ("--check only checks the archive and merges nothing: --replace would have no "
            "effect; drop it or --check") in capsys.readouterr().err
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize(("where", "text", "words"), [
    ("manifest", "[" * 5000 + "]" * 5000, "nested deeper than 64 levels"),
    ("summary", '{"a":' * 5000 + "1" + "}" * 5000, "nested deeper than 64 levels"),
    ("summary", json.dumps({"schema_version": schema.SCHEMA_VERSION, "status": "ok",
                            "reason": None, "params": {"device": "tpu"}}), "lacks"),
])
def test_unpack_refuses_deep_nesting_in_one_paragraph(tmp_path, packed, where, text, words):
    """Weak case: a manifest or a summary.json nested 5000 deep ended in a RecursionError
    traceback; now an ArchiveError naming the member, nothing unpacked."""
    members = read_members(packed)
    index = 0 if where == "manifest" else next(
        i for i, (m, _) in enumerate(members) if m.name.endswith("summary.json"))
    members[index] = (members[index][0], text.encode())
    runs = tmp_path / "b" / "runs"
    deep = write_members(tmp_path / "deep.tar.gz", members,
                         refresh_manifest=where == "summary")  # the sender's manifest matches
    message = assert_refused(deep, runs, words)
    assert "RecursionError" not in message
    assert not runs.exists()


def test_an_archive_that_is_a_fifo_or_a_folder_is_named_without_hanging(tmp_path):
    """Weak case of the sweep of issue 41: `unpack FIFO` and `unpack --check FIFO` blocked in
    open() until killed; a folder said "Is a directory". Each is now one paragraph at once
    naming what the archive is and the fix; nothing is unpacked."""
    import subprocess
    import sys

    fifo, folder = tmp_path / "lent.tar.gz", tmp_path / "archives"
    os.mkfifo(fifo)
    folder.mkdir()
    for path, kind in ((fifo, "a FIFO (named pipe)"), (folder, "a folder")):
        for check in ([], ["--check"]):
            proc = subprocess.run(
                [sys.executable, "-m", "mnistbench.cli", "unpack", *check, str(path),
                 "--runs", str(tmp_path / "runs")],
                capture_output=True, text=True, timeout=60, check=False)
            assert proc.returncode == 1, proc.stderr
            assert proc.stderr.strip() == (
                f"mnistbench unpack: error: cannot read the archive {path}: {path} is "
                f"{kind}, not a regular file. Give the path of the .tar.gz `mnistbench pack` "
                "wrote.")
    assert not (tmp_path / "runs").exists()
