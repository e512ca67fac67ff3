"""A fork server for timed cells: one process imports torch and the trainer once, then starts
every ``mnistbench train`` of a study by forking, so a cell's start costs a fork (~0.1 s)
instead of ``import torch`` (2.7-4.9 s on the 2-core development machine).

Each cell is still its own process, forked from a parent that has only imported modules: no
tensor, no thread pool, no CUDA context exists before the fork, so the child starts from the
same state a fresh process reaches after its imports. The child takes the client's working
folder, environment and standard streams (passed as file descriptors over a Unix socket), runs
``mnistbench train`` with the client's arguments and exits; the client waits, forwards the
signals it receives (a stopped Snakemake job stops its cell) and exits with the cell's code.

The server serves only what it can serve faithfully and the client runs the cell itself
otherwise (nothing but the start-up cost differs):

- only ``train``, only for clients of the same user (``SO_PEERCRED``);
- only when every environment variable read while libraries load (``OMP_*``, ``MKL_*``,
  ``LD_*``, ``PYTHON*``, ... see :func:`load_time_environment`) is the same in the client as
  in the server, because the server loaded those libraries under its own values;
- a server that cannot be reached, or that refuses, makes the client say so on stderr. A
  server that is still importing is waited for (up to 30 s); one whose process has ended
  (a zombie counts as ended) is not waited for at all.

A cell never outlives its server or its client, so it never runs, or writes ``summary.json``,
after its job has ended (and released the timing lock): the cell asks the kernel for SIGKILL
when the server dies (``PR_SET_PDEATHSIG``), the server stops the cell of a client that has
gone, and a client that loses its server makes sure its cell has ended before it exits 1 (a
failed job).

Every summary records how its process started (``env.launch``: ``exec`` or ``fork-server``)
and ``timing.startup_s`` counts from the client's start, so the overhead stays visible.

Start a server: ``python -m mnistbench.launch.forkserver --socket PATH [--parent-pid PID]`` (the
workflow does it, see :func:`spawn`), and point clients at it with ``$MNISTBENCH_FORKSERVER``.
The server ends when its parent process ends, after ``--idle-timeout`` seconds without
clients, or on SIGTERM/SIGINT; a server started by :func:`spawn` then removes its private
folder (``/tmp/mnistbench-fs-OWNER-*``), and :func:`spawn` removes the folders left by owners
and servers that were both killed outright.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import json
import os
import selectors
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from mnistbench.core import cpuruntime, provenance
from mnistbench.core.clock import process_start_unix
from mnistbench.core.devices import Loader
from mnistbench.core.envvars import FORKSERVER_SOCKET_VAR, LAUNCH_VAR, PROCESS_START_VAR

# Environment variables (mnistbench.core.envvars): FORKSERVER_SOCKET_VAR names the server's
# socket, and clients delegate ``train`` when it is set; a forked cell gets LAUNCH_VAR (how the
# process started, recorded as env.launch) and PROCESS_START_VAR (when the client started,
# Unix s, so that timing.startup_s counts from the client's start).
#: Prefixes and names of environment variables that libraries read when they load (thread
#: pools, allocators, the dynamic loader, the interpreter): they must match between client and
#: server, or the forked cell would run under the server's values.
LOAD_TIME_PREFIXES = ("OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "GOTO_", "VECLIB_",
                      "NUMEXPR_", "LD_", "PYTHON", "MALLOC_", "GLIBC_", "TORCH_", "PYTORCH_",
                      "CUDA_", "NCCL_", "NVIDIA_", "DNNL_", "ONEDNN_", "ATEN_")
#: Modules the server imports before it serves (everything `mnistbench train` imports) ...
PRELOAD = ("mnistbench.measure.entry", "mnistbench.measure.train", "psutil")
#: ... and, where a cell it serves uses the blog's pipeline (Loader.DATALOADER), what that
#: pipeline imports: torchvision, about 2 s more on 2 cores (most of it torch._dynamo, which
#: torchvision.ops imports). A cell of that loader from a server without them imports them itself.
DATALOADER_PRELOAD = ("torchvision.datasets", "torchvision.transforms")
_HEADER = struct.Struct("!I")  # length of the JSON request that follows, in bytes
_MAX_REQUEST = 1 << 20  # bytes
_KILL_GRACE_S = 5.0  # s between SIGTERM and SIGKILL for a cell whose client vanished
_ORPHAN_WAIT_S = 2.0  # s a client that lost its server waits for the cell to die with it
#: Prefix of the private folders of :func:`spawn` (then the owner's pid and a random part).
FOLDER_PREFIX = "mnistbench-fs-"
_PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h): the signal a process gets when its
#                        parent dies


class ServerError(Exception):
    """A fork server that cannot serve: one paragraph naming the path and the fix."""


def preload_modules(loaders: Iterable[str] | None = None) -> tuple[str, ...]:
    """What a server imports before it serves cells of ``loaders`` (None: of any loader)."""
    if loaders is None or Loader.DATALOADER in loaders:
        return PRELOAD + DATALOADER_PRELOAD
    return PRELOAD


def load_time_environment(env: dict[str, str]) -> dict[str, str]:
    """The variables of ``env`` that libraries read when they load (see LOAD_TIME_PREFIXES)."""
    return {k: v for k, v in env.items() if k.startswith(LOAD_TIME_PREFIXES)}


# --------------------------------------------------------------------------------------------
# Server.
@dataclass
class _Cell:
    conn: socket.socket
    kill_at: float | None = None  # monotonic time of the SIGKILL once the client has gone
    exited: bool = False


@dataclass
class Server:
    """The serving loop; one process, one thread, forks only from the main thread."""

    path: Path
    parent_pid: int | None = None
    idle_timeout: float = 0.0  # s without cells before the server ends; 0: never
    remove_folder: bool = False  # remove the socket's folder (made for this server) at the end
    loaders: tuple[str, ...] | None = None  # the loaders of the cells it serves; None: any
    cells: dict[int, _Cell] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)  # its load-time variables

    def serve(self) -> int:
        """Accept clients until the parent ends, the idle timeout passes or a signal comes.
        Raises ServerError when the socket path cannot be served."""
        try:
            return self._serve()
        finally:
            if self.remove_folder:  # only a folder made for this server, and only when empty
                with contextlib.suppress(OSError):
                    self.path.parent.rmdir()

    def _serve(self) -> int:
        _check_socket_path(self.path)  # before the imports: a bad path fails at once
        stopping = []  # signals received; installed first, so that any stop cleans up
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda signum, frame: stopping.append(signum))
        started = time.perf_counter()
        modules = preload_modules(self.loaders)
        for name in modules:
            __import__(name)
        # The digest of the code just loaded, once: every forked cell inherits it (cached)
        # instead of parsing the measuring code again in its own start-up.
        provenance.running_code_digest()
        self.environment = load_time_environment(dict(os.environ))
        _log(f"imported {', '.join(modules)} in {time.perf_counter() - started:.2f} s")
        _libc()  # loaded before any fork, so that a cell only calls it
        listener = _bind(self.path)
        selector = selectors.DefaultSelector()
        selector.register(listener, selectors.EVENT_READ)
        self.listener, self.selector = listener, selector
        last_busy = time.monotonic()
        served = 0
        _log(f"serving {self.path}")
        try:
            while not stopping:
                for key, _ in selector.select(timeout=0.2):
                    if key.fileobj is listener:
                        try:
                            served += self._accept()
                        except OSError as exc:  # one client's trouble never ends the server
                            _log(f"client failed: {exc}")
                    else:
                        self._client_event(key.data)
                self._reap()
                self._enforce_kills()
                if self.cells:
                    last_busy = time.monotonic()
                elif self._parent_gone() or (
                        self.idle_timeout and time.monotonic() - last_busy > self.idle_timeout):
                    break
        finally:
            for pid in list(self.cells):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            selector.close()
            listener.close()
            _remove_socket(self.path)
        why = (f"signal {stopping[0]}" if stopping else "parent ended" if self._parent_gone()
               else "idle")
        _log(f"served {served} cell(s); stopped ({why})")
        return 0

    def _parent_gone(self) -> bool:
        return self.parent_pid is not None and os.getppid() != self.parent_pid

    def _accept(self) -> int:
        """Serve one client: 1 when a cell was forked, else 0."""
        conn, _ = self.listener.accept()
        conn.settimeout(10.0)
        try:
            request, fds = _receive_request(conn)
        except (OSError, ValueError) as exc:
            _reply(conn, {"refused": f"bad request: {exc}"})
            conn.close()
            return 0
        try:
            refusal = self._refusal(conn, request, fds)
            if refusal:
                _log(f"refused a client: {refusal}")
                _reply(conn, {"refused": refusal})
                conn.close()
                return 0
            server_pid = os.getpid()
            pid = os.fork()
            if pid == 0:  # the cell: drop the server's sockets, keep only its own streams
                server_fds = [self.listener.fileno(), self.selector.fileno(), conn.fileno(),
                              *(c.conn.fileno() for c in self.cells.values())]
                _run_child(request, fds, close=server_fds, parent=server_pid)
        finally:
            for fd in fds:
                os.close(fd)
        self.cells[pid] = _Cell(conn)
        self.selector.register(conn, selectors.EVENT_READ, data=pid)
        with contextlib.suppress(OSError):  # a client gone already: its EOF stops the cell
            _reply(conn, {"pid": pid})
        conn.setblocking(False)
        _log(f"cell {pid}: mnistbench {' '.join(request['argv'][:1])} in {request['cwd']}")
        return 1

    def _refusal(self, conn: socket.socket, request: dict, fds: list[int]) -> str:
        """Why this request is not served here ('' when it is)."""
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", creds)
        if uid != os.geteuid():
            return f"client uid {uid} is not the server's uid {os.geteuid()}"
        argv, env = request.get("argv"), request.get("env")
        if not (isinstance(argv, list) and argv[:1] == ["train"]
                and all(isinstance(a, str) for a in argv)):
            return "the fork server runs only `mnistbench train`"
        if not isinstance(env, dict) or not isinstance(request.get("cwd"), str):
            return "request lacks env or cwd"
        if len(fds) != 3:
            return f"expected 3 file descriptors (stdin, stdout, stderr), got {len(fds)}"
        differ = sorted(set(load_time_environment(env).items())
                        ^ set(self.environment.items()))
        if differ:
            names = sorted({k for k, _ in differ})
            return ("the client's load-time environment differs from the server's in "
                    f"{', '.join(names)}")
        return ""

    def _client_event(self, pid: int) -> None:
        cell = self.cells.get(pid)
        if cell is None:
            return
        try:
            gone = cell.conn.recv(1) == b""
        except BlockingIOError:
            return
        except OSError:
            gone = True
        if gone and cell.kill_at is None:  # the client has gone: stop its cell
            self.selector.unregister(cell.conn)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            cell.kill_at = time.monotonic() + _KILL_GRACE_S

    def _enforce_kills(self) -> None:
        now = time.monotonic()
        for pid, cell in self.cells.items():
            if cell.kill_at is not None and now >= cell.kill_at:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                cell.kill_at = float("inf")

    def _reap(self) -> None:
        while self.cells:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            cell = self.cells.pop(pid, None)
            if cell is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            if cell.kill_at is None:
                self.selector.unregister(cell.conn)
            with contextlib.suppress(OSError):
                cell.conn.setblocking(True)
                _reply(cell.conn, {"exit": 128 - code if code < 0 else code})
            cell.conn.close()


def _run_child(request: dict, fds: list[int], close: list[int], parent: int) -> None:
    """In the forked cell: die with the server (pid ``parent``), take over the client's
    streams, folder and environment, close the server's descriptors ``close``, run the command
    and exit with its code (never returns)."""
    code = 1
    try:
        _die_with_parent(parent)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in {*fds, *close} - {0, 1, 2}:
            with contextlib.suppress(OSError):
                os.close(fd)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own stream
        sys.stdout = open(1, "w", closefd=False, buffering=1)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False, buffering=1)  # noqa: SIM115
        os.chdir(request["cwd"])
        env = dict(request["env"])
        env.pop(FORKSERVER_SOCKET_VAR, None)
        env.pop(FORKSERVER_SOCKET_VAR + "_PID", None)
        env[LAUNCH_VAR] = "fork-server"
        env[PROCESS_START_VAR] = repr(float(request.get("start") or time.time()))
        os.environ.clear()
        os.environ.update(env)
        sys.argv = ["mnistbench", *request["argv"]]
        from mnistbench.measure import entry

        code = entry.main(request["argv"][1:])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        # Exit like a process that ran `mnistbench train`: exit handlers run (e.g. DataLoader
        # and multiprocessing clean-up), streams are flushed; never return into the server.
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _libc():
    """The C library (for prctl), or None where it cannot be loaded."""
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL(None, use_errno=True)
        except OSError:
            _LIBC = False
    return _LIBC or None


_LIBC = None


def _die_with_parent(parent: int) -> None:
    """In a just-forked cell: have the kernel SIGKILL this process when its parent (the server,
    pid ``parent``) dies, and exit at once if it has died already (between the fork and now)."""
    libc = _libc()
    if libc is not None:
        with contextlib.suppress(AttributeError):
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:
        os._exit(128 + signal.SIGKILL)


def _check_socket_path(path: Path) -> None:
    """Raise ServerError when ``path`` cannot become the server's socket; what is there may be
    only a stale socket (replaced), never a folder or another file."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise ServerError(
            f"cannot use {path} as the fork server's socket path ({exc.strerror or exc}); pass "
            "another --socket path, in a folder of your own") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise ServerError(
            f"a folder is at the fork server's socket path {path}: the server binds a Unix "
            "socket there and never removes a folder. Remove the folder (rmdir "
            f"{path}, once nothing in it is needed) or pass another --socket path")
    if mode is not None and not stat.S_ISSOCK(mode):
        raise ServerError(
            f"a file that is not a socket is at the fork server's socket path {path}: the "
            "server replaces only a stale socket. Move the file away or pass another --socket "
            "path")
    if not path.parent.is_dir():
        raise ServerError(
            f"the folder of the fork server's socket path {path} does not exist: create "
            f"{path.parent} or pass another --socket path")


def _bind(path: Path) -> socket.socket:
    """A listening Unix socket at ``path`` (a stale socket there is replaced), readable by this
    user only; ServerError when it cannot be bound."""
    _check_socket_path(path)
    _remove_socket(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(path))
        os.chmod(path, 0o600)
        listener.listen(16)
    except OSError as exc:
        listener.close()
        raise ServerError(
            f"cannot bind the fork server's socket at {path} ({exc.strerror or exc}); pass "
            "another --socket path: at most 107 bytes long, in a folder you can write") from None
    return listener


def _remove_socket(path: Path) -> None:
    """Remove the socket at ``path``; anything else there (a folder, a file) stays."""
    with contextlib.suppress(OSError):
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat from field 3 (state) on; None when there is no such
    process (or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended: a zombie (ended, not yet reaped by its
    parent) counts as ended, unlike for ``os.kill(pid, 0)``."""
    if pid <= 0:
        return False
    fields = _stat_fields(pid)
    if fields is not None:
        return fields[0] not in ("Z", "X")
    if os.path.isdir("/proc"):
        return False  # /proc is there and the process is not
    try:  # no /proc: the signal test, zombies included
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _start_ticks(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, /proc/PID/stat field 22): with the
    pid it names one process, also after the pid is reused; None when unknown."""
    fields = _stat_fields(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def _receive_request(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(conn, 65536, 3)
    try:
        while len(data) < _HEADER.size:
            chunk = conn.recv(65536)
            if not chunk:
                raise ValueError("connection closed in the header")
            data += chunk
        (length,) = _HEADER.unpack_from(data)
        if length > _MAX_REQUEST:
            raise ValueError(f"request of {length} bytes")
        while len(data) < _HEADER.size + length:
            chunk = conn.recv(65536)
            if not chunk:
                raise ValueError("connection closed in the request")
            data += chunk
        request = json.loads(data[_HEADER.size:_HEADER.size + length])
        if not isinstance(request, dict):
            raise ValueError("the request is not a JSON object")
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return request, list(fds)


def _log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} fork server {os.getpid()}: {message}", flush=True)


def _reply(conn: socket.socket, message: dict) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


# --------------------------------------------------------------------------------------------
# Client.
def delegate(argv: list[str], path: str | None = None, wait_s: float = 30.0) -> int | None:
    """Run ``mnistbench <argv>`` in the fork server at ``path`` (default: $MNISTBENCH_FORKSERVER)
    and return its exit code; None when no server serves it (the caller then runs it itself).

    A server that is still starting (its socket not there yet while the process named by
    ``$MNISTBENCH_FORKSERVER_PID`` lives) is waited for up to ``wait_s`` seconds; one whose
    process has ended (or is a zombie) is not waited for. When the server ends before the
    cell reports its exit code, the cell is made sure to have ended and the result is 1.
    """
    path = path or os.environ.get(FORKSERVER_SOCKET_VAR, "")
    if not path:
        return None
    start = process_start_unix()
    if os.path.isdir(path):
        _note(f"fork server socket {path} is a folder, not a socket: remove the folder or "
              f"point ${FORKSERVER_SOCKET_VAR} at a running fork server's socket (or unset "
              "it); starting the cell as a new process")
        return None
    conn = _connect(path, wait_s)
    if isinstance(conn, str):
        _note(f"fork server {path} not reachable ({conn}); starting the cell as a new process")
        return None
    with conn:
        request = {"argv": list(argv), "cwd": os.getcwd(), "env": dict(os.environ),
                   "start": start}
        body = json.dumps(request).encode()
        socket.send_fds(conn, [_HEADER.pack(len(body)) + body], [0, 1, 2])
        reader = conn.makefile("rb")
        first = _read_message(reader)
        if "refused" in first:
            _note(f"fork server {path} refused the cell ({first['refused']}); starting it as "
                  "a new process")
            return None
        if "pid" not in first:
            _note(f"fork server {path} answered {first!r}; starting the cell as a new process")
            return None
        pid = int(first["pid"])
        started = _start_ticks(pid)  # the cell lives: a forked cell is reaped after this reply
        forward = {sig: signal.signal(sig, lambda signum, frame: _send(pid, signum))
                   for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)}
        try:
            last = _read_message(reader)
        finally:
            for sig, handler in forward.items():
                signal.signal(sig, handler)
    if "exit" not in last:
        stopped = _stop_orphan(pid, started)
        _note(f"fork server {path} ended before cell process {pid} reported its exit code; "
              + ("the cell has ended too" if stopped else
                 f"cell process {pid} could not be stopped, stop it by hand"))
        return 1
    return int(last["exit"])


def _stop_orphan(pid: int, started: str | None, wait_s: float | None = None) -> bool:
    """Make sure the cell ``pid`` (started at ``started`` ticks) of a server that has gone has
    ended before the client exits (and its job releases the timing lock): it dies with its
    server (PR_SET_PDEATHSIG); one still running after ``wait_s`` s gets SIGKILL. True when it
    has ended."""
    wait_s = _ORPHAN_WAIT_S if wait_s is None else wait_s

    def running() -> bool:
        return _alive(pid) and started is not None and _start_ticks(pid) == started

    for attempt in range(2):
        deadline = time.monotonic() + wait_s
        while running():
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        else:
            return True
        if attempt == 0:
            _send(pid, signal.SIGKILL)
    return False


def _connect(path: str, wait_s: float) -> socket.socket | str:
    """A connection to the server at ``path``, or why there is none (a string)."""
    deadline = time.monotonic() + wait_s
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(path)
            return conn
        except OSError as exc:
            conn.close()
            error = f"{type(exc).__name__}: {exc.strerror or exc}"
            starting = _server_starting()
            if starting is not True:
                return f"{error}; {starting}" if starting else error
            if time.monotonic() >= deadline:
                return f"{error}; the server did not open it within {wait_s:g} s"
        time.sleep(0.1)


def wait_while_starting(wait_s: float = 120.0) -> bool:
    """Wait while the server named by ``$MNISTBENCH_FORKSERVER`` is still starting (importing
    torch, before it binds its socket), at most ``wait_s`` s, so that timed work that does not
    go through it (``mnistbench peak``) never shares the cores with that start-up. True when
    no server is named, or it serves or has ended; False when it was still starting at the
    deadline."""
    path = os.environ.get(FORKSERVER_SOCKET_VAR, "")
    deadline = time.monotonic() + wait_s
    while path and not os.path.exists(path) and _server_starting() is True:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _server_starting() -> bool | str:
    """True when the server named by $MNISTBENCH_FORKSERVER_PID lives (it is still importing);
    otherwise why not ('' when no pid is named)."""
    try:
        pid = int(os.environ.get(FORKSERVER_SOCKET_VAR + "_PID", ""))
    except ValueError:
        return ""
    if not _alive(pid):
        return f"its server process {pid} has ended"
    command = _command_line(pid)
    # Empty while the process is between exec and its new arguments (the kernel wakes the
    # parent of a vfork, or of a close-on-exec pipe, before it sets them): still starting.
    if command and b"mnistbench.launch.forkserver" not in command:  # the pid was reused
        return f"process {pid} is not a fork server (its server has ended)"
    return True


def _command_line(pid: int) -> bytes:
    """/proc/PID/cmdline (NUL-separated arguments); empty where it cannot be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def _read_message(reader) -> dict:
    while True:
        try:
            line = reader.readline()
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
            continue
        if not line:
            return {}
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            return {}
        return message if isinstance(message, dict) else {}


def _send(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _note(message: str) -> None:
    print(f"mnistbench: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Starting and stopping a server (the workflow's hooks).
@dataclass
class Handle:
    """A running server started by :func:`spawn`."""

    process: subprocess.Popen
    path: Path

    def environment(self) -> dict[str, str]:
        """The variables that make clients use this server."""
        return {FORKSERVER_SOCKET_VAR: str(self.path),
                FORKSERVER_SOCKET_VAR + "_PID": str(self.process.pid)}

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """Wait until the server accepts clients (its imports done); False if it ended or
        ``timeout`` s passed first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            with contextlib.suppress(OSError):
                if stat.S_ISSOCK(self.path.lstat().st_mode):
                    return True
            time.sleep(0.05)
        return False

    def stop(self, timeout: float = 10.0) -> None:
        """End the server (its running cells get SIGTERM) and remove its folder."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        _remove_socket(self.path)
        with contextlib.suppress(OSError):
            self.path.parent.rmdir()


def spawn(python: str | None = None, log: Path | None = None,
          env: dict[str, str] | None = None, idle_timeout: float = 0.0,
          allocator: str = "auto", loaders: Iterable[str] | None = None) -> Handle:
    """Start a server as a child of this process, in a private temporary folder; returns at
    once (clients wait for it while it imports). It ends when this process ends, and removes
    its folder then; the folders of earlier servers killed with their owner are removed here.

    The server runs with ``allocator``'s library preloaded, as a ``train`` client asking for
    it has it (mnistbench.core.cpuruntime.ensure_allocator), so their load-time environments match;
    a client asking for another allocator is refused and runs the cell itself. ``loaders``:
    those of the cells it will serve, which decide what it imports first
    (:func:`preload_modules`; None: any loader). Raises cpuruntime.AllocatorError when the
    allocator is not installed."""
    _, library = cpuruntime.resolve(allocator)
    env = cpuruntime.preload_environment(os.environ if env is None else env, library)
    with contextlib.suppress(OSError):
        remove_stale_folders()
    folder = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))
    path = folder / "socket"
    command = [python or sys.executable, "-m", "mnistbench.launch.forkserver",
               "--socket", str(path),
               "--parent-pid", str(os.getpid()), "--idle-timeout", str(idle_timeout),
               "--remove-folder"]
    if loaders is not None:
        command += ["--loaders", ",".join(sorted(set(loaders)))]
    output = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - handed to Popen
    try:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output,
                                   stderr=subprocess.STDOUT, env=env, start_new_session=True)
    finally:
        if log:
            output.close()
    return Handle(process, path)


def remove_stale_folders(root: Path | str | None = None) -> list[Path]:
    """Remove this user's server folders in ``root`` (default: the temporary folder) that
    nothing uses any more: their owner (the pid in the name) has ended and no server answers
    on their socket, as when the owner and its server were both killed outright. Returns the
    folders removed."""
    root = Path(root or tempfile.gettempdir())
    removed = []
    for folder in root.glob(FOLDER_PREFIX + "*"):
        try:
            owner = int(folder.name[len(FOLDER_PREFIX):].split("-", 1)[0])
            info = folder.lstat()
        except (ValueError, OSError):
            continue  # not named by spawn (no owner pid), or gone meanwhile
        if (not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or _alive(owner)
                or _answers(folder / "socket")):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _answers(path: Path) -> bool:
    """Whether a server accepts connections on the socket ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    """``python -m mnistbench.launch.forkserver``: serve until the parent ends."""
    parser = argparse.ArgumentParser(prog="python -m mnistbench.launch.forkserver",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--socket", type=Path, required=True, help="Unix socket path to serve")
    parser.add_argument("--parent-pid", type=int, default=None,
                        help="end when this process (the one that started the server) ends")
    parser.add_argument("--idle-timeout", type=float, default=0.0,
                        help="end after this many seconds without cells (0: never)")
    parser.add_argument("--remove-folder", action="store_true",
                        help="remove the socket's folder (made for this server) at the end")
    parser.add_argument("--loaders", default=None,
                        help="comma-separated loaders of the cells it will serve, which decide "
                             "what it imports first (default: any)")
    args = parser.parse_args(argv)
    loaders = None if args.loaders is None else tuple(filter(None, args.loaders.split(",")))
    try:
        return Server(args.socket, args.parent_pid, args.idle_timeout,
                      remove_folder=args.remove_folder, loaders=loaders).serve()
    except ServerError as exc:
        print(f"mnistbench fork server: error: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
