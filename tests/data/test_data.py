"""Tests of mnistbench.data.mnist: fetching from mirrors, verification, atomic writes, IDX
reading and writing, and synthetic data. Fast tests use tiny generated files; the real data
test is slow."""

from __future__ import annotations

import collections
import gzip
import http.server
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from mnistbench.data import files
from mnistbench.data import mnist as data

TRAIN_IMAGES, TRAIN_LABELS = files.SPLITS["train"]
TEST_IMAGES, TEST_LABELS = files.SPLITS["test"]


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    """Reach the loopback test servers directly, whatever proxy the caller's shell sets."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                 "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


# --------------------------------------------------------------------------- helpers


def digests(root: Path) -> dict[str, str]:
    """MD5 of each of the four files in ``root``, for fetch's ``expected``."""
    return {name: data.md5_file(root / name) for name in files.FILES}


def make_mirror(folder: Path, source: Path, *, gz: bool = True,
                replace: dict[str, bytes] | None = None) -> Path:
    """A mirror directory holding the four files of ``source`` (``NAME.gz`` or plain ``NAME``);
    ``replace`` gives the raw (uncompressed) contents of some files instead."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in files.FILES:
        raw = (replace or {}).get(name, (source / name).read_bytes())
        if gz:
            (folder / f"{name}.gz").write_bytes(gzip.compress(raw, compresslevel=1, mtime=0))
        else:
            (folder / name).write_bytes(raw)
    return folder


def idx_bytes(array: np.ndarray, *, type_code: int = files.UBYTE,
              magic: int | None = None) -> bytes:
    """The IDX encoding of a uint8 array, with an optional wrong type code or magic number."""
    head = bytes((0, 0, type_code, array.ndim)) if magic is None else struct.pack(">I", magic)
    return head + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


def leftovers(folder: Path) -> list[str]:
    """Temporary or hidden files left in ``folder`` (there must be none)."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".")
                  or p.name.endswith(".part"))


def tiny_arrays(tiny: Path) -> dict[str, np.ndarray]:
    """The four arrays of the tiny data set, by file name."""
    return {name: data.read_idx(tiny / name) for name in files.FILES}


def closed_port_url() -> str:
    """An http URL on loopback where nothing listens (connections are refused at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/mnist/"


#: How long a held request waits before the server answers it with an error (s): far longer
#: than any timeout a test passes to fetch.
HOLD_S = 5.0


class MirrorServer(http.server.ThreadingHTTPServer):
    """An HTTP mirror on 127.0.0.1 serving ``files`` (name -> bytes) under /mnist/, with
    injected faults: ``fail_first`` (name -> number of 503 answers before serving),
    ``truncate`` (names sent with a full Content-Length but half a body), ``delay`` (seconds
    before answering), ``answer`` (cleared: hold every request until it is set, at most
    HOLD_S, then answer 503). ``requests`` counts GETs per name, ``answered`` the answers
    begun."""

    daemon_threads = True

    def __init__(self, files: dict[str, bytes]) -> None:
        super().__init__(("127.0.0.1", 0), MirrorHandler)
        self.files = files
        self.fail_first: dict[str, int] = {}
        self.truncate: set[str] = set()
        self.delay = 0.0
        self.answer = threading.Event()
        self.answer.set()
        self.answered = 0
        self.requests: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}/mnist/"

    def handle_error(self, request, client_address) -> None:
        """Ignore clients that hang up (timeouts, truncated answers)."""


class MirrorHandler(http.server.BaseHTTPRequestHandler):
    server: MirrorServer

    def do_GET(self) -> None:
        srv = self.server
        name = self.path.rsplit("/", 1)[-1]
        with srv.lock:
            srv.requests[name] += 1
            count = srv.requests[name]
        if srv.delay:
            time.sleep(srv.delay)
        held = not srv.answer.wait(HOLD_S)
        with srv.lock:
            srv.answered += 1
        if held:  # never answered in time: an error, not the file
            self.send_error(503, "Held")
            return
        if count <= srv.fail_first.get(name, 0):
            self.send_error(503, "Slow Down")
            return
        body = srv.files.get(name) if self.path.startswith("/mnist/") else None
        if body is None:
            self.send_error(404, "Not Found")
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2] if name in srv.truncate else body)

    def log_message(self, format, *args) -> None:
        """Keep the test output clean."""


@pytest.fixture
def http_mirror():
    """A factory of loopback HTTP mirrors; every server is shut down after the test."""
    started: list[tuple[MirrorServer, threading.Thread]] = []

    def start(files: dict[str, bytes]) -> MirrorServer:
        server = MirrorServer(files)
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        started.append((server, thread))
        return server

    yield start
    for server, thread in started:
        server.answer.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def gz_files(source: Path) -> dict[str, bytes]:
    """The four files of ``source`` gzipped, keyed ``NAME.gz`` (for an HTTP mirror)."""
    return {f"{n}.gz": gzip.compress((source / n).read_bytes(), compresslevel=1)
            for n in files.FILES}


def fetch(dest: Path, mirrors: list, expected: dict[str, str], **kwargs) -> list[Path]:
    """data.fetch with fast test defaults: no retries, no backoff, a short timeout."""
    options = {"retries": 0, "timeout": 5.0, "log": None, "backoff": 0.0, **kwargs}
    return data.fetch(dest, [str(m) for m in mirrors], expected=expected, **options)


def assert_fetched(dest: Path, source: Path, paths: list[Path]) -> None:
    """``paths`` are the four files of ``dest``, byte-identical to ``source``, with no temp."""
    assert paths == [dest / name for name in files.FILES]
    for name in files.FILES:
        assert (dest / name).read_bytes() == (source / name).read_bytes()
    assert leftovers(dest) == []


# --------------------------------------------------------------------------- fetch: sources


def test_fetch_from_gz_directory(tiny_mnist, tmp_path):
    """A directory of NAME.gz files yields the decompressed, verified files."""
    mirror = make_mirror(tmp_path / "mirror", tiny_mnist, gz=True)
    dest = tmp_path / "dest"
    assert_fetched(dest, tiny_mnist, fetch(dest, [mirror], digests(tiny_mnist)))


def test_fetch_from_plain_directory(tiny_mnist, tmp_path):
    """A directory of plain IDX files (no .gz) works too."""
    mirror = make_mirror(tmp_path / "mirror", tiny_mnist, gz=False)
    dest = tmp_path / "dest"
    assert_fetched(dest, tiny_mnist, fetch(dest, [mirror], digests(tiny_mnist)))


def test_fetch_from_file_url(tiny_mnist, tmp_path):
    """A file:// URL of a mirror directory works like the directory itself."""
    mirror = make_mirror(tmp_path / "mirror dir", tiny_mnist, gz=True)
    dest = tmp_path / "dest"
    assert_fetched(dest, tiny_mnist, fetch(dest, [mirror.as_uri()], digests(tiny_mnist)))


def test_fetch_from_http_mirror(tiny_mnist, tmp_path, http_mirror):
    """An http mirror is read once per file, as NAME.gz, and the files arrive verified."""
    server = http_mirror(gz_files(tiny_mnist))
    dest = tmp_path / "dest"
    assert_fetched(dest, tiny_mnist, fetch(dest, [server.url], digests(tiny_mnist)))
    assert server.requests == {f"{n}.gz": 1 for n in files.FILES}


def test_fetch_tries_plain_name_when_gz_is_missing(tiny_mnist, tmp_path, http_mirror):
    """A mirror answering 404 for NAME.gz is asked for the plain NAME next."""
    server = http_mirror({n: (tiny_mnist / n).read_bytes() for n in files.FILES})
    dest = tmp_path / "dest"
    assert_fetched(dest, tiny_mnist, fetch(dest, [server.url], digests(tiny_mnist)))
    assert server.requests == {**{f"{n}.gz": 1 for n in files.FILES},
                               **{n: 1 for n in files.FILES}}


def test_fetch_accepts_gzip_under_a_plain_name_and_multi_member_gzip(tiny_mnist, tmp_path):
    """Gzip content is recognised by its magic bytes, whatever the name, in several members."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for name in files.FILES:
        raw = (tiny_mnist / name).read_bytes()
        half = len(raw) // 2
        (mirror / name).write_bytes(gzip.compress(raw[:half], 1) + gzip.compress(raw[half:], 1))
    dest = tmp_path / "dest"
    assert_fetched(dest, tiny_mnist, fetch(dest, [mirror], digests(tiny_mnist)))


def test_fetch_logs_progress(tiny_mnist, tmp_path):
    """The log callback hears which source each file came from."""
    mirror = make_mirror(tmp_path / "mirror", tiny_mnist)
    lines: list[str] = []
    fetch(tmp_path / "dest", [mirror], digests(tiny_mnist), log=lines.append)
    for name in files.FILES:
        assert any(line.startswith(f"{name}: verified") and str(mirror) in line
                   for line in lines), lines


# --------------------------------------------------------------------------- fetch: retries


def test_fetch_retries_network_errors_then_succeeds(tiny_mnist, tmp_path, http_mirror):
    """A 503 answer is retried after a backoff, and the retry succeeds."""
    server = http_mirror(gz_files(tiny_mnist))
    server.fail_first = {f"{n}.gz": 1 for n in files.FILES}
    lines: list[str] = []
    dest = tmp_path / "dest"
    paths = fetch(dest, [server.url], digests(tiny_mnist), retries=1, backoff=0.01,
                  log=lines.append)
    assert_fetched(dest, tiny_mnist, paths)
    assert server.requests == {f"{n}.gz": 2 for n in files.FILES}
    assert sum("HTTP 503" in line and "retry 1 of 1" in line for line in lines) == 4


def test_fetch_falls_back_to_the_next_mirror_after_retries(tiny_mnist, tmp_path):
    """An unreachable first mirror is tried 1 + retries times, then the second mirror serves."""
    dead = closed_port_url()
    good = make_mirror(tmp_path / "mirror", tiny_mnist)
    lines: list[str] = []
    dest = tmp_path / "dest"
    paths = fetch(dest, [dead, good], digests(tiny_mnist), retries=2, log=lines.append)
    assert_fetched(dest, tiny_mnist, paths)
    first = f"{dead}{TRAIN_IMAGES}.gz"
    assert sum(line == f"{TRAIN_IMAGES}: fetching {first}" for line in lines) == 3
    assert any("retry 2 of 2" in line for line in lines)


def test_fetch_does_not_retry_a_checksum_mismatch(tiny_mnist, tmp_path, http_mirror):
    """A file that fails its checksum is not asked again; the next mirror is used at once."""
    files = gz_files(tiny_mnist)
    other = tmp_path / "other"
    data.make_synthetic(other, 64, 32, seed=1)
    files[f"{TRAIN_IMAGES}.gz"] = gzip.compress((other / TRAIN_IMAGES).read_bytes(), 1)
    server = http_mirror(files)
    good = make_mirror(tmp_path / "mirror", tiny_mnist)
    dest = tmp_path / "dest"
    paths = fetch(dest, [server.url, good], digests(tiny_mnist), retries=3)
    assert_fetched(dest, tiny_mnist, paths)
    assert server.requests[f"{TRAIN_IMAGES}.gz"] == 1
    assert server.requests[TRAIN_IMAGES] == 0


def test_fetch_retries_a_transfer_cut_short_and_leaves_no_partial_file(tiny_mnist, tmp_path,
                                                                       http_mirror):
    """A connection closed before Content-Length bytes is a network error: retried, then
    reported, and the half-written temporary file is removed."""
    server = http_mirror(gz_files(tiny_mnist))
    server.truncate = {f"{TRAIN_IMAGES}.gz"}
    dest = tmp_path / "dest"
    with pytest.raises(data.DataError) as info:
        fetch(dest, [server.url], digests(tiny_mnist), retries=1)
    message = str(info.value)
    assert f"{server.url}{TRAIN_IMAGES}.gz: connection closed after" in message
    assert "(2 attempts)" in message
    assert server.requests[f"{TRAIN_IMAGES}.gz"] == 2
    assert list(dest.iterdir()) == []


def test_fetch_times_out(tiny_mnist, tmp_path, http_mirror):
    """A server slower than ``timeout`` seconds counts as unreachable: fetch gives up while
    the server still holds every request it got (it answers none until the test ends)."""
    server = http_mirror(gz_files(tiny_mnist))
    server.answer.clear()
    dest = tmp_path / "dest"
    with pytest.raises(data.DataError, match="timed out"):
        fetch(dest, [server.url], digests(tiny_mnist), timeout=0.2)
    assert sum(server.requests.values()) >= 1 and server.answered == 0
    assert list(dest.iterdir()) == []


# --------------------------------------------------------------------------- fetch: bad input


def test_fetch_no_mirror_reachable_lists_every_source_and_the_offline_fix(tiny_mnist, tmp_path):
    """With no usable mirror the error names every source tried, its error, and how to use an
    offline mirror."""
    dead = closed_port_url()
    missing = tmp_path / "no-such-dir"
    empty = tmp_path / "empty"
    empty.mkdir()
    dest = tmp_path / "dest"
    with pytest.raises(data.DataError) as info:
        fetch(dest, [dead, missing, empty.as_uri()], digests(tiny_mnist), retries=1)
    message = str(info.value)
    assert "\n" not in message
    assert f"could not get a verified copy of {TRAIN_IMAGES} into {dest}" in message
    assert f"{dead}{TRAIN_IMAGES}.gz: " in message and "(2 attempts)" in message
    assert f"{missing / TRAIN_IMAGES}.gz: no such directory {missing}" in message
    assert f"{empty.as_uri()}/{TRAIN_IMAGES}.gz: no such file" in message
    assert f"{empty.as_uri()}/{TRAIN_IMAGES}: no such file" in message
    assert "--mirror DIR_OR_URL" in message and "MNISTBENCH_MIRROR" in message
    assert list(dest.iterdir()) == []


def test_fetch_without_mirrors_is_an_error(tmp_path):
    """An empty mirror list is refused with the offline fix."""
    with pytest.raises(data.DataError, match=r"no mirror to fetch MNIST from.*--mirror"):
        data.fetch(tmp_path / "dest", [], retries=0, timeout=1.0, log=None)


def test_fetch_unsupported_scheme(tiny_mnist, tmp_path):
    """An ftp:// mirror is reported as an unsupported URL scheme."""
    with pytest.raises(data.DataError, match="unsupported URL scheme 'ftp'"):
        fetch(tmp_path / "dest", ["ftp://example.org/mnist/"], digests(tiny_mnist))


def test_fetch_checksum_mismatch_names_file_digests_and_mirror(tiny_mnist, tmp_path):
    """A file whose decompressed MD5 differs is refused, naming file, expected, actual, mirror."""
    mirror = make_mirror(tmp_path / "mirror", tiny_mnist)
    expected = digests(tiny_mnist)
    expected[TRAIN_LABELS] = "0" * 32
    dest = tmp_path / "dest"
    with pytest.raises(data.DataError) as info:
        fetch(dest, [mirror], expected)
    message = str(info.value)
    actual = data.md5_file(tiny_mnist / TRAIN_LABELS)
    assert f"{mirror / TRAIN_LABELS}.gz fails its checksum" in message
    assert f"MD5 {actual}, expected {'0' * 32}" in message
    assert "damaged or different file" in message
    assert sorted(p.name for p in dest.iterdir()) == [TRAIN_IMAGES]


def test_fetch_official_digests_refuse_other_data(tiny_mnist, tmp_path):
    """Without ``expected``, the official MNIST digests apply and synthetic data is refused."""
    mirror = make_mirror(tmp_path / "mirror", tiny_mnist)
    dest = tmp_path / "dest"
    with pytest.raises(data.DataError, match=f"expected {files.MD5[TRAIN_IMAGES]}"):
        data.fetch(dest, [str(mirror)], retries=0, timeout=1.0, log=None)
    assert list(dest.iterdir()) == []


def test_fetch_truncated_gzip(tiny_mnist, tmp_path):
    """A .gz file cut short is reported as a truncated gzip file and nothing is kept."""
    mirror = make_mirror(tmp_path / "mirror", tiny_mnist)
    gz = mirror / f"{TRAIN_IMAGES}.gz"
    gz.write_bytes(gz.read_bytes()[:-100])
    dest = tmp_path / "dest"
    with pytest.raises(data.DataError, match=f"{TRAIN_IMAGES}.gz is a truncated gzip file"):
        fetch(dest, [mirror], digests(tiny_mnist))
    assert list(dest.iterdir()) == []


def test_fetch_corrupt_gzip(tiny_mnist, tmp_path):
    """A .gz file with damaged bytes is reported as invalid gzip data and nothing is kept."""
    mirror = make_mirror(tmp_path / "mirror", tiny_mnist)
    gz = mirror / f"{TRAIN_IMAGES}.gz"
    raw = bytearray(gz.read_bytes())
    raw[len(raw) // 2: len(raw) // 2 + 64] = bytes(64)
    gz.write_bytes(bytes(raw))
    dest = tmp_path / "dest"
    with pytest.raises(data.DataError, match=f"{TRAIN_IMAGES}.gz is not valid gzip data"):
        fetch(dest, [mirror], digests(tiny_mnist))
    assert list(dest.iterdir()) == []


def _fetch_with_replaced(tiny_mnist: Path, tmp_path: Path, name: str, raw: bytes) -> str:
    """Fetch from a mirror where ``name`` holds ``raw`` (its MD5 expected, so only the format
    checks can refuse it); return the error message after checking nothing partial is left."""
    mirror = make_mirror(tmp_path / "mirror", tiny_mnist, gz=False, replace={name: raw})
    expected = {**digests(tiny_mnist), name: data.md5_file(mirror / name)}
    dest = tmp_path / "dest"
    with pytest.raises(data.DataError) as info:
        fetch(dest, [mirror], expected)
    assert name not in {p.name for p in dest.iterdir()}
    assert leftovers(dest) == []
    return str(info.value)


def test_fetch_wrong_magic_number(tiny_mnist, tmp_path):
    """An images file with the labels magic number is refused, naming both numbers."""
    images = data.read_idx(tiny_mnist / TRAIN_IMAGES)
    raw = idx_bytes(images, magic=files.LABELS_MAGIC)
    message = _fetch_with_replaced(tiny_mnist, tmp_path, TRAIN_IMAGES, raw)
    assert f"{TRAIN_IMAGES} has magic number 2049, expected 2051" in message


def test_fetch_wrong_image_size(tiny_mnist, tmp_path):
    """Images that are not 28x28 are refused."""
    raw = idx_bytes(np.zeros((5, 27, 27), dtype=np.uint8))
    message = _fetch_with_replaced(tiny_mnist, tmp_path, TRAIN_IMAGES, raw)
    assert "holds images of 27x27 pixels, expected 28x28" in message


def test_fetch_counts_disagree(tiny_mnist, tmp_path):
    """A labels file with fewer items than its images file is refused."""
    labels = data.read_idx(tiny_mnist / TRAIN_LABELS)
    message = _fetch_with_replaced(tiny_mnist, tmp_path, TRAIN_LABELS, idx_bytes(labels[:100]))
    assert (f"{TRAIN_LABELS} holds 100 labels but {TRAIN_IMAGES} holds {len(labels)} images"
            in message)


def test_fetch_labels_out_of_range(tiny_mnist, tmp_path):
    """A label outside 0-9 is refused with its value and index."""
    labels = data.read_idx(tiny_mnist / TEST_LABELS).copy()
    labels[17] = 12
    message = _fetch_with_replaced(tiny_mnist, tmp_path, TEST_LABELS, idx_bytes(labels))
    assert f"{TEST_LABELS} holds label 12 at index 17, expected 0-9" in message


@pytest.mark.parametrize(("cut", "words"), [(-5, "is truncated: "),
                                            (+5, "is longer than its header says")])
def test_fetch_size_differs_from_header(tiny_mnist, tmp_path, cut, words):
    """A file shorter or longer than its header announces is refused."""
    raw = (tiny_mnist / TEST_IMAGES).read_bytes()
    raw = raw[:cut] if cut < 0 else raw + bytes(cut)
    message = _fetch_with_replaced(tiny_mnist, tmp_path, TEST_IMAGES, raw)
    assert f"{TEST_IMAGES} {words}" in message


def test_fetch_dest_is_a_file(tiny_mnist, tmp_path):
    """A destination that is a file is refused with a clear message."""
    dest = tmp_path / "dest"
    dest.write_text("not a folder")
    with pytest.raises(data.DataError, match="exists but is not a directory"):
        fetch(dest, [tmp_path], digests(tiny_mnist))


def test_fetch_rejects_unknown_expected_names(tmp_path):
    """``expected`` may only name the four MNIST files."""
    with pytest.raises(ValueError, match="unknown MNIST file"):
        data.fetch(tmp_path, [str(tmp_path)], retries=0, timeout=1.0, log=None,
                   expected={"train-images": "0" * 32})


def test_interrupted_fetch_leaves_no_partial_file(tiny_mnist, tmp_path, monkeypatch):
    """A KeyboardInterrupt in the middle of a file removes its temporary file."""
    mirror = make_mirror(tmp_path / "mirror", tiny_mnist)
    monkeypatch.setattr(data, "CHUNK_BYTES", 4096)
    feed = data._IdxStream.feed
    calls = collections.Counter()

    def interrupting_feed(self, chunk):
        calls["feed"] += 1
        if calls["feed"] == 3:
            raise KeyboardInterrupt
        feed(self, chunk)

    monkeypatch.setattr(data._IdxStream, "feed", interrupting_feed)
    dest = tmp_path / "dest"
    with pytest.raises(KeyboardInterrupt):
        fetch(dest, [mirror], digests(tiny_mnist))
    assert list(dest.iterdir()) == []


# --------------------------------------------------------------------------- fetch: dest state


def test_present_verified_files_are_not_fetched_again(tiny_mnist, tmp_path):
    """Once fetched, the files are kept as they are even when the mirror is gone."""
    mirror = make_mirror(tmp_path / "mirror", tiny_mnist)
    dest = tmp_path / "dest"
    fetch(dest, [mirror], digests(tiny_mnist))
    before = {n: (dest / n).stat() for n in files.FILES}
    shutil.rmtree(mirror)
    lines: list[str] = []
    paths = fetch(dest, [mirror], digests(tiny_mnist), log=lines.append)
    assert_fetched(dest, tiny_mnist, paths)
    for name in files.FILES:
        after = (dest / name).stat()
        assert (after.st_ino, after.st_mtime_ns) == (before[name].st_ino,
                                                     before[name].st_mtime_ns)
        assert f"{name}: already present and verified in {dest}" in lines


def test_corrupt_file_in_dest_is_replaced(tiny_mnist, tmp_path):
    """A file in dest that fails verification is fetched again and replaced."""
    mirror = make_mirror(tmp_path / "mirror", tiny_mnist)
    dest = tmp_path / "dest"
    fetch(dest, [mirror], digests(tiny_mnist))
    damaged = bytearray((dest / TEST_IMAGES).read_bytes())
    damaged[100] ^= 0xFF
    (dest / TEST_IMAGES).write_bytes(bytes(damaged))
    lines: list[str] = []
    paths = fetch(dest, [mirror], digests(tiny_mnist), log=lines.append)
    assert_fetched(dest, tiny_mnist, paths)
    assert any(line.startswith(f"{TEST_IMAGES}: the copy in {dest} has MD5")
               for line in lines), lines


def test_corrupt_file_in_dest_is_removed_when_no_mirror_has_it(tiny_mnist, tmp_path):
    """After a failed fetch, dest holds no file that fails verification."""
    mirror = make_mirror(tmp_path / "mirror", tiny_mnist)
    dest = tmp_path / "dest"
    fetch(dest, [mirror], digests(tiny_mnist))
    (dest / TRAIN_LABELS).write_bytes(b"\0\0\x08\x01garbage")
    shutil.rmtree(mirror)
    with pytest.raises(data.DataError, match=f"could not get a verified copy of {TRAIN_LABELS}"):
        fetch(dest, [mirror], digests(tiny_mnist))
    assert sorted(p.name for p in dest.iterdir()) == sorted(set(files.FILES) - {TRAIN_LABELS})


# --------------------------------------------------------------------------- reading


def test_load_split_shapes_dtypes_and_labels(tiny_mnist):
    """Both splits load as uint8 (N, 28, 28) images and (N,) labels covering all ten classes."""
    for split, n in (("train", 512), ("test", 256)):  # the sizes conftest.tiny_mnist writes
        images, labels = data.load_split(tiny_mnist, split)
        assert images.shape == (n, 28, 28) and images.dtype == np.uint8
        assert labels.shape == (n,) and labels.dtype == np.uint8
        assert images.flags.writeable and images.flags.c_contiguous
        assert np.bincount(labels, minlength=10).min() >= n // 10


def test_write_idx_read_idx_round_trip(tmp_path):
    """write_idx writes the standard IDX header and read_idx returns the same array."""
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, size=(7, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=7, dtype=np.uint8)
    data.write_idx(tmp_path / "images", images)
    data.write_idx(tmp_path / "labels", labels)
    assert (tmp_path / "images").read_bytes()[:16] == struct.pack(">IIII", 2051, 7, 28, 28)
    assert (tmp_path / "labels").read_bytes()[:8] == struct.pack(">II", 2049, 7)
    np.testing.assert_array_equal(data.read_idx(tmp_path / "images"), images)
    np.testing.assert_array_equal(data.read_idx(tmp_path / "labels"), labels)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(("array", "words"), [
    (np.zeros(3, dtype=np.int64), "uint8 arrays only"),
    (np.zeros((3, 28), dtype=np.uint8), "1-D labels or 3-D images"),
])
def test_write_idx_rejects_other_arrays(tmp_path, array, words):
    """write_idx refuses other dtypes and dimensions, writing nothing."""
    with pytest.raises(ValueError, match=words):
        data.write_idx(tmp_path / "x", array)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("raw", "words"), [
    (gzip.compress(idx_bytes(np.zeros(4, dtype=np.uint8)), mtime=0), "is gzip-compressed"),
    (idx_bytes(np.zeros(4, dtype=np.uint8), type_code=0x0D), "type code 0x0d, expected 0x08"),
    (b"PK\x03\x04rest", "not an IDX header"),
    (b"\0\0", "too short to be an IDX file"),
    (b"\0\0\x08\x03\0\0\0\x02", "truncated inside its header"),
    (idx_bytes(np.zeros((2, 28, 28), dtype=np.uint8))[:-1], "has 1583 bytes, but its header"),
    (idx_bytes(np.zeros(5, dtype=np.uint8)) + b"x", "has 14 bytes, but its header"),
])
def test_read_idx_refuses_bad_files(tmp_path, raw, words):
    """read_idx names the file, the problem and the fix for each kind of damage."""
    path = tmp_path / "bad-idx"
    path.write_bytes(raw)
    with pytest.raises(data.DataError) as info:
        data.read_idx(path)
    message = str(info.value)
    assert f"MNIST file {path} " in message and words in message
    assert f"mnistbench fetch --dest {tmp_path}" in message


def test_read_idx_missing_file(tmp_path):
    """A missing file is reported with the fetch command."""
    with pytest.raises(data.DataError, match=r"is missing\. Re-run `mnistbench fetch --dest"):
        data.read_idx(tmp_path / "nothing")


def test_load_split_missing_files_say_how_to_fetch(tmp_path):
    """Missing split files are named, with `mnistbench fetch --dest ROOT` (quoted if needed)."""
    root = tmp_path / "my data"
    root.mkdir()
    with pytest.raises(data.DataError) as info:
        data.load_split(root, "test")
    message = str(info.value)
    assert f"missing {TEST_IMAGES}, {TEST_LABELS}" in message
    assert f"`mnistbench fetch --dest '{root}'`" in message


def test_load_split_on_a_gz_mirror_explains_decompression(tiny_mnist, tmp_path):
    """Pointing the reader at a folder of .gz files says they must be fetched (decompressed)."""
    mirror = make_mirror(tmp_path / "mirror", tiny_mnist, gz=True)
    with pytest.raises(data.DataError) as info:
        data.load_split(mirror, "train")
    assert (f"({TRAIN_IMAGES}.gz, {TRAIN_LABELS}.gz are there, but the files must be "
            f"decompressed: `mnistbench fetch --mirror {mirror}` does it)") in str(info.value)


def test_load_split_unknown_split(tiny_mnist):
    """Only 'train' and 'test' are splits."""
    with pytest.raises(data.DataError, match="unknown MNIST split 'val'; allowed: train, test"):
        data.load_split(tiny_mnist, "val")


def _split_dir(tmp_path: Path, images: np.ndarray, labels: np.ndarray) -> Path:
    root = tmp_path / "split"
    data.write_idx(root / TRAIN_IMAGES, images)
    data.write_idx(root / TRAIN_LABELS, labels)
    return root


@pytest.mark.parametrize(("images", "labels", "words"), [
    (np.zeros((4, 27, 27), np.uint8), np.zeros(4, np.uint8), "expected (N, 28, 28) images"),
    (np.zeros((4, 28, 28), np.uint8), np.zeros((4, 1, 1), np.uint8), "expected (N,) labels"),
    (np.zeros((4, 28, 28), np.uint8), np.zeros(3, np.uint8), "holds 4 images but"),
    (np.zeros((0, 28, 28), np.uint8), np.zeros(0, np.uint8), "holds no images"),
    (np.zeros((4, 28, 28), np.uint8), np.array([1, 2, 10, 3], np.uint8),
     "holds label 10 at index 2, expected 0-9"),
])
def test_load_split_refuses_inconsistent_files(tmp_path, images, labels, words):
    """load_split checks shapes, counts and the label range, naming the file and the fix."""
    root = _split_dir(tmp_path, images, labels)
    with pytest.raises(data.DataError) as info:
        data.load_split(root, "train")
    assert words in str(info.value)
    assert f"mnistbench fetch --dest {root}" in str(info.value)


# --------------------------------------------------------------------------- synthetic data


def test_make_synthetic_is_deterministic_per_seed(tmp_path):
    """The same seed writes the same bytes; another seed writes others."""
    a = data.make_synthetic(tmp_path / "a", 40, 20, seed=5)
    b = data.make_synthetic(tmp_path / "b", 40, 20, seed=5)
    c = data.make_synthetic(tmp_path / "c", 40, 20, seed=6)
    assert [p.name for p in a] == list(files.FILES)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    assert a[0].read_bytes() != c[0].read_bytes()


def test_make_synthetic_is_learnable(tiny_mnist):
    """A ridge-regression classifier on raw pixels exceeds 95% test accuracy on tiny_mnist."""
    x, y = data.load_split(tiny_mnist, "train")
    xt, yt = data.load_split(tiny_mnist, "test")
    features = x.reshape(len(x), -1) / 255.0
    weights = np.linalg.solve(features.T @ features + 10.0 * np.eye(features.shape[1]),
                              features.T @ np.eye(10)[y])
    accuracy = ((xt.reshape(len(xt), -1) / 255.0 @ weights).argmax(1) == yt).mean()
    assert accuracy > 0.95


def test_make_synthetic_rejects_empty_splits(tmp_path):
    """Both splits need at least one sample."""
    with pytest.raises(ValueError, match="at least 1"):
        data.make_synthetic(tmp_path, 0, 10)


def test_data_module_does_not_import_torch():
    """Importing mnistbench.data.mnist stays light: no torch."""
    code = "import sys, mnistbench.data.mnist; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# --------------------------------------------------------------------------- real data


def test_official_digests_match_the_mirror_md5sums(real_mnist_mirror):
    """files.MD5 equals the digests the offline mirror publishes for the decompressed files."""
    published = dict(reversed(line.split()) for line in
                     (real_mnist_mirror / "MD5SUMS.raw").read_text().splitlines() if line)
    assert published == files.MD5
    assert files.DEFAULT_MIRRORS == ("https://ossci-datasets.s3.amazonaws.com/mnist/",
                                    "http://yann.lecun.com/exdb/mnist/")


@pytest.mark.slow
def test_real_mnist_fetch_verify_and_load(real_mnist):
    """The real files fetched from ../shared/mnist match the official digests and load as
    60000 / 10000 samples (how fast: benchmarks/bench_setup.py)."""
    for name in files.FILES:
        assert data.md5_file(real_mnist / name) == files.MD5[name]
    images, labels = data.load_split(real_mnist, "train")
    assert images.shape == (60000, 28, 28) and labels.shape == (60000,)
    assert np.bincount(labels).tolist()[:3] == [5923, 6742, 5958]
    test_images, test_labels = data.load_split(real_mnist, "test")
    assert test_images.shape == (10000, 28, 28) and test_labels.shape == (10000,)
    assert labels[:5].tolist() == [5, 0, 4, 1, 9] and test_labels[:3].tolist() == [7, 2, 1]


def test_load_split_names_a_fifo_in_place_of_a_file(tiny_mnist, tmp_path):
    """The trainer's reader names a FIFO (or a folder) where an MNIST file should be, and
    never opens it (it would block for ever)."""
    import os

    root = tmp_path / "data"
    shutil.copytree(tiny_mnist, root)
    (root / files.FILES[0]).unlink()
    os.mkfifo(root / files.FILES[0])
    with pytest.raises(data.DataError) as info:
        data.load_split(root, "train")
    assert str(info.value).startswith(f"{root / files.FILES[0]} is a FIFO (named pipe) where "
                                      "the MNIST file")
    with pytest.raises(data.DataError, match=r"is a FIFO \(named pipe\), not a regular file"):
        data.read_idx(root / files.FILES[0])
