"""MNIST on disk: fetching and verifying the four IDX files, reading them fast, and writing
synthetic look-alikes for tests and benchmarks that need only the format.

IDX format (all integers big-endian): two zero bytes, a type code (``0x08``: unsigned byte, the
only one MNIST uses and the only one accepted here), the number of dimensions, one uint32 per
dimension, then the values in C order. MNIST images have magic number 2051 (``0x00000803``) and
shape ``(N, 28, 28)``; labels have magic number 2049 (``0x00000801``), shape ``(N,)`` and values
0-9.

:func:`fetch` stores the *decompressed* files and verifies them against the official MD5 digests
of the decompressed contents (:data:`MD5`), so any mirror works, gzipped or not, whatever its
compression settings. Only numpy is imported here: no torch.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import http.client
import math
import os
import shlex
import stat
import struct
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO

import numpy as np

from mnistbench import __version__
from mnistbench.core.atomic import atomic_open, blocking_file, file_kind
from mnistbench.data.files import (
    FILES,
    IMAGE_SIDE,
    IMAGES_MAGIC,
    LABELS_MAGIC,
    MD5,
    NUM_CLASSES,
    SPLITS,
    UBYTE,
)

CHUNK_BYTES = 1 << 20  # bytes read from a source, and produced by the decompressor, per step
MAX_FILE_BYTES = 1 << 30  # bytes; the largest MNIST file is 47 MB, so a header claiming more
# than this is refused before anything is written

_KIND = {
    "train-images-idx3-ubyte": "images",
    "train-labels-idx1-ubyte": "labels",
    "t10k-images-idx3-ubyte": "images",
    "t10k-labels-idx1-ubyte": "labels",
}
_GZIP_MAGIC = b"\x1f\x8b"
_MIRROR_HINT = (
    "If this machine is offline or the public mirrors are down, put the four files "
    f"({', '.join(FILES)}; gzipped as NAME.gz or plain) in a directory and pass it with "
    "`mnistbench fetch --mirror DIR_OR_URL`, or set MNISTBENCH_MIRROR=DIR_OR_URL."
)


class DataError(Exception):
    """Bad or missing MNIST data; the message is one paragraph naming the file and the fix."""


# --------------------------------------------------------------------------- IDX checks


def _header_problem(head: bytes, kind: str | None) -> str | None:
    """What is wrong with the first 4 bytes of an IDX file (None if nothing). ``kind`` is
    ``"images"``, ``"labels"`` or None (any uint8 IDX file)."""
    if len(head) < 4:
        return f"is too short to be an IDX file ({len(head)} bytes)"
    magic = int.from_bytes(head[:4], "big")
    if head[:2] == _GZIP_MAGIC:
        return "is gzip-compressed, not a raw IDX file"
    if kind == "images" and magic != IMAGES_MAGIC:
        return f"has magic number {magic}, expected {IMAGES_MAGIC} (IDX uint8 images)"
    if kind == "labels" and magic != LABELS_MAGIC:
        return f"has magic number {magic}, expected {LABELS_MAGIC} (IDX uint8 labels)"
    if head[:2] != b"\0\0" or head[3] == 0:
        return f"has magic number {magic}, which is not an IDX header"
    if head[2] != UBYTE:
        return (f"has IDX type code 0x{head[2]:02x}, expected 0x{UBYTE:02x} (unsigned bytes, "
                "the only type MNIST uses)")
    return None


def _shape_problem(dims: tuple[int, ...], kind: str | None) -> str | None:
    """What is wrong with the dimensions of an IDX file of ``kind`` (None if nothing)."""
    if kind == "images" and dims[1:] != (IMAGE_SIDE, IMAGE_SIDE):
        side = "x".join(str(d) for d in dims[1:])
        return f"holds images of {side} pixels, expected {IMAGE_SIDE}x{IMAGE_SIDE}"
    total = 4 + 4 * len(dims) + math.prod(dims)
    if total > MAX_FILE_BYTES:
        return (f"has a header announcing {total} bytes (shape {dims}), more than the "
                f"{MAX_FILE_BYTES} bytes any MNIST file needs")
    return None


class _IdxStream:
    """Checks the bytes of one IDX file as they stream past, so a bad file is refused early:
    header (magic, type code, dimensions), size against the header, and for labels the 0-9
    range. Raises :class:`DataError` with a message that starts with a verb ("has ...")."""

    def __init__(self, kind: str | None) -> None:
        self.kind = kind
        self.head = b""  # header bytes seen so far, until the header is complete
        self.dims: tuple[int, ...] | None = None
        self.data_start = 0  # offset of the first value, bytes
        self.expected_size = 0  # header + values, bytes
        self.size = 0  # bytes seen so far

    def feed(self, chunk: bytes) -> None:
        start = self.size
        self.size += len(chunk)
        if self.dims is None:
            self.head += chunk[: 4 + 4 * 255]
            if len(self.head) < 4:
                return
            problem = _header_problem(self.head, self.kind)
            if problem:
                raise DataError(problem)
            header_len = 4 + 4 * self.head[3]
            if len(self.head) < header_len:
                return
            dims = struct.unpack(f">{self.head[3]}I", self.head[4:header_len])
            problem = _shape_problem(dims, self.kind)
            if problem:
                raise DataError(problem)
            self.dims, self.data_start = dims, header_len
            self.expected_size = header_len + math.prod(dims)
            self.head = b""
        if self.size > self.expected_size:
            raise DataError(f"is longer than its header says (shape {self.dims}: "
                            f"{self.expected_size} bytes, got at least {self.size})")
        if self.kind == "labels":
            values = np.frombuffer(chunk, dtype=np.uint8)[max(0, self.data_start - start):]
            if values.size and values.max() >= NUM_CLASSES:
                first = int(np.flatnonzero(values >= NUM_CLASSES)[0])
                index = start + max(0, self.data_start - start) + first - self.data_start
                raise DataError(f"holds label {int(values[first])} at index {index}, "
                                f"expected 0-{NUM_CLASSES - 1}")

    def finish(self) -> int:
        """Check the end of the file; return its number of items (the first dimension)."""
        if self.dims is None:
            raise DataError(f"is too short to hold an IDX header ({self.size} bytes)")
        if self.size < self.expected_size:
            raise DataError(f"is truncated: {self.size} bytes, but its header (shape "
                            f"{self.dims}) needs {self.expected_size}")
        return self.dims[0]


def _decompressed(raw: Iterator[bytes]) -> Iterator[bytes]:
    """The decoded stream of ``raw``: gunzipped (several members allowed) when it starts with
    the gzip magic bytes, as is otherwise. Bad gzip data raises :class:`DataError`."""
    first = b""
    for chunk in raw:
        first += chunk
        if len(first) >= 2:
            break
    if first[:2] != _GZIP_MAGIC:
        if first:
            yield first
        yield from raw
        return
    decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending = first
    while pending:
        while True:  # decode ``pending``, at most CHUNK_BYTES of output per step
            try:
                out = decoder.decompress(pending, CHUNK_BYTES)
            except zlib.error as exc:
                raise DataError(f"is not valid gzip data ({exc})") from None
            if out:
                yield out
            if decoder.eof:  # end of one gzip member; anything after it starts another
                pending = decoder.unused_data
                if not pending:
                    break
                decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
            else:
                pending = decoder.unconsumed_tail
                if not pending and len(out) < CHUNK_BYTES:
                    break
        pending = next(raw, b"")
    if not decoder.eof:
        raise DataError("is a truncated gzip file (the compressed stream ends early)")


def _check_stream(raw: Iterator[bytes], kind: str | None,
                  out: IO[bytes] | None = None) -> tuple[str, int]:
    """Decode ``raw``, check it as an IDX file of ``kind``, copy it to ``out`` (if given);
    return (MD5 hex digest of the decoded bytes, number of items)."""
    digest = hashlib.md5(usedforsecurity=False)
    idx = _IdxStream(kind)
    for chunk in _decompressed(raw):
        idx.feed(chunk)
        digest.update(chunk)
        if out is not None:
            out.write(chunk)
    return digest.hexdigest(), idx.finish()


def _file_chunks(handle: IO[bytes]) -> Iterator[bytes]:
    while chunk := handle.read(CHUNK_BYTES):
        yield chunk


def md5_file(path: Path | str) -> str:
    """MD5 hex digest of the file at ``path``, read in chunks."""
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        for chunk in _file_chunks(handle):
            digest.update(chunk)
    return digest.hexdigest()


# --------------------------------------------------------------------------- sources


class _NotFound(Exception):
    """The source has no such file (try the next file name of the same mirror)."""


class _Transient(Exception):
    """A network error worth retrying."""


class _Permanent(Exception):
    """An error retrying cannot fix (go to the next mirror)."""


def _is_url(mirror: str) -> bool:
    return "://" in mirror


def _location(mirror: str, filename: str) -> str:
    """Where ``filename`` is looked up in ``mirror``, as shown to the user."""
    if _is_url(mirror):
        return mirror.rstrip("/") + "/" + urllib.parse.quote(filename)
    return str(Path(mirror).expanduser() / filename)


def _local_dir(mirror: str) -> Path:
    if not _is_url(mirror):
        return Path(mirror).expanduser()
    parsed = urllib.parse.urlsplit(mirror)
    if parsed.netloc not in ("", "localhost"):
        raise _Permanent(f"file:// URLs must name a local directory, not host {parsed.netloc!r}")
    return Path(urllib.request.url2pathname(parsed.path))


def _local_chunks(handle: IO[bytes]) -> Iterator[bytes]:
    try:
        yield from _file_chunks(handle)
    except OSError as exc:
        raise _Permanent(f"reading failed ({exc.strerror or exc})") from None


def what_is(path: Path) -> str | None:
    """What ``path`` is, in words, when it is not a regular file (following symbolic links):
    "a folder", "a FIFO (named pipe)", "a symbolic link loop", "a dangling symbolic link",
    ...; None for a regular file or nothing at all."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a dangling symbolic link" if os.path.islink(path) else None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link loop"
        return f"unreadable ({exc.strerror or exc})"
    return None if stat.S_ISREG(mode) else file_kind(mode)


def open_regular(path: Path) -> IO[bytes]:
    """Open the regular file at ``path`` for reading without ever blocking: opened with
    O_NONBLOCK (a FIFO would wait for a writer) and checked with fstat, so a FIFO, a
    device or a folder raises OSError naming what it is."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"{path} is {file_kind(mode)}, not a regular file",
                          str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def _open_local(mirror: str, filename: str) -> Iterator[Iterator[bytes]]:
    folder = _local_dir(mirror)
    if not folder.is_dir():
        kind = what_is(folder)
        if kind is None and not folder.exists():
            raise _Permanent(f"no such directory {folder}")
        raise _Permanent(f"{folder} is {kind or 'a regular file'}, not a directory (a mirror "
                         f"is a folder holding the files, e.g. {filename})")
    try:
        handle = open_regular(folder / filename)
    except FileNotFoundError:
        kind = what_is(folder / filename)
        raise (_Permanent(f"it is {kind}") if kind else _NotFound("no such file")) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _Permanent("it is a symbolic link loop") from None
        raise _Permanent(f"cannot read it ({exc.strerror or exc})") from None
    with handle:
        yield _local_chunks(handle)


def _http_chunks(response, length: int | None) -> Iterator[bytes]:
    received = 0
    try:
        while block := response.read(CHUNK_BYTES):
            received += len(block)
            yield block
    except (OSError, http.client.HTTPException) as exc:
        raise _Transient(f"connection failed after {received} bytes ({exc})") from None
    if length is not None and received < length:
        raise _Transient(f"connection closed after {received} of {length} bytes")


@contextlib.contextmanager
def _open_http(url: str, timeout: float) -> Iterator[Iterator[bytes]]:
    request = urllib.request.Request(url, headers={"User-Agent": f"mnistbench/{__version__}"})
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        exc.close()
        message = f"HTTP {exc.code} {exc.reason}"
        if exc.code in (403, 404, 410):  # S3 answers 403 for a missing key
            raise _NotFound(message) from None
        if exc.code in (408, 429) or exc.code >= 500:
            raise _Transient(message) from None
        raise _Permanent(message) from None
    except urllib.error.URLError as exc:
        raise _Transient(f"{exc.reason}") from None
    except (OSError, http.client.HTTPException) as exc:
        raise _Transient(f"{type(exc).__name__}: {exc}") from None
    except ValueError as exc:
        raise _Permanent(f"bad URL ({exc})") from None
    with response:
        header = response.headers.get("Content-Length")
        length = int(header) if header and header.isdigit() else None
        yield _http_chunks(response, length)


@contextlib.contextmanager
def _open_source(mirror: str, filename: str, timeout: float) -> Iterator[Iterator[bytes]]:
    """The raw bytes of ``filename`` in ``mirror`` (a directory, ``file://`` or ``http(s)://``
    URL). Raises :class:`_NotFound`, :class:`_Transient` or :class:`_Permanent`."""
    scheme = urllib.parse.urlsplit(mirror).scheme.lower() if _is_url(mirror) else ""
    if scheme in ("http", "https"):
        opener = _open_http(_location(mirror, filename), timeout)
    elif scheme in ("", "file"):
        opener = _open_local(mirror, filename)
    else:
        raise _Permanent(f"unsupported URL scheme {scheme!r} (use a directory, file://, "
                         "http:// or https://)")
    with opener as chunks:
        yield chunks


# --------------------------------------------------------------------------- fetch


def _verify_existing(path: Path, digest: str, kind: str,
                     images: int | None) -> tuple[int | None, str | None]:
    """(items, None) if ``path`` is a valid IDX file of ``kind`` with MD5 ``digest`` (and, for
    labels, ``images`` items); (None, reason) otherwise; (None, None) if it does not exist.
    Raises :class:`DataError` when something else than a regular file is in its place (a
    folder, a FIFO, a device, a link loop), which fetch must not remove."""
    kind = what_is(path)
    if kind == "a dangling symbolic link":
        return None, None  # replaced by the fetched file; the link's target is not touched
    if kind is not None:
        raise DataError(
            f"{path} is {kind} where the MNIST file {path.name} should be; fetch neither "
            "reads nor removes it. Move it out of the way (or pass --dest another folder) "
            "and run `mnistbench fetch` again.")
    try:
        with open_regular(path) as handle:
            actual, items = _check_stream(_file_chunks(handle), kind)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or exc})"
    except DataError as exc:
        return None, str(exc)
    if actual != digest:
        return None, f"has MD5 {actual}, expected {digest}"
    if images is not None and items != images:
        return None, f"holds {items} labels but {_images_of(path.name)} holds {images} images"
    return items, None


def _images_of(labels_name: str) -> str:
    """The images file of the split whose labels file is ``labels_name``."""
    return next(images for images, labels in SPLITS.values() if labels == labels_name)


def _download(mirror: str, filename: str, target: Path, digest: str, kind: str,
              images: int | None, timeout: float) -> tuple[int, str]:
    """Stream ``filename`` from ``mirror`` into a temporary file beside ``target``, checking it;
    rename it to ``target`` only if it is valid. Returns (items, MD5)."""
    with _open_source(mirror, filename, timeout) as raw, atomic_open(target, "wb") as out:
        actual, items = _check_stream(raw, kind, out)
        if images is not None and items != images:
            raise DataError(f"holds {items} labels but {_images_of(target.name)} holds "
                            f"{images} images; the counts must agree")
        if actual != digest:
            raise DataError(f"fails its checksum: the decompressed file has MD5 {actual}, "
                            f"expected {digest}")
    return items, actual


def fetch(dest: Path | str, mirrors: Sequence[str | Path], *, retries: int = 2,
          timeout: float = 30.0, log: Callable[[str], None] | None = None,
          expected: Mapping[str, str] | None = None, backoff: float = 0.5,
          names: Sequence[str] | None = None) -> list[Path]:
    """Fetch the four MNIST files (or only ``names``, a subset of :data:`FILES`) into ``dest``
    and return their paths (decompressed, verified, in the order of :data:`FILES`).

    Per file, each mirror is tried in order, first as ``NAME.gz`` then as ``NAME``; a mirror is a
    directory, a ``file://`` URL or an ``http(s)://`` URL. Network errors are retried ``retries``
    more times per mirror, after ``backoff``, ``2 * backoff``, ... seconds; bad content (checksum,
    gzip, IDX header, size, labels) moves on to the next mirror at once. A file already in
    ``dest`` that verifies is kept as is; one that does not is removed and fetched again.
    ``timeout`` is the network timeout in seconds. ``expected`` overrides digests of
    :data:`MD5` by file name (tests use it for generated files). Every file is written to a
    temporary sibling and renamed only once verified, so ``dest`` never holds a partial file.
    Raises :class:`DataError` naming every source tried and its error.
    """
    if retries < 0:
        raise ValueError(f"retries must be 0 or more, got {retries}")
    if not timeout > 0:
        raise ValueError(f"timeout must be greater than 0 seconds, got {timeout}")
    unknown = sorted(set(expected or {}) - set(MD5))
    if unknown:
        raise ValueError(f"unknown MNIST file(s) in expected: {', '.join(unknown)}; "
                         f"allowed: {', '.join(FILES)}")
    wanted = set(FILES if names is None else names)
    if wanted - set(FILES):
        raise ValueError(f"unknown MNIST file(s): {', '.join(sorted(wanted - set(FILES)))}; "
                         f"allowed: {', '.join(FILES)}")
    digests = {**MD5, **(expected or {})}
    mirrors = [str(m) for m in mirrors]
    say = log or (lambda message: None)
    dest = Path(dest)
    if not mirrors:
        raise DataError(f"no mirror to fetch MNIST from into {dest}. {_MIRROR_HINT}")
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocking = blocking_file(dest)
        if blocking is None or blocking == dest:
            kind = what_is(dest) or "a regular file"
            raise DataError(f"the MNIST destination {dest} exists but is not a directory (it "
                            f"is {kind}); pass --dest a folder (default: resources/mnist)."
                            ) from None
        raise DataError(f"cannot create the MNIST destination {dest}: {blocking} is a file, "
                        f"not a folder. Pass --dest a folder whose parents are folders "
                        "(default: resources/mnist), or move that file out of the way."
                        ) from None
    except OSError as exc:
        raise DataError(f"cannot create the MNIST destination {dest} "
                        f"({exc.strerror or exc}); pass --dest a writable folder.") from None

    paths: list[Path] = []
    images: int | None = None  # items in the images file of the split being fetched
    for name in FILES:
        if name not in wanted:
            images = None  # a labels file fetched alone is checked by its digest
            continue
        kind, target = _KIND[name], dest / name
        labels_of = images if kind == "labels" else None
        items, reason = _verify_existing(target, digests[name], kind, labels_of)
        if items is None and reason is not None:
            say(f"{name}: the copy in {dest} {reason}; removing it and fetching it again")
            try:
                target.unlink(missing_ok=True)
            except OSError as exc:
                raise DataError(f"cannot remove the invalid MNIST file {target} "
                                f"({exc.strerror or exc}); remove it by hand and re-run "
                                "`mnistbench fetch`.") from None
        if items is None:
            items = _fetch_file(name, mirrors, target, digests[name], kind, labels_of,
                                retries=retries, timeout=timeout, backoff=backoff, say=say)
        else:
            say(f"{name}: already present and verified in {dest}")
        images = items if kind == "images" else None
        paths.append(target)
    return paths


def _download_retrying(mirror: str, filename: str, target: Path, digest: str, kind: str,
                       images: int | None, *, retries: int, timeout: float, backoff: float,
                       say: Callable[[str], None]) -> tuple[int, str]:
    """:func:`_download`, retried up to ``retries`` more times on network errors only."""
    where = _location(mirror, filename)
    for attempt in range(retries + 1):
        say(f"{target.name}: fetching {where}")
        try:
            return _download(mirror, filename, target, digest, kind, images, timeout)
        except _Transient as exc:
            if attempt == retries:
                plural = "s" if attempt else ""
                raise _Transient(f"{exc} ({attempt + 1} attempt{plural})") from None
            delay = backoff * 2 ** attempt
            say(f"{where}: {exc}; retry {attempt + 1} of {retries} in {delay:.1f} s")
            time.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


def _fetch_file(name: str, mirrors: list[str], target: Path, digest: str, kind: str,
                images: int | None, *, retries: int, timeout: float, backoff: float,
                say: Callable[[str], None]) -> int:
    """Get one verified file into ``target`` from the first mirror that has it; its item count.
    Within a mirror, ``NAME`` is tried only when ``NAME.gz`` is missing there."""
    tried: list[str] = []  # "where: what went wrong", for the error message
    content_error = False
    for mirror in mirrors:
        for filename in (f"{name}.gz", name):
            where = _location(mirror, filename)
            try:
                items, actual = _download_retrying(
                    mirror, filename, target, digest, kind, images, retries=retries,
                    timeout=timeout, backoff=backoff, say=say)
            except _NotFound as exc:
                tried.append(f"{where}: {exc}")
                say(f"{name}: {tried[-1]}")
                continue  # the plain name in the same mirror
            except (_Transient, _Permanent) as exc:
                tried.append(f"{where}: {exc}")
            except DataError as exc:
                content_error = True
                tried.append(f"{where} {exc}")
            except OSError as exc:  # every read error is converted above: this is a write
                raise DataError(f"cannot write the MNIST file {target} ({exc.strerror or exc}); "
                                "free some space or pass --dest a writable folder.") from None
            else:
                say(f"{name}: verified (MD5 {actual}) from {where}")
                return items
            say(f"{name}: {tried[-1]}")
            break  # the next mirror
    fix = _MIRROR_HINT
    if content_error:
        fix = "A mirror that serves a damaged or different file must be fixed or left out. " + fix
    raise DataError(f"could not get a verified copy of {name} into {target.parent} from any "
                    f"mirror. Tried: {'; '.join(tried)}. {fix}")


# --------------------------------------------------------------------------- reading


def _fetch_command(root: Path) -> str:
    return f"`mnistbench fetch --dest {shlex.quote(str(root))}`"


def read_idx(path: Path | str) -> np.ndarray:
    """Read a uint8 IDX file into a writable C-contiguous uint8 array of the header's shape,
    checking the magic number (type code 0x08), the dimensions and that the file size matches
    the header. Raises :class:`DataError` naming the file and the fix."""
    path = Path(path)
    fix = f"Re-run {_fetch_command(path.parent)} to download and verify the MNIST files."
    try:
        with open_regular(path) as handle:
            head = handle.read(4)
            problem = _header_problem(head, None)
            if problem is None:
                ndim = head[3]
                raw_dims = handle.read(4 * ndim)
                if len(raw_dims) < 4 * ndim:
                    problem = f"is truncated inside its header ({4 + len(raw_dims)} bytes)"
            if problem is None:
                dims = struct.unpack(f">{ndim}I", raw_dims)
                problem = _shape_problem(dims, None)
            if problem is None:
                count = math.prod(dims)
                size = os.fstat(handle.fileno()).st_size
                if size != 4 + 4 * ndim + count:
                    problem = (f"has {size} bytes, but its header (shape {dims}) needs "
                               f"{4 + 4 * ndim + count}")
            if problem is None:
                array = np.empty(count, dtype=np.uint8)
                got = handle.readinto(memoryview(array)) if count else 0
                if got != count:
                    problem = f"was cut short while reading ({got} of {count} values)"
    except FileNotFoundError:
        raise DataError(f"MNIST file {path} is missing. {fix}") from None
    except OSError as exc:
        raise DataError(f"cannot read MNIST file {path} ({exc.strerror or exc}). {fix}") from None
    if problem is not None:
        raise DataError(f"MNIST file {path} {problem}. {fix}")
    return array.reshape(dims)


def load_split(root: Path | str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """The ``split`` (``"train"`` or ``"test"``) of the MNIST files in ``root``: images uint8
    ``(N, 28, 28)`` and labels uint8 ``(N,)`` with values 0-9. Raises :class:`DataError` for
    missing or invalid files, disagreeing counts or labels outside 0-9."""
    if split not in SPLITS:
        raise DataError(f"unknown MNIST split {split!r}; allowed: {', '.join(SPLITS)}.")
    root = Path(root)
    fix = f"Run {_fetch_command(root)} to download and verify the MNIST files."
    paths = [root / name for name in SPLITS[split]]
    for path in paths:
        kind = what_is(path)
        if kind is not None and kind != "a dangling symbolic link":
            raise DataError(f"{path} is {kind} where the MNIST file {path.name} should be. "
                            f"Move it out of the way, then {fix[0].lower()}{fix[1:]}")
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        gz = [n for n in missing if (root / f"{n}.gz").is_file()]
        verb = "is" if len(gz) == 1 else "are"
        note = (f" ({', '.join(n + '.gz' for n in gz)} {verb} there, but the files must be "
                f"decompressed: `mnistbench fetch --mirror {shlex.quote(str(root))}` does it)"
                if gz else "")
        raise DataError(f"the MNIST {split} split in {root} is missing {', '.join(missing)}"
                        f"{note}. {fix}")
    images, labels = (read_idx(p) for p in paths)
    if images.ndim != 3 or images.shape[1:] != (IMAGE_SIDE, IMAGE_SIDE):
        raise DataError(f"MNIST file {paths[0]} has shape {images.shape}, expected "
                        f"(N, {IMAGE_SIDE}, {IMAGE_SIDE}) images (magic {IMAGES_MAGIC}). {fix}")
    if labels.ndim != 1:
        raise DataError(f"MNIST file {paths[1]} has shape {labels.shape}, expected (N,) labels "
                        f"(magic {LABELS_MAGIC}). {fix}")
    if len(images) == 0:
        raise DataError(f"MNIST file {paths[0]} holds no images. {fix}")
    if len(images) != len(labels):
        raise DataError(f"MNIST files disagree: {paths[0]} holds {len(images)} images but "
                        f"{paths[1]} holds {len(labels)} labels. {fix}")
    if labels.max() >= NUM_CLASSES:
        first = int(np.flatnonzero(labels >= NUM_CLASSES)[0])
        raise DataError(f"MNIST file {paths[1]} holds label {int(labels[first])} at index "
                        f"{first}, expected 0-{NUM_CLASSES - 1}. {fix}")
    return images, labels


# --------------------------------------------------------------------------- writing


def write_idx(path: Path | str, array: np.ndarray) -> Path:
    """Write a uint8 array, 1-D (labels) or 3-D (images), as an IDX file, atomically."""
    array = np.ascontiguousarray(array)
    if array.dtype != np.uint8:
        raise ValueError(f"write_idx writes uint8 arrays only, got {array.dtype}")
    if array.ndim not in (1, 3):
        raise ValueError(f"write_idx writes 1-D labels or 3-D images, got shape {array.shape}")
    header = bytes((0, 0, UBYTE, array.ndim)) + struct.pack(f">{array.ndim}I", *array.shape)
    with atomic_open(path, "wb") as out:
        out.write(header)
        out.write(array.reshape(-1).data)  # C order, no copy
    return Path(path)


def _segment_distance(yy: np.ndarray, xx: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in pixels from every pixel (yy, xx) to the segment from a to b (y, x)."""
    ab = b - a
    t = ((yy - a[0]) * ab[0] + (xx - a[1]) * ab[1]) / max(float(ab @ ab), 1e-9)
    t = np.clip(t, 0.0, 1.0)
    return np.hypot(yy - (a[0] + t * ab[0]), xx - (a[1] + t * ab[1]))


_SHIFT = 2  # pixels; synthetic digits are moved by up to this much in each direction
_STROKES = 3  # strokes per synthetic class


def _prototypes(rng: np.random.Generator) -> np.ndarray:
    """One pattern of thick strokes per class, (10, 28 + 2*_SHIFT, 28 + 2*_SHIFT), values 0-1."""
    side = IMAGE_SIDE + 2 * _SHIFT
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float32)
    protos = np.zeros((NUM_CLASSES, side, side), dtype=np.float32)
    for c in range(NUM_CLASSES):
        for _ in range(_STROKES):
            a, b = rng.uniform(_SHIFT + 5, side - _SHIFT - 5, size=(2, 2)).astype(np.float32)
            stroke = np.clip(1.8 - _segment_distance(yy, xx, a, b), 0.0, 1.0)  # ~3 px wide
            protos[c] = np.maximum(protos[c], stroke)
    return protos


def _synthetic_split(protos: np.ndarray, n: int,
                     rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` images (uint8, (n, 28, 28)) and balanced labels: a class pattern shifted by up to
    ±_SHIFT pixels, scaled in brightness (0.6-1.0), plus uniform noise of ±0.2 (of full scale)."""
    labels = rng.permutation(np.arange(n) % NUM_CLASSES).astype(np.uint8)
    images = np.empty((n, IMAGE_SIDE, IMAGE_SIDE), dtype=np.uint8)
    shifts = 2 * _SHIFT + 1
    # every shifted view of every class: (10, shifts, shifts, 28, 28)
    views = np.lib.stride_tricks.sliding_window_view(protos, (IMAGE_SIDE, IMAGE_SIDE),
                                                     axis=(1, 2))
    for start in range(0, n, 4096):  # bounded memory: 4096 float32 images at a time
        lab = labels[start:start + 4096]
        m = len(lab)
        dy, dx = rng.integers(0, shifts, size=(2, m))
        window = views[lab, dy, dx]
        gain = rng.uniform(0.6, 1.0, size=(m, 1, 1)).astype(np.float32)
        noise = rng.random(size=window.shape, dtype=np.float32)  # uniform, cheaper than normal
        pixels = window * gain + (noise - np.float32(0.5)) * np.float32(0.4)  # noise ±0.2
        pixels = np.clip(pixels, 0.0, 1.0) * np.float32(255.0)
        images[start:start + m] = np.rint(pixels).astype(np.uint8)
    return images, labels


def make_synthetic(root: Path | str, n_train: int, n_test: int, seed: int = 0) -> list[Path]:
    """Write the four MNIST file names in ``root`` holding learnable synthetic 28x28 "digits"
    (each class a fixed pattern of three random strokes, shifted and noisy): ``n_train`` training
    and ``n_test`` test samples with balanced labels 0-9. Deterministic for a ``seed``; returns
    the paths in the order of :data:`FILES`."""
    if n_train < 1 or n_test < 1:
        raise ValueError(f"n_train and n_test must be at least 1, got {n_train} and {n_test}")
    root = Path(root)
    rng = np.random.default_rng(seed)
    protos = _prototypes(rng)
    paths = []
    for split, n in (("train", n_train), ("test", n_test)):
        images, labels = _synthetic_split(protos, n, rng)
        images_name, labels_name = SPLITS[split]
        paths.append(write_idx(root / images_name, images))
        paths.append(write_idx(root / labels_name, labels))
    return paths
