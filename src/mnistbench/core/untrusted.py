"""What comes from outside, read and written safely: one way to open a file under a root, the
bounds every parser of a file from elsewhere keeps, and text made inert for the formats it is
exported to. Standard library only (the workflow imports it while it plans a study).

- **Reading under a root** (:func:`read_bytes_under`, :func:`read_text_under`): a file named
  by its path relative to a root (``report/``, ``results/runs``, an archive's staging folder)
  is opened one folder at a time with ``O_NOFOLLOW``, so no symbolic link on the way, nor the
  file itself, is followed; it must be a regular file (a FIFO would hang, a device never
  ends) of at most ``max_bytes``. An :class:`UnsafeFile` names the path and why, never what
  the file holds: a reader that refuses a file quotes nothing of it.
- **Bounded parsing**: :func:`check_json_depth` refuses JSON nested deeper than
  :data:`MAX_DEPTH` before ``json.loads`` recurses into it (a RecursionError otherwise);
  :func:`check_tree` refuses a parsed document (YAML above all, whose aliases share one object
  many times: the "billion laughs") whose expanded size passes :data:`MAX_NODES` values or
  whose depth passes :data:`MAX_DEPTH`, counting each shared object once per use without
  expanding it, so the refusal itself takes microseconds; a document that holds itself (a
  YAML alias inside its own anchor) is refused too. :func:`read_text_file` caps a file the
  user names before it is parsed. :func:`loads_strict` parses strict JSON (every number
  finite, the depth bounded); :func:`loads_lenient` keeps each non-JSON number (``NaN``,
  ``1e999``) as a marker :func:`not_json` names.
- **Inert text**: :func:`markdown_code` puts any text in a Markdown code span no backtick of
  it closes (HTML and Markdown in it stay text), :func:`markdown_cell` too with pipes escaped
  for a table cell, and :func:`csv_safe` neutralises a spreadsheet formula (a text field
  starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return gets a leading ``'``,
  as OWASP's CSV injection guidance says); a number stays a number.
- **Standard output**: :func:`write_stdout` writes and flushes; a full disk (``> /dev/full``)
  is a :class:`StdoutError` with the fix instead of a traceback at exit.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

#: The deepest nesting a config, manifest, summary or cost file may have (the schema's files
#: are 4 deep at most; Python's parsers recurse about 1000 deep before a RecursionError).
MAX_DEPTH = 64
#: The most values a parsed config or manifest may expand to, with every YAML alias counted
#: once per use (the study's largest config holds about 600; a billion-laughs file 10^9).
MAX_NODES = 200_000
#: The largest config, cost model or manifest file read (the study's are under 64 KiB).
MAX_CONFIG_BYTES = 4 * 1024 * 1024


class UnsafeFile(OSError):
    """A file that is not read: a symbolic link on its way, not a regular file, too large,
    missing or unreadable. ``why`` says which in a few words (``a symbolic link, ...``, ``not
    a regular file but a FIFO``); ``str()`` is ``PATH: why``, never the file's content."""

    def __init__(self, path: Path | str, why: str, code: int | None = errno.EINVAL) -> None:
        super().__init__(code or errno.EINVAL, why, str(path))
        self.path, self.why = str(path), why

    def __str__(self) -> str:
        return f"{self.path}: {self.why}"


class TooComplex(ValueError):
    """A document past the bounds of :func:`check_tree` or :func:`check_json_depth`; the
    message names what and where, never the content."""


# ---------------------------------------------------------------------------------------------
# Reading under a root
def _parts(relative: str | os.PathLike) -> list[str]:
    text = os.fspath(relative)
    if not text or "\x00" in text or text.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", text):
        raise ValueError("not a relative path")
    parts = [p for p in PurePosixPath(text.replace("\\", "/")).parts if p not in ("", ".")]
    if not parts or ".." in parts:
        raise ValueError("a path that climbs out with '..'" if ".." in parts
                         else "not a relative path")
    return parts


def read_bytes_under(root: Path | str, relative: str | os.PathLike, *,
                     max_bytes: int) -> bytes:
    """The bytes of the regular file ``root/relative``, read without following any symbolic
    link below ``root`` (``root`` itself is taken as given). Raises :class:`UnsafeFile`
    naming the path: a link on the way or at the end, a part that is not a folder, not a
    regular file, more than ``max_bytes``, missing, or unreadable."""
    shown = Path(root) / os.fspath(relative)
    try:
        parts = _parts(relative)
    except ValueError as exc:
        raise UnsafeFile(shown, f"{exc}; only a path inside {root} is read") from None
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    fds: list[int] = []
    try:
        try:
            fds.append(os.open(root, flags | getattr(os, "O_DIRECTORY", 0)))
        except OSError as exc:
            raise UnsafeFile(root, f"the folder is unreadable ({exc.strerror})", exc.errno
                             ) from None
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            where = Path(root, *parts[:index + 1])
            try:
                st = os.lstat(part, dir_fd=fds[-1])
            except FileNotFoundError:
                raise UnsafeFile(where, "missing (no such file)", errno.ENOENT) from None
            except OSError as exc:
                raise UnsafeFile(where, f"unreadable ({exc.strerror})", exc.errno
                                 ) from None
            if stat.S_ISLNK(st.st_mode):
                raise UnsafeFile(where, "a symbolic link, which is not followed (a reader "
                                 f"of {root} reads only what lies in it)", errno.ELOOP)
            if not last and not stat.S_ISDIR(st.st_mode):
                raise UnsafeFile(where, f"not a folder but {_kind(st.st_mode)}",
                                 errno.ENOTDIR)
            if last and not stat.S_ISREG(st.st_mode):
                raise UnsafeFile(where, f"not a regular file but {_kind(st.st_mode)}",
                                 errno.EINVAL)
            try:
                fd = os.open(part, flags | nofollow | os.O_NONBLOCK
                             | (0 if last else getattr(os, "O_DIRECTORY", 0)), dir_fd=fds[-1])
            except OSError as exc:
                raise UnsafeFile(where, f"unreadable ({exc.strerror})", exc.errno
                                 ) from None
            fds.append(fd)
        st = os.fstat(fds[-1])
        if not stat.S_ISREG(st.st_mode):  # replaced between lstat and open
            raise UnsafeFile(shown, f"not a regular file but {_kind(st.st_mode)}")
        if st.st_size > max_bytes:
            raise UnsafeFile(shown, f"{st.st_size} bytes, more than the {max_bytes} "
                             "such a file may hold", errno.EFBIG)
        chunks, size = [], 0
        while True:
            try:
                chunk = os.read(fds[-1], 1 << 20)
            except OSError as exc:
                raise UnsafeFile(shown, f"unreadable ({exc.strerror})", exc.errno
                                 ) from None
            if not chunk:
                break
            size += len(chunk)
            if size > max_bytes:
                raise UnsafeFile(shown, f"more than the {max_bytes} bytes such a file "
                                 "may hold", errno.EFBIG)
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        for fd in fds:
            os.close(fd)


def read_text_under(root: Path | str, relative: str | os.PathLike, *, max_bytes: int) -> str:
    """:func:`read_bytes_under` decoded as UTF-8 (:class:`UnsafeFile` when it is not)."""
    raw = read_bytes_under(root, relative, max_bytes=max_bytes)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnsafeFile(Path(root) / os.fspath(relative),
                         f"not UTF-8 text (byte {exc.start})") from None


def read_text_file(path: Path | str, *, max_bytes: int = MAX_CONFIG_BYTES) -> str:
    """The UTF-8 text of the regular file ``path`` as named (a link the user names is
    followed: it is the user's choice), of at most ``max_bytes``; :class:`UnsafeFile` naming
    the path otherwise (a FIFO, a folder, a device, too large, not UTF-8)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise UnsafeFile(path, exc.strerror or "cannot be opened", exc.errno or 0) from None
    try:
        # fstat before fdopen: fdopen of a folder raises IsADirectoryError (a traceback).
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(path, f"not a regular file but {_kind(st.st_mode)}")
        with os.fdopen(os.dup(fd), "rb") as handle:
            raw = handle.read(max_bytes + 1)
    except UnsafeFile:
        raise
    except OSError as exc:
        raise UnsafeFile(path, f"unreadable ({exc.strerror})", exc.errno or 0) from None
    finally:
        os.close(fd)
    if len(raw) > max_bytes:
        raise UnsafeFile(path, f"more than the {max_bytes} bytes such a file may hold",
                         errno.EFBIG)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnsafeFile(path, f"not UTF-8 text (byte {exc.start})") from None


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


# ---------------------------------------------------------------------------------------------
# Bounded parsing
def check_json_depth(text: str, max_depth: int = MAX_DEPTH) -> None:
    """Raise :class:`TooComplex` when the JSON ``text`` nests arrays and objects deeper than
    ``max_depth`` (strings are skipped), before a parser recurses into it."""
    if text.count("[") + text.count("{") <= max_depth:
        return
    depth, in_string, escaped = 0, False, False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > max_depth:
                raise TooComplex(f"nested deeper than {max_depth} levels (arrays and objects "
                                 "inside each other); no file of this project nests so deep")
        elif char in "]}":
            depth -= 1


def check_tree(data: object, *, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH,
               what: str = "the document") -> None:
    """Raise :class:`TooComplex` when ``data`` (parsed YAML or JSON: dicts, lists and
    scalars) expands to more than ``max_nodes`` values, nests deeper than ``max_depth`` or
    holds itself. A shared object (a YAML alias) counts its size at every use, computed once,
    so a billion-laughs document is refused after visiting each of its few objects once."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(node: object, depth: int, where: str) -> int:
        if not isinstance(node, Mapping | list | tuple):
            return 1
        if depth > max_depth:
            raise TooComplex(f"{what} nests deeper than {max_depth} levels (at {where}); no "
                             "config or manifest of this project nests so deep")
        known = sizes.get(id(node))
        if known is not None:
            return known
        if id(node) in open_:
            raise TooComplex(f"{what} holds itself at {where} (a YAML alias inside its own "
                             "anchor): it has no finite value")
        open_.add(id(node))
        total = 1
        items = (node.items() if isinstance(node, Mapping)
                 else ((f"[{i}]", v) for i, v in enumerate(node)))
        for key, value in items:
            total += size(value, depth + 1, f"{where}.{key}" if isinstance(node, Mapping)
                          else f"{where}{key}")
            if total > max_nodes:
                raise TooComplex(
                    f"{what} expands to more than {max_nodes} values (at {where}; YAML "
                    "aliases repeating aliases, the 'billion laughs'); no config or manifest "
                    "of this project holds so many: write the values out")
        open_.discard(id(node))
        sizes[id(node)] = total
        return total

    size(data, 0, "(top level)")


# ---------------------------------------------------------------------------------------------
# Strict JSON: every number finite, nesting bounded
class NotJson:
    """A token json.loads takes but JSON does not have (NaN, Infinity, -Infinity, or a
    number too large for a float such as 1e999), kept to name it."""

    def __init__(self, token: str) -> None:
        self.token = token

    def __repr__(self) -> str:
        return self.token


def _parse_float(text: str) -> float | NotJson:
    value = float(text)
    return value if math.isfinite(value) else NotJson(text)


def loads_lenient(text: str) -> object:
    """``text`` parsed as JSON, with each non-JSON number (NaN, Infinity, -Infinity, 1e999)
    kept as a marker that :func:`not_json` finds, so the caller can name where it was."""
    check_json_depth(text)  # a ValueError before json.loads would recurse too deep
    return json.loads(text, parse_constant=NotJson, parse_float=_parse_float)


def not_json(data: object, path: str = "") -> list[tuple[str, str]]:
    """(dotted path, token) of every non-JSON number in what :func:`loads_lenient` gave."""
    if isinstance(data, NotJson):
        return [(path or "(the document)", data.token)]
    found: list[tuple[str, str]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            found += not_json(value, f"{path}.{key}" if path else str(key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found += not_json(value, f"{path}[{index}]")
    return found


def loads_strict(text: str) -> object:
    """``text`` parsed as strict JSON: raises ValueError naming the first NaN, Infinity,
    -Infinity or out-of-range number (1e999) and where it is (json.loads takes them)."""
    data = loads_lenient(text)
    bad = not_json(data)
    if bad:
        where, token = bad[0]
        raise ValueError(f"{where} is {token}, which is not JSON (a JSON number is finite)")
    return data


def without_markers(data: object) -> object:
    """What :func:`loads_lenient` gave, each non-JSON number replaced by None."""
    if isinstance(data, NotJson):
        return None
    if isinstance(data, dict):
        return {k: without_markers(v) for k, v in data.items()}
    if isinstance(data, list):
        return [without_markers(v) for v in data]
    return data


# ---------------------------------------------------------------------------------------------
# Inert text
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def one_line(value: object) -> str:
    """``value`` as text on one line: newlines become spaces, other control characters go."""
    return " ".join(_CONTROL.sub("", str(value)).splitlines())


def markdown_code(value: object) -> str:
    """``value`` as a Markdown code span that shows it as it is: on one line, fenced by more
    backticks than any run it holds (so nothing in it closes the span, and HTML or Markdown
    in it stays text)."""
    text = one_line(value)
    if not text.strip():
        return "` `"
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text[0] in "` " or text[-1] in "` " else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def markdown_cell(value: object) -> str:
    """:func:`markdown_code` for a cell of a Markdown table: a pipe in it is escaped (GFM ends
    the cell there, even inside a code span)."""
    return markdown_code(value).replace("|", "\\|")


#: The first characters that make a spreadsheet read a CSV field as a formula (OWASP).
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def csv_safe(value: object) -> str:
    """``value`` as a CSV field no spreadsheet runs: a text field starting with one of
    :data:`FORMULA_PREFIXES` gets a leading ``'`` (OWASP's CSV injection guidance); a
    finite number (``-1.5``, ``+3e-2``) stays as it is."""
    text = str(value)
    if text.startswith(FORMULA_PREFIXES):
        if _NUMBER.fullmatch(text) and math.isfinite(float(text)):
            return text
        return "'" + text
    return text


# ---------------------------------------------------------------------------------------------
# Standard output
class StdoutError(OSError):
    """Standard output cannot be written (a full disk, ``> /dev/full``, a closed pipe).
    ``why``: the system's reason (``No space left on device``)."""

    why = ""

    def __str__(self) -> str:
        return str(self.strerror)


def write_stdout(text: str, what: str = "the output") -> None:
    """Write ``text`` to stdout and flush it; :class:`StdoutError` naming ``what`` and the fix
    when that fails, with stdout then pointed at /dev/null so that Python's flush at exit
    does not fail again with a traceback."""
    import sys

    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as exc:  # a StdoutError too (the CLI's guarded stdout): named again
        raise stdout_error(exc, what) from None


def stdout_error(exc: OSError, what: str = "the output") -> StdoutError:
    """The :class:`StdoutError` of a failed write of ``what`` to stdout (``exc``), with the
    process's stdout then pointed at /dev/null so that Python's flush at exit does not fail
    again with a traceback (or exit 120)."""
    import sys

    stdout = sys.__stdout__
    with contextlib.suppress(OSError, ValueError, AttributeError):
        if stdout is not None:
            os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())
    why = exc.why if isinstance(exc, StdoutError) else (exc.strerror or str(exc))
    error = StdoutError(exc.errno or 0, f"cannot write {what} to stdout: {why} (a full disk, "
                        "or a closed pipe); redirect it to a file on a disk with room")
    error.why = why
    return error
