"""``mnistbench publish --check`` (:func:`verify`): what is wrong with a publication. Every
file against the manifest's SHA-256, no file the manifest does not list, and rendering
``data/`` again gives ``index.html`` apart from the generation stamp (:func:`strip_stamp`), so
the published report is reproducible from its own data. The publication is read as untrusted
data: no symbolic link followed, no FIFO opened, no line quoted of a file that was not read."""

from __future__ import annotations

import difflib
import errno
import hashlib
import os
import re
import stat
import tempfile
from pathlib import Path

from mnistbench.core import untrusted
from mnistbench.publish.checks import PublishError
from mnistbench.publish.layout import (
    DATA_DIR,
    FORMAT,
    INDEX,
    MANIFEST,
    MAX_PUBLISHED_BYTES,
    REPORT_DIR,
)
from mnistbench.publish.rendering import render
from mnistbench.results import validate

#: An ISO 8601 date-time with seconds and a time zone: the form of the report's generation
#: stamp, which :func:`strip_stamp` masks.
STAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})")


def strip_stamp(html: str) -> str:
    """``html`` with its generation stamp (every :data:`STAMP` date-time) masked."""
    return STAMP.sub("<generated_at>", html)


def verify(report: Path = REPORT_DIR) -> list[str]:
    """What is wrong with the publication in ``report`` (empty: nothing): its manifest, every
    checksum, files the manifest does not list, and whether rendering ``data/`` again (from
    the current folder, with the recorded arguments) gives ``index.html`` but for the
    generation stamp.

    Every file is read through :func:`mnistbench.core.untrusted.read_bytes_under`: a
    symbolic link in ``report/`` (to ``/etc/shadow``, say) is named and never followed, a
    FIFO never opened, and no problem quotes a line of a file that was not read. The report is
    rendered again only when every file of ``data/`` is a regular file of the publication; a
    table it cannot render (an edited one) is a problem listed beside the checksums, never a
    traceback."""
    report = Path(report)
    path = report / DATA_DIR / MANIFEST
    try:
        manifest = validate.loads_strict(untrusted.read_text_under(
            report, f"{DATA_DIR}/{MANIFEST}", max_bytes=validate.MAX_JSON_BYTES))
    except untrusted.UnsafeFile as exc:
        return [f"cannot read {path}: {exc.why}; publish again (make publish)"]
    except ValueError as exc:
        return [f"cannot read {path}: {exc}"]
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return [f"{path} is not the manifest of a publication (format {FORMAT!r})"]
    problems = []
    unread = False  # a file of the publication that is not read: no rendering from it
    altered: set[str] = set()  # files that do not match their checksums: none of it quoted
    files = manifest.get("files") or {}
    if not isinstance(files, dict):
        return [f"{path}: 'files' is not a mapping of paths to checksums"]
    for name, entry in files.items():
        outside = _outside(report, name)
        if outside:
            problems.append(f"{path} lists {name!r}, {outside}; it was not read (a "
                            f"publication's files lie in {report})")
            unread = True
            continue
        target = report / name
        if not isinstance(entry, dict):
            problems.append(f"{path}: the entry of {name!r} is not {{bytes, sha256}}")
            continue
        try:
            digest = hashlib.sha256(untrusted.read_bytes_under(
                report, name, max_bytes=MAX_PUBLISHED_BYTES)).hexdigest()
        except untrusted.UnsafeFile as exc:
            missing = exc.errno == errno.ENOENT
            problems.append(f"{target} is listed in the manifest but missing" if missing
                            else f"{target} is {exc.why}; it was not read")
            unread = unread or not missing
            continue
        if digest != entry.get("sha256"):
            altered.add(name)
            problems.append(f"{target} does not match its SHA-256 in the manifest (changed "
                            "after publishing)")
    data_dir = report / DATA_DIR
    for extra in sorted(data_dir.iterdir()) if data_dir.is_dir() else []:
        if extra.name != MANIFEST and f"{DATA_DIR}/{extra.name}" not in files:
            problems.append(f"{extra} is not listed in the manifest")
            unread = unread or not stat.S_ISREG(os.lstat(extra).st_mode)
    render_args = manifest.get("render") or {}
    if not isinstance(render_args, dict) or not all(
            isinstance(render_args.get(k), str) for k in ("results", "cost_model", "command")):
        problems.append(f"{path}: 'render' must give results, cost_model and command as text")
        return problems
    cost_model = render_args["cost_model"]
    outside = _outside(report, os.path.relpath(os.path.abspath(cost_model), report))
    if outside:
        problems.append(f"{path}: render.cost_model {cost_model!r} is not inside {report} "
                        f"({outside}); the report was not rendered again (publish --check "
                        f"reads only {report})")
        return problems
    results = Path(render_args["results"])
    if not results.is_dir() or results.resolve() != (report / DATA_DIR).resolve():
        problems.append(f"the report was rendered from {results}, which is not {report / DATA_DIR} "
                        "from here: run the check from the folder it was published in (the "
                        "project's)")
        return problems
    if unread:
        problems.append(f"the report was not rendered again: a file of {report} was not read "
                        "(above)")
        return problems
    try:
        committed = untrusted.read_text_under(report, INDEX, max_bytes=MAX_PUBLISHED_BYTES)
    except untrusted.UnsafeFile as exc:
        problems.append(f"cannot read {report / INDEX}: {exc.why}; it was not compared")
        return problems
    with tempfile.TemporaryDirectory(prefix="mnistbench-verify-") as tmp:
        try:
            fresh = render(render_args, Path(tmp) / INDEX).read_text(encoding="utf-8")
        except PublishError as exc:
            problems.append(str(exc))
            return problems
    if strip_stamp(fresh) != strip_stamp(committed):
        # A file that is not what was published may be anything (a hard link to a secret):
        # where it differs is said, never what it holds.
        where = first_difference(strip_stamp(committed), strip_stamp(fresh),
                                 quote=INDEX not in altered)
        problems.append(f"{report / INDEX} is not what {results} renders to now: {where}")
    return problems


def _outside(report: Path, name: object) -> str | None:
    """Why the manifest path ``name`` (relative to ``report``) is not a path inside it, or
    None: absolute, climbing out with ``..``, or leading out through a symbolic link."""
    if not isinstance(name, str) or not name or "\x00" in name:
        return "not a path"
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name):
        return "an absolute path"
    if ".." in re.split(r"[/\\]", name):
        return "a path that climbs out with '..'"
    root = report.resolve()
    if not (report / name).resolve().is_relative_to(root):
        return "a path that leads out through a symbolic link"
    return None


def first_difference(old: str, new: str, width: int = 160, *, quote: bool = True) -> str:
    """Where two texts first differ, as one short line (``quote``: with both lines, else
    only the line's number)."""
    old_lines, new_lines = old.splitlines(), new.splitlines()
    matcher = difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False)
    for tag, i1, _i2, j1, _j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if not quote:
            return (f"they differ from line {i1 + 1} (not quoted: the file does not match "
                    "its checksum either, so what it holds is not the publication's)")
        was = old_lines[i1][:width] if i1 < len(old_lines) else "(end)"
        now = new_lines[j1][:width] if j1 < len(new_lines) else "(end)"
        return f"line {i1 + 1} was {was!r}, renders as {now!r}"
    return "they differ in line endings"
