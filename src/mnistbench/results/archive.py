"""Results that travel: one archive of a machine's ``results/runs/{env}``, and its checked merge
into another machine's ``results/runs``.

:func:`pack` writes a gzip-compressed tar file (the ``.tar.gz`` any ``tar`` reads) holding

- :data:`MANIFEST` first: :data:`FORMAT`, :data:`ARCHIVE_VERSION`, the environment, the
  packer's mnistbench and schema versions, the cells per status and per schema version, and
  every other member with its size and SHA-256;
- ``runs/{env}/...``: the environment's files as the study wrote them: each complete cell's
  ``{experiment}/{cell}/`` files (:data:`CELL_FILES`: ``summary.json``, ``epochs.csv``,
  ``resources.csv``), the environment's own (:data:`ENV_FILES`: ``collect_env.txt``) and its
  measured limits (``peak/{device}.json``, :data:`PEAK_FILES`; since archive version 2).
  Incomplete cells (no ``summary.json``), hidden files and any other file (named in a log
  line) are left out; every cell must be valid (:func:`mnistbench.results.validate.read_cell`)
  and every measured limit too (:func:`mnistbench.results.validate.read_peak`).

:func:`unpack` trusts nothing in the archive. Before anything lands in ``results/runs`` it
checks that

- every member is a regular file or a folder (no symbolic or hard link, device file, FIFO
  or sparse file), named by a relative path under ``runs/{env}/`` whose every part is a plain
  name (``[A-Za-z0-9._-]``, no ``..``, no hidden or absolute name), at most
  :data:`MAX_DEPTH` parts deep, each name once, and every file one of the results'
  (:data:`CELL_FILES` in a cell's folder, :data:`ENV_FILES` in the environment's,
  :data:`PEAK_FILES` in its ``peak/`` folder);
- the sizes stay within :class:`Limits` (members, bytes per member, bytes in all: an archive
  cannot fill the disk);
- the manifest comes first, is of a format and archive version this mnistbench reads, names
  one environment, and lists exactly the files the archive holds, each with the size and the
  SHA-256 its content has (a truncated or altered member fails here);
- the schema version is one the aggregate reads (1 to
  :data:`mnistbench.core.schema.SCHEMA_VERSION`; older versions merge with the fields added since
  empty), every cell is valid (:func:`mnistbench.results.validate.read_cell`: strict JSON,
  every field of its type and range, its counts and files as its params say), every
  measured limit is one (:func:`mnistbench.results.validate.read_peak`) and the cells
  aggregate (:func:`mnistbench.results.aggregate.aggregate`);
- the environment is not in ``results/runs`` yet, unless ``replace`` is given.

It extracts into a hidden staging folder inside ``results/runs`` (which neither the aggregate
nor the workflow reads) and renames the environment into place only once every check passed,
so a refused (or interrupted) archive leaves ``results/runs`` as it was; the staging folder of
an unpack that was killed outright is removed by the next one (:data:`STAGING`). Every error is an
:class:`ArchiveError` that names the archive, the member and the problem. The checks do not
rely on :mod:`tarfile`'s extraction filters (absent from Python 3.11.2, Debian 12's): the
archive is read member by member and each file written by this module.

The checksums detect damage, not intent: a hostile sender can write a matching manifest, so
the layout and content checks above are what protect the receiving machine.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import socket
import sys
import tarfile
import tempfile
import zlib
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from mnistbench import __version__
from mnistbench.core import atomic, schema, study
from mnistbench.core.devices import DEVICES
from mnistbench.results import aggregate, validate

#: The archive's first member: what it holds, with sizes and checksums.
MANIFEST = "mnistbench-archive.json"
#: ``format`` of the manifest.
FORMAT = "mnistbench-results"
#: Version of the archive layout; :func:`unpack` reads versions 1 to this one. 2: an
#: environment's measured limits (``peak/{device}.json``) travel with its cells.
ARCHIVE_VERSION = 2
#: The folder of the archive that holds the environment: ``runs/{env}/...``.
RUNS_DIR = "runs"
#: Deepest member: ``runs/{env}/{experiment}/{cell}/{file}``.
MAX_DEPTH = 5
#: The default archive name for an environment.
SUFFIX = ".mnistbench.tar.gz"

#: The files of a cell folder (``runs/{env}/{experiment}/{cell}/``): an archive holds no other.
CELL_FILES = (schema.SUMMARY_FILE, schema.EPOCHS_FILE, schema.RESOURCES_FILE)
#: The files of an environment folder (``runs/{env}/``): torch's collect_env report
#: (mnistbench.measure.hardware.COLLECT_ENV_FILE; results/ may not import measure/).
ENV_FILES = ("collect_env.txt",)
#: The files of an environment's measured-limit folder (``runs/{env}/peak/``): one per device.
PEAK_FILES = tuple(schema.peak_file(device) for device in DEVICES)
#: Files read whole into memory by the readers, capped at :attr:`Limits.small_bytes`.
SMALL_FILES = (schema.SUMMARY_FILE, *ENV_FILES, *PEAK_FILES)

#: Name starts of the staging folders of unpack (in the runs folder) and of a check (in the
#: temporary folder); a killed run's are removed at the next start (atomic.remove_dead).
STAGING = ".unpack-"
CHECK_STAGING = ".mnistbench-check-"

_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Limits:
    """What one archive may hold: members, bytes of one member, bytes of all members (after
    decompression). A real study's environment holds a few thousand files of a few MB in all."""

    members: int = 200_000
    member_bytes: int = 512 << 20
    total_bytes: int = 4 << 30
    manifest_bytes: int = 64 << 20
    #: summary.json and collect_env.txt (a few KB each as the trainer writes them).
    small_bytes: int = 4 << 20


#: The limits of :func:`unpack` unless told otherwise.
LIMITS = Limits()


class ArchiveError(Exception):
    """An archive that cannot be written or merged; the message names the archive, the member
    and the problem."""


@dataclass(frozen=True)
class Unpacked:
    """What :func:`unpack` merged (or, with ``check_only``, would merge)."""

    env: str
    path: Path | None  # results/runs/{env}; None when only checked
    cells: int
    statuses: dict[str, int]
    schema_versions: dict[int, int]
    replaced: bool


# ---------------------------------------------------------------------------------------------
# pack
def default_archive(env: str) -> Path:
    """The archive :func:`pack` writes by default: ``{env}.mnistbench.tar.gz`` here."""
    return Path(f"{env}{SUFFIX}")


def pack(runs: Path, env: str, out: Path | None = None, *,
         log=None, rename: str | None = None) -> Path:
    """Write ``runs/{env}`` into the archive ``out`` (default :func:`default_archive`) and
    return its path.

    The archive is written to a temporary sibling, checked as :func:`unpack` checks it, and
    only then renamed to ``out``. Raises :class:`ArchiveError` when the environment does not
    exist, holds no complete cell, holds a link or another special file, or its cells do not
    aggregate. ``log`` (a callable taking one line) hears about skipped incomplete cells.
    ``rename``: the archive holds the environment under this name (:func:`_pack_renamed`)."""
    runs, env = Path(runs), str(env)
    if rename is not None and rename != env:
        return _pack_renamed(runs, env, rename, out, log)
    return _pack(runs, env, out, log)


def _safe_env(env: str, runs: Path, what: str = "Give the name of a folder under") -> None:
    if study.safe_name(env, default="") != env:
        raise ArchiveError(
            f"environment name {env!r}: an environment folder may use only the characters "
            f"A-Z a-z 0-9 . _ - (no slashes, no leading dot). {what} {runs}.")


def _pack_renamed(runs: Path, env: str, new: str, out: Path | None, log) -> Path:
    """:func:`pack` of ``runs/{env}`` as environment ``new``: two machines whose host names
    match (cloud machines named ``vm`` or ``localhost``) get one default environment name,
    and merged, one would replace the other. The files are copied into a temporary runs
    folder under ``new``, each cell's ``params.env`` rewritten (nothing else: every
    measurement stays as recorded), and that folder packed; the manifest records
    ``renamed_from``."""
    _safe_env(env, runs)
    _safe_env(new, runs, "Give another name for")
    root = runs / env
    if root.is_symlink() or not root.is_dir():
        return _pack(runs, env, out, log)  # its error names the environments there
    with tempfile.TemporaryDirectory(prefix=CHECK_STAGING) as tmp:
        staged = Path(tmp, RUNS_DIR)
        for path in _environment_files(root, log):
            target = staged / new / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            if path.name == schema.SUMMARY_FILE and _depth(path, root) == 3:
                try:
                    data = validate.read_json_strict(path)  # bounded (a RecursionError)
                    data["params"]["env"] = new  # type: ignore[index]
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    raise ArchiveError(f"{path}: cannot rename its environment ({exc}); "
                                       f"{validate.FIX}, then pack again.") from None
                atomic.write_json(target, data)
            else:
                shutil.copy2(path, target)
        return _pack(staged, new, out, log, renamed_from=env)


def _pack(runs: Path, env: str, out: Path | None, log, renamed_from: str = "") -> Path:
    out = Path(out) if out is not None else default_archive(env)
    _safe_env(env, runs)
    root = runs / env
    if root.is_symlink() or not root.is_dir():
        known = sorted(p.name for p in runs.iterdir()
                       if p.is_dir() and not p.name.startswith(".")) if runs.is_dir() else []
        raise ArchiveError(
            f"no environment {env!r} in {runs}: {root} is not a folder. Environments there: "
            f"{', '.join(known) or 'none'}. Run the study first, or name one of them.")
    files = _environment_files(root, log)
    cells = [f for f in files if f.name == schema.SUMMARY_FILE and _depth(f, root) == 3]
    if not cells:
        raise ArchiveError(
            f"{root} holds no complete cell (no {root}/EXPERIMENT/CELL/{schema.SUMMARY_FILE}); "
            "run the study first.")
    statuses: Counter[str] = Counter()
    versions: Counter[int] = Counter()
    for path in cells:
        try:
            cell = validate.read_cell(path.parent)
        except validate.CellError as exc:
            raise ArchiveError(f"{exc} Then pack again.") from None
        if not cell.valid:
            raise ArchiveError(f"{path.parent} is invalid: {cell.why()}. An archive carries "
                               f"only checked results: {validate.FIX}, then pack again.")
        statuses[cell.status] += 1
        versions[cell.version] += 1
    peaks = [f for f in files if _depth(f, root) == 2 and f.parent.name == schema.PEAK_DIR]
    for path in peaks:
        try:
            validate.read_peak(path, path.stem)
        except validate.PeakError as exc:
            raise ArchiveError(f"{exc} Then pack again.") from None
    entries = {}
    for path in files:
        name = "/".join((RUNS_DIR, env, *path.relative_to(root).parts))
        entries[name] = {"bytes": path.stat().st_size, "sha256": sha256_file(path)}
    manifest = {
        "format": FORMAT,
        "archive_version": ARCHIVE_VERSION,
        "env": env,
        "schema_version": max(versions),
        "mnistbench": __version__,
        "packed_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "packed_on": socket.gethostname(),
        "cells": len(cells),
        "statuses": dict(sorted(statuses.items())),
        "schema_versions": {str(k): v for k, v in sorted(versions.items())},
        "peaks": sorted(path.stem for path in peaks),
        "files": entries,
    }
    if renamed_from:
        manifest["renamed_from"] = renamed_from
    made = []
    try:
        made = atomic.make_dirs(out.parent)
        with atomic.atomic_open(out, "w+b") as handle:
            _write_tar(handle, root, env, manifest, files)
            handle.flush()
            handle.seek(0)
            check_archive(handle, name=str(out))
    except OSError as exc:
        atomic.remove_dirs(made)
        raise ArchiveError(atomic.folder_error(out.parent, exc, "the archive", "--out",
                                               names_a_file=True)
                           ) from None
    except ArchiveError as exc:
        atomic.remove_dirs(made)
        raise ArchiveError(f"packing {root} gave an archive that does not check: {exc}"
                           ) from None
    except BaseException:  # interrupted (SIGINT, SIGTERM): the temporary archive is gone
        atomic.remove_dirs(made)
        raise
    return out


def _environment_files(root: Path, log) -> list[Path]:
    """The regular files of an environment folder to pack, sorted: the environment's own files
    and those of its complete cells; hidden names and incomplete cells left out."""
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        depth = _depth(here, root)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        if depth == 2 and schema.SUMMARY_FILE not in filenames:
            if log is not None:
                log(f"skipping incomplete cell {here} (no {schema.SUMMARY_FILE}: still "
                    "running or interrupted)")
            dirnames[:] = []
            continue
        for name in [*dirnames, *filenames]:
            path = here / name
            if not name.startswith(".") and path.is_symlink():
                raise ArchiveError(
                    f"{path} is a symbolic link; an archive holds only plain files. Replace "
                    "it by the file it points to, or move it out of the environment folder.")
        if depth >= 2:
            dirnames[:] = []  # a cell's files only
        peak_folder = depth == 1 and here.name == schema.PEAK_DIR
        if peak_folder:
            dirnames[:] = []  # its files only
        known = (ENV_FILES if depth == 0 else CELL_FILES if depth == 2
                 else PEAK_FILES if peak_folder else ())
        for name in sorted(filenames):
            path = here / name
            if name.startswith("."):
                continue
            if name not in known:
                if log is not None and (depth != 1 or peak_folder):
                    log(f"leaving out {path}: not a results file (an archive holds "
                        f"{', '.join(CELL_FILES)} of each cell, {', '.join(ENV_FILES)} and "
                        f"{schema.PEAK_DIR}/DEVICE.json)")
                continue
            if not path.is_file():
                raise ArchiveError(
                    f"{path} is not a regular file (a device, FIFO or socket); move it out of "
                    "the environment folder and pack again.")
            if study.safe_name(name, default="") != name:
                raise ArchiveError(
                    f"{path}: an archived file name may use only A-Z a-z 0-9 . _ -; rename "
                    "or remove it and pack again.")
            out.append(path)
    return sorted(out)


def _depth(path: Path, root: Path) -> int:
    return len(path.relative_to(root).parts)


def _write_tar(handle, root: Path, env: str, manifest: dict, files: list[Path]) -> None:
    """The archive: the manifest, then every file, owner-free and with plain modes."""
    with tarfile.open(fileobj=handle, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        data = (json.dumps(manifest, indent=2, allow_nan=False) + "\n").encode("utf-8")
        info = _tarinfo(MANIFEST, len(data), datetime.now(UTC).timestamp())
        tar.addfile(info, io.BytesIO(data))
        for path in files:
            name = "/".join((RUNS_DIR, env, *path.relative_to(root).parts))
            stat = path.stat()
            with path.open("rb") as source:
                tar.addfile(_tarinfo(name, stat.st_size, stat.st_mtime), source)


def _tarinfo(name: str, size: int, mtime: float) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, int(mtime), 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def sha256_file(path: Path) -> str:
    """The SHA-256 of the file at ``path``, hex, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------
# unpack
def unpack(archive: Path, runs: Path, *, replace: bool = False,
           limits: Limits = LIMITS) -> Unpacked:
    """Check ``archive`` and merge its environment into ``runs`` (``results/runs``).

    ``replace``: an environment already in ``runs`` is replaced (else refused). Raises
    :class:`ArchiveError` naming the member and the problem; ``runs`` is then unchanged."""
    archive, runs = Path(archive), Path(runs)
    with open_archive(archive) as handle:
        return _unpack(handle, str(archive), runs, replace=replace, limits=limits)


def open_archive(archive: Path) -> IO[bytes]:
    """The archive file ``archive`` opened for reading; :class:`ArchiveError` naming it when
    it is missing, unreadable or not a regular file (a FIFO blocked the open for good, a
    folder said "Is a directory")."""
    archive = Path(archive)
    if archive.exists() and not archive.is_file():
        raise ArchiveError(f"cannot read the archive {archive}: {archive} "
                           f"{atomic.not_there(archive)}. Give the path of the .tar.gz "
                           "`mnistbench pack` wrote.")
    try:
        return archive.open("rb")
    except OSError as exc:
        raise ArchiveError(f"cannot read the archive {archive}: {exc.strerror or exc}."
                           ) from None


def check_archive(handle, *, name: str = "archive", limits: Limits = LIMITS) -> Unpacked:
    """Every check :func:`unpack` makes, on the open binary file ``handle``, merging nothing."""
    return _unpack(handle, name, None, replace=False, limits=limits)


def _unpack(handle, name: str, runs: Path | None, *, replace: bool,
            limits: Limits) -> Unpacked:
    try:
        tar = tarfile.open(fileobj=handle, mode="r:gz")  # noqa: SIM115 (closed below)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise ArchiveError(f"{name} cannot be read as a gzip-compressed tar archive (it is "
                           f"truncated, damaged or of another kind: {exc}); `mnistbench pack` "
                           "writes one.") from None
    with tar:
        members, manifest = _read_members(tar, name, limits)
        env = manifest["env"]
        dest = None if runs is None else runs / env
        if dest is not None and (dest.exists() or dest.is_symlink()) and not replace:
            raise ArchiveError(_exists_message(name, dest))
        made: list[Path] = []
        if runs is not None:
            try:
                made = atomic.make_dirs(runs)
                atomic.remove_dead(runs, STAGING)  # of unpacks that were killed
                staging = Path(tempfile.mkdtemp(prefix=atomic.owner_prefix(STAGING) + f"{env}-",
                                                dir=runs))
            except OSError as exc:
                atomic.remove_dirs(made)
                raise ArchiveError(atomic.folder_error(runs, exc, "the unpacked results",
                                                       "--runs")) from None
        else:
            atomic.remove_dead(tempfile.gettempdir(), CHECK_STAGING)
            staging = Path(tempfile.mkdtemp(prefix=atomic.owner_prefix(CHECK_STAGING)))
        placed = False
        try:
            _extract(tar, members, manifest, staging, name)
            result = _check_cells(staging, env, name)
            if dest is None:
                return result
            replaced = _place(staging / RUNS_DIR / env, dest, staging, replace, name)
            placed = True
            return Unpacked(env=env, path=dest, cells=result.cells, statuses=result.statuses,
                            schema_versions=result.schema_versions, replaced=replaced)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            if not placed:
                atomic.remove_dirs(made)


def _exists_message(name: str, dest: Path) -> str:
    return (f"{name}: environment {dest.name!r} already exists in {dest.parent} "
            f"({dest}). Pass --replace to replace it with the archive's cells (its current "
            "cells are removed), or leave it: nothing was changed.")


def _read_members(tar: tarfile.TarFile, name: str,
                  limits: Limits) -> tuple[list[tarfile.TarInfo], dict]:
    """Every member's header, checked; the manifest, checked against them."""
    members: list[tarfile.TarInfo] = []
    seen: set[str] = set()
    total = 0
    manifest: dict | None = None
    while True:
        last = members[-1].name if members else None
        try:
            member = tar.next()
        except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
            where = f"in or after member {last!r}" if last else "at its start"
            raise ArchiveError(f"{name} is truncated or damaged {where}: {exc}.") from None
        if member is None:
            break
        if len(members) >= limits.members:
            raise ArchiveError(f"{name} holds more than {limits.members} members; an archive "
                               "of one environment holds far fewer. Refused.")
        _check_header(member, name, limits)
        if member.name in seen:
            raise ArchiveError(f"{name}: member {member.name!r} appears twice; refused (the "
                               "second copy would silently replace the first).")
        seen.add(member.name)
        if member.isfile():
            total += member.size
            if total > limits.total_bytes:
                raise ArchiveError(
                    f"{name}: its members add up to more than {limits.total_bytes} bytes "
                    f"(at {member.name!r}); refused as too large for the results of one "
                    "environment.")
        if not members:
            if member.name != MANIFEST or not member.isfile():
                raise ArchiveError(
                    f"{name}: the first member is {member.name!r}, not the manifest "
                    f"{MANIFEST!r}; this is not an archive `mnistbench pack` wrote.")
            manifest = _read_manifest(tar, member, name, limits)
        elif member.name == MANIFEST:
            raise ArchiveError(f"{name}: member {MANIFEST!r} appears twice; refused.")
        members.append(member)
    if manifest is None:
        raise ArchiveError(f"{name} is empty: no manifest {MANIFEST!r}.")
    env = manifest["env"]
    files = {m.name: m for m in members[1:] if m.isfile()}
    for member in members[1:]:
        parts = member.name.rstrip("/").split("/")
        if len(parts) > 1 and parts[1] != env:
            raise ArchiveError(
                f"{name}: member {member.name!r} lies outside {RUNS_DIR}/{env}/, the "
                "environment its manifest names; an archive holds one environment.")
    listed = manifest["files"]
    for member_name in files:
        if member_name not in listed:
            raise ArchiveError(f"{name}: member {member_name!r} is not listed in the "
                               "manifest; refused (added after packing?).")
    for member_name, entry in listed.items():
        if member_name not in files:
            raise ArchiveError(
                f"{name}: member {member_name!r} is listed in the manifest but missing from "
                "the archive: it is truncated or was altered. Pack it again.")
        if files[member_name].size != entry["bytes"]:
            raise ArchiveError(
                f"{name}: member {member_name!r} holds {files[member_name].size} bytes, the "
                f"manifest says {entry['bytes']}: it was altered or damaged. Pack it again.")
    return members, manifest


def _check_header(member: tarfile.TarInfo, name: str, limits: Limits) -> None:
    """Refuse a member that is not a plain file or folder under a plain relative name."""
    path = member.name
    what = f"{name}: member {path!r}"
    if member.issym():
        raise ArchiveError(f"{what} is a symbolic link (to {member.linkname!r}); an archive "
                           "of results holds only files and folders. Refused.")
    if member.islnk():
        raise ArchiveError(f"{what} is a hard link (to {member.linkname!r}); refused.")
    if member.ischr() or member.isblk():
        raise ArchiveError(f"{what} is a device file; refused.")
    if member.isfifo():
        raise ArchiveError(f"{what} is a FIFO; refused.")
    if member.issparse() or not (member.isfile() or member.isdir()):
        raise ArchiveError(f"{what} is not a regular file or folder (tar type "
                           f"{member.type!r}); refused.")
    if "\x00" in path or path.startswith("/") or path.startswith("\\") or re.match(
            r"[A-Za-z]:", path):
        raise ArchiveError(f"{what} has an absolute path; refused (members are relative to "
                           "the archive).")
    parts = path.rstrip("/").split("/") if member.isdir() else path.split("/")
    if ".." in parts:
        raise ArchiveError(f"{what} climbs out of its folder with '..'; refused.")
    if any(part in ("", ".") for part in parts):
        raise ArchiveError(f"{what} has an empty or '.' path part; refused.")
    for part in parts:
        if study.safe_name(part, default="") != part:
            raise ArchiveError(
                f"{what}: the name {part!r} is not a plain name (only A-Z a-z 0-9 . _ -, "
                "not hidden); refused.")
    if path == MANIFEST or (parts == [RUNS_DIR] and member.isdir()):
        return
    if parts[0] != RUNS_DIR or len(parts) < 2:
        raise ArchiveError(f"{what} lies outside {RUNS_DIR}/ENV/; refused.")
    if len(parts) > MAX_DEPTH or (member.isdir() and len(parts) == MAX_DEPTH):
        raise ArchiveError(f"{what} is deeper than {RUNS_DIR}/ENV/EXPERIMENT/CELL/FILE; "
                           "refused.")
    if member.isfile():
        if len(parts) < 3:
            raise ArchiveError(f"{what}: a file directly in {RUNS_DIR}/; refused.")
        known = {3: ENV_FILES, 5: CELL_FILES}.get(len(parts), ())
        if len(parts) == 4 and parts[2] == schema.PEAK_DIR:
            known = PEAK_FILES
        if parts[-1] not in known:
            raise ArchiveError(
                f"{what} is not a file of the results: an archive holds only "
                f"{', '.join(CELL_FILES)} in a cell's folder ({RUNS_DIR}/ENV/EXPERIMENT/CELL/), "
                f"{', '.join(ENV_FILES)} in the environment's ({RUNS_DIR}/ENV/) and DEVICE.json "
                f"in its measured limits' ({RUNS_DIR}/ENV/{schema.PEAK_DIR}/); refused.")
        cap = limits.small_bytes if parts[-1] in SMALL_FILES else limits.member_bytes
        if member.size > cap:
            raise ArchiveError(f"{what} holds {member.size} bytes, more than the "
                               f"{cap} a results file {parts[-1]} may; refused.")


def _read_manifest(tar: tarfile.TarFile, member: tarfile.TarInfo, name: str,
                   limits: Limits) -> dict:
    what = f"{name}: manifest {MANIFEST!r}"
    if member.size > limits.manifest_bytes:
        raise ArchiveError(f"{what} holds {member.size} bytes; refused as too large.")
    try:
        source = tar.extractfile(member)
        raw = source.read() if source is not None else b""
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise ArchiveError(f"{what} is truncated or damaged: {exc}.") from None
    if len(raw) != member.size:
        raise ArchiveError(f"{what} is truncated: {len(raw)} of {member.size} bytes.")
    try:
        data = validate.loads_strict(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ArchiveError(f"{what} is not valid JSON: {exc}.") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ArchiveError(f"{what} is not of format {FORMAT!r}; this is not an archive "
                           "`mnistbench pack` wrote.")
    version = data.get("archive_version")
    if type(version) is not int or not 1 <= version <= ARCHIVE_VERSION:
        raise ArchiveError(
            f"{what}: archive_version {version!r}; this mnistbench reads 1 to "
            f"{ARCHIVE_VERSION}. Unpack it with the mnistbench that packed it (or a later "
            "one).")
    env = data.get("env")
    if not isinstance(env, str) or study.safe_name(env, default="") != env:
        raise ArchiveError(f"{what}: env {env!r} is not a plain environment name "
                           "(A-Z a-z 0-9 . _ -); refused.")
    schema_version = data.get("schema_version")
    if type(schema_version) is not int or schema_version < 1:
        raise ArchiveError(f"{what}: schema_version {schema_version!r} is not a version.")
    if schema_version > schema.SCHEMA_VERSION:
        raise ArchiveError(
            f"{what}: its cells are of schema version {schema_version}, written by a newer "
            f"mnistbench ({data.get('mnistbench', '?')}); this one reads schema versions 1 to "
            f"{schema.SCHEMA_VERSION}. Update this checkout (git pull) and unpack again.")
    files = data.get("files")
    if not isinstance(files, dict):
        raise ArchiveError(f"{what}: 'files' must map member names to their size and "
                           "sha256.")
    for member_name, entry in files.items():
        if (not isinstance(entry, dict) or type(entry.get("bytes")) is not int
                or entry["bytes"] < 0 or not isinstance(entry.get("sha256"), str)
                or not _SHA256.fullmatch(entry["sha256"])):
            raise ArchiveError(f"{what}: the entry of {member_name!r} must be "
                               '{"bytes": N, "sha256": "64 hex digits"}.')
    return data


def _extract(tar: tarfile.TarFile, members: list[tarfile.TarInfo], manifest: dict,
             staging: Path, name: str) -> None:
    """Write every member below ``staging`` (folders made here, files created new, never
    through a link), checking each file's size and SHA-256 against the manifest."""
    for member in members[1:]:
        target = staging.joinpath(*member.name.rstrip("/").split("/"))
        if member.isdir():
            target.mkdir(mode=0o755, parents=True, exist_ok=True)
            continue
        target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        entry = manifest["files"][member.name]
        digest = hashlib.sha256()
        written = 0
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        try:
            source = tar.extractfile(member)
            if source is None:  # only for non-files, which the header check refused
                raise ArchiveError(f"{name}: member {member.name!r} cannot be read.")
            fd = os.open(target, flags, atomic.FILE_MODE)
            with os.fdopen(fd, "wb") as out:
                while chunk := source.read(_CHUNK):
                    written += len(chunk)
                    if written > member.size:
                        break
                    digest.update(chunk)
                    out.write(chunk)
        except (tarfile.TarError, EOFError, zlib.error) as exc:
            raise ArchiveError(f"{name}: member {member.name!r} is truncated or damaged: "
                               f"{exc}. Pack it again.") from None
        except OSError as exc:
            if isinstance(exc, tarfile.ReadError) or exc.errno is None:
                raise ArchiveError(f"{name}: member {member.name!r} is truncated or damaged: "
                                   f"{exc}. Pack it again.") from None
            raise ArchiveError(f"cannot write {target} while unpacking {name}: "
                               f"{exc.strerror or exc}.") from None
        if written != entry["bytes"]:
            raise ArchiveError(f"{name}: member {member.name!r} is truncated: {written} of "
                               f"{entry['bytes']} bytes. Pack it again.")
        if digest.hexdigest() != entry["sha256"]:
            raise ArchiveError(
                f"{name}: member {member.name!r} does not match its checksum in the manifest "
                "(sha256): it was altered or damaged. Pack it again.")


def _check_cells(staging: Path, env: str, name: str) -> Unpacked:
    """The staged environment aggregates; its cells' statuses and schema versions."""
    runs = staging / RUNS_DIR
    root = runs / env
    if not root.is_dir():
        raise ArchiveError(f"{name} holds no cell of {env!r} (no {RUNS_DIR}/{env}/).")
    try:
        for device, path in validate.peak_files(root):
            validate.read_peak(path, device)
    except validate.PeakError as exc:
        message = str(exc).replace(f"{staging}{os.sep}", "")
        raise ArchiveError(f"{name}: a measured limit is refused: {message}") from None
    cells = sorted(p for p in root.glob("*/*") if p.is_dir())
    for cell in cells:
        if not (cell / schema.SUMMARY_FILE).is_file():
            member = "/".join(cell.relative_to(staging).parts)
            raise ArchiveError(f"{name}: cell {member}/ has no {schema.SUMMARY_FILE}; refused "
                               "(an incomplete cell).")
    if not cells:
        raise ArchiveError(f"{name} holds no cell of {env!r}.")
    prefix = f"{staging}{os.sep}"
    statuses: Counter[str] = Counter()
    versions: Counter[int] = Counter()
    for folder in cells:
        member = "/".join(folder.relative_to(staging).parts)
        try:
            cell = validate.read_cell(folder)
        except validate.CellError as exc:
            message = str(exc).replace(prefix, "")
            raise ArchiveError(f"{name}: its cells do not aggregate: {message}") from None
        if not cell.valid:
            raise ArchiveError(
                f"{name}: cell {member}/ is invalid: {cell.why()}. Refused: results enter "
                "only whole and checked; on the machine that measured it, delete that cell "
                "folder, run the cell again and pack again.")
        statuses[cell.status] += 1
        versions[cell.version] += 1
    with tempfile.TemporaryDirectory(prefix=".tables-", dir=staging) as tables:
        try:
            aggregate.aggregate(runs, Path(tables))
        except aggregate.AggregateError as exc:
            message = str(exc).replace(prefix, "")
            raise ArchiveError(f"{name}: its cells do not aggregate: {message}") from None
    return Unpacked(env=env, path=None, cells=len(cells), statuses=dict(sorted(statuses.items())),
                    schema_versions=dict(sorted(versions.items())), replaced=False)


def _place(staged: Path, dest: Path, staging: Path, replace: bool, name: str) -> bool:
    """Rename the staged environment to ``dest``; the old one first aside when replacing."""
    old = staging / "replaced"
    try:
        if dest.exists() or dest.is_symlink():
            if not replace:
                raise ArchiveError(_exists_message(name, dest))
            os.rename(dest, old)
        os.rename(staged, dest)
    except BaseException as exc:  # an error, or a signal between the two renames
        if old.exists() or old.is_symlink():
            with contextlib.suppress(OSError):
                if dest.exists() and not dest.is_symlink():
                    shutil.rmtree(dest)
                os.rename(old, dest)
            if not isinstance(exc, OSError):
                raise
            raise ArchiveError(f"cannot move the unpacked environment to {dest}: "
                               f"{exc.strerror or exc}.") from None
        if not isinstance(exc, OSError):
            raise
        if dest.exists():
            raise ArchiveError(_exists_message(name, dest)) from None
        raise ArchiveError(f"cannot move the unpacked environment to {dest}: "
                           f"{exc.strerror or exc}.") from None
    return old.exists()


def describe(result: Unpacked) -> str:
    """One line about what :func:`unpack` did."""
    statuses = ", ".join(f"{n} {s}" for s, n in result.statuses.items())
    versions = ", ".join(f"{n} of schema version {v}" for v, n in result.schema_versions.items())
    verb = "replaced" if result.replaced else "added"
    where = result.path if result.path is not None else "(checked only)"
    return (f"{verb} environment {result.env}: {result.cells} cells ({statuses}; {versions}) "
            f"-> {where}")


def stderr_log(message: str) -> None:
    """Print a progress or warning line on stderr."""
    print(f"mnistbench: {message}", file=sys.stderr, flush=True)
