"""Tests of mnistbench.launch.forkserver: cells started by forking a server that has imported torch
run, record and exit exactly like cells started as new processes; the client falls back to a
new process when the server is absent, dead (a zombie included) or refuses; signals, vanished
clients and a killed server stop cells, so no cell outlives its job; the server ends with its
parent and leaves no folder behind; a bad socket path is one clear paragraph."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from mnistbench.core import schema
from mnistbench.launch import forkserver

BIN = Path(sys.executable).parent
TINY = ["--max-steps", "2", "--test-limit", "64", "--warmup-steps", "1", "--batch-size", "32",
        "--sample-interval", "0.05", "--quiet"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A fork server started the way the workflow starts it (without the thread variables)
    for a study whose cells hold their data in memory (so without torchvision)."""
    log = tmp_path_factory.mktemp("forkserver") / "server.log"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS",)}
    handle = forkserver.spawn(log=log, env=env, loaders=["resident"])
    assert handle.wait_ready(), log.read_text()
    yield handle
    handle.stop()
    assert handle.process.poll() is not None
    assert not handle.path.exists()


def _env(server, **extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env.update(server.environment())
    env.update(extra)
    return env


def train(tmp_path: Path, data: Path, env: dict, *extra: str, name: str = "cell",
          wait: bool = True):
    """`mnistbench train` of one tiny cell as a new client process; (process, out folder)."""
    out = tmp_path / name
    log = (tmp_path / f"{name}.log").open("w")
    proc = subprocess.Popen([str(BIN / "mnistbench"), "train", "--data", str(data), "--out",
                             str(out), *TINY, *extra], stdout=log, stderr=subprocess.STDOUT,
                            env=env, cwd=tmp_path)
    if wait:
        proc.wait(timeout=300)
    return proc, out


def test_preloads_torchvision_only_for_the_dataloader() -> None:
    """The blog's DataLoader needs torchvision; cells holding their data in memory do not."""
    both = forkserver.PRELOAD + forkserver.DATALOADER_PRELOAD
    assert forkserver.preload_modules(["resident"]) == forkserver.PRELOAD
    assert forkserver.preload_modules(["resident", "dataloader"]) == both
    assert forkserver.preload_modules(None) == both  # unknown: any loader
    assert "torchvision.datasets" in forkserver.DATALOADER_PRELOAD


def summary(out: Path) -> dict:
    """The cell's summary.json."""
    return json.loads((out / schema.SUMMARY_FILE).read_text())


@pytest.mark.slow
def test_forked_cell_matches_a_new_process_cell(tmp_path, tiny_mnist, server):
    """A forked cell ends ok with the same outputs, parameters and results as the same cell
    started as a new process, records env.launch, and its startup counts from the client."""
    proc, forked = train(tmp_path, tiny_mnist, _env(server), "--seed", "3", name="forked")
    assert proc.returncode == 0, (tmp_path / "forked.log").read_text()
    plain_env = {k: v for k, v in os.environ.items() if not k.startswith("MNISTBENCH_FORK")}
    proc, plain = train(tmp_path, tiny_mnist, plain_env, "--seed", "3", name="plain")
    assert proc.returncode == 0
    a, b = summary(forked), summary(plain)
    assert a["env"]["launch"] == "fork-server" and b["env"]["launch"] == "exec"
    assert a["status"] == b["status"] == "ok"
    for key in ("device", "precision", "batch_size", "seed", "threads"):
        assert a["params"][key] == b["params"][key]
    # Same seed, same trajectory: the same losses (deterministic on CPU).
    assert a["results"]["final_train_loss"] == pytest.approx(b["results"]["final_train_loss"])
    assert a["results"]["final_test_acc"] == b["results"]["final_test_acc"]
    assert sorted(p.name for p in forked.iterdir()) == sorted(p.name for p in plain.iterdir())
    assert 0 < a["timing"]["startup_s"] < b["timing"]["startup_s"]
    assert "fork server" not in (tmp_path / "forked.log").read_text()


@pytest.mark.slow
def test_a_dataloader_cell_of_a_server_without_torchvision_imports_it_itself(tmp_path,
                                                                            tiny_mnist, server):
    """A cell of the blog's DataLoader served by a server that left torchvision out (its
    study said every cell holds its data in memory) still runs forked, and ends ok."""
    proc, out = train(tmp_path, tiny_mnist, _env(server), "--loader", "dataloader")
    assert proc.returncode == 0, (tmp_path / "cell.log").read_text()
    result = summary(out)
    assert result["env"]["launch"] == "fork-server"
    assert result["params"]["loader"] == "dataloader" and result["status"] == "ok"


def test_exit_codes_and_streams_pass_through(tmp_path, tiny_mnist, server):
    """A cell's status exit code (10: cuda unavailable) and its stderr reach the client."""
    proc, out = train(tmp_path, tiny_mnist, _env(server), "--device", "cuda")
    assert proc.returncode == schema.EXIT_CODES["unavailable"]
    assert summary(out)["env"]["launch"] == "fork-server"
    assert "unavailable" in (tmp_path / "cell.log").read_text()
    result = subprocess.run([str(BIN / "mnistbench"), "train", "--batch-size", "0"],
                            capture_output=True, text=True, env=_env(server), timeout=60)
    assert result.returncode == 2 and "--batch-size" in result.stderr


@pytest.mark.slow
def test_different_load_time_environment_is_refused(tmp_path, tiny_mnist, server):
    """A client whose OMP_NUM_THREADS differs from the server's runs the cell itself, and says
    why."""
    proc, out = train(tmp_path, tiny_mnist, _env(server, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0
    assert summary(out)["env"]["launch"] == "exec"
    log = (tmp_path / "cell.log").read_text()
    assert "refused" in log and "OMP_NUM_THREADS" in log


@pytest.mark.slow
def test_unreachable_server_falls_back(tmp_path, tiny_mnist):
    """A socket that does not exist makes the client start the cell as a new process."""
    env = dict(os.environ, MNISTBENCH_FORKSERVER=str(tmp_path / "none.sock"))
    proc, out = train(tmp_path, tiny_mnist, env)
    assert proc.returncode == 0 and summary(out)["env"]["launch"] == "exec"
    assert "not reachable" in (tmp_path / "cell.log").read_text()


def _cell_pid(client: psutil.Process, server, timeout: float = 60) -> int:
    """The pid of the forked cell serving ``client`` (a child of the server)."""
    deadline = time.monotonic() + timeout
    parent = psutil.Process(server.process.pid)
    while time.monotonic() < deadline:
        for child in parent.children():
            if child.create_time() >= client.create_time() - 0.01:
                return child.pid
        time.sleep(0.05)
    raise AssertionError("no forked cell appeared")


def _gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_stopping_the_client_stops_the_cell(tmp_path, tiny_mnist, server, sig):
    """SIGTERM to the client is forwarded to its cell (exit 143); a client killed outright
    makes the server stop the cell; no summary is left either way."""
    proc, out = train(tmp_path, tiny_mnist, _env(server), "--epochs", "1000", wait=False)
    cell = _cell_pid(psutil.Process(proc.pid), server)
    time.sleep(0.5)
    proc.send_signal(sig)
    code = proc.wait(timeout=30)
    assert _gone(cell, timeout=10)
    assert code == (128 + signal.SIGTERM if sig == signal.SIGTERM else -signal.SIGKILL)
    assert not (out / schema.SUMMARY_FILE).exists()
    assert server.process.poll() is None  # the server serves on


@pytest.mark.slow
def test_server_ends_with_its_parent(tmp_path):
    """A server whose parent process is killed outright stops serving and removes its socket
    and its private /tmp/mnistbench-fs-* folder."""
    script = ("import sys, time; from mnistbench.launch import forkserver; "
              "h = forkserver.spawn(loaders=['resident']); "
              "print(h.process.pid, h.path, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pid, path = parent.stdout.readline().split()
    deadline = time.monotonic() + 60
    while not Path(path).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert Path(path).exists()
    parent.kill()
    parent.wait()
    assert _gone(int(pid), timeout=20)
    assert not Path(path).exists()
    assert Path(path).parent.name.startswith(f"{forkserver.FOLDER_PREFIX}{parent.pid}-")
    assert not Path(path).parent.exists()


def test_only_train_is_served(server, capsys):
    """Any other command is refused by the server: the client is told to run it itself."""
    assert forkserver.delegate(["env"], path=str(server.path)) is None
    assert "runs only `mnistbench train`" in capsys.readouterr().err


def test_load_time_environment_selects_library_variables():
    """Thread, loader, interpreter and CUDA variables count; others do not."""
    env = {"OMP_NUM_THREADS": "2", "LD_PRELOAD": "x", "PYTHONHASHSEED": "0",
           "CUDA_VISIBLE_DEVICES": "0", "HOME": "/root", "MNISTBENCH_ENV": "a"}
    assert set(forkserver.load_time_environment(env)) == {
        "OMP_NUM_THREADS", "LD_PRELOAD", "PYTHONHASHSEED", "CUDA_VISIBLE_DEVICES"}


def _env_without_threads() -> dict[str, str]:
    """This environment without the thread and fork-server variables."""
    return {k: v for k, v in os.environ.items()
            if k != "OMP_NUM_THREADS" and not k.startswith("MNISTBENCH_FORK")}


@pytest.mark.slow
def test_killing_the_server_ends_its_cell(tmp_path, tiny_mnist):
    """A cell dies with its SIGKILLed server even while its client cannot act, writes no
    summary later, and its client then exits 1 saying why."""
    handle = forkserver.spawn(log=tmp_path / "server.log", env=_env_without_threads(),
                              loaders=["resident"])
    proc = None
    try:
        assert handle.wait_ready(), (tmp_path / "server.log").read_text()
        env = {**_env_without_threads(), **handle.environment()}
        # Without its server the cell would stop at its time limit and write a summary.
        proc, out = train(tmp_path, tiny_mnist, env, "--epochs", "1000", "--time-limit", "2",
                          wait=False)
        cell = _cell_pid(psutil.Process(proc.pid), handle)
        time.sleep(0.3)
        proc.send_signal(signal.SIGSTOP)  # only the kernel (PR_SET_PDEATHSIG) can end it now
        handle.process.kill()
        assert _gone(cell, timeout=1.5)
        proc.send_signal(signal.SIGCONT)
        assert proc.wait(timeout=30) == 1
        time.sleep(2.5)  # past the cell's time limit
        assert not (out / schema.SUMMARY_FILE).exists()
        log = (tmp_path / "cell.log").read_text()
        assert "ended before cell process" in log and "the cell has ended too" in log
    finally:
        if proc is not None and proc.poll() is None:  # a failed test leaves no stopped client
            proc.kill()
            proc.wait()
        handle.stop()


def test_client_stops_its_cell_when_the_server_vanishes(tmp_path, monkeypatch, capsys):
    """A client whose server closes before the exit code kills a cell that still runs before
    it returns 1."""
    monkeypatch.setattr(forkserver, "_ORPHAN_WAIT_S", 0.2)
    monkeypatch.delenv(forkserver.FORKSERVER_SOCKET_VAR + "_PID", raising=False)
    cell = subprocess.Popen(["sleep", "60"])  # stands for a cell that outlived its server
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "s"))
    listener.listen(1)

    def fake_server():
        conn, _ = listener.accept()
        with conn:
            _, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            for fd in fds:
                os.close(fd)
            conn.sendall(json.dumps({"pid": cell.pid}).encode() + b"\n")

    thread = threading.Thread(target=fake_server, daemon=True)
    thread.start()
    try:
        assert forkserver.delegate(["train"], path=str(tmp_path / "s")) == 1
        assert cell.wait(timeout=5) == -signal.SIGKILL
    finally:
        cell.kill()
        listener.close()
    assert "the cell has ended too" in capsys.readouterr().err


@pytest.mark.parametrize("state", ["zombie", "another process"])
def test_dead_server_is_not_waited_for(tmp_path, monkeypatch, capsys, state):
    """A named server that has ended (also one not yet reaped, a zombie, or whose pid now
    names another process) makes the client start the cell itself at once."""
    other = subprocess.Popen(["sleep", "60"])
    try:
        deadline = time.monotonic() + 10
        if state == "zombie":
            other.kill()
            while psutil.Process(other.pid).status() != psutil.STATUS_ZOMBIE:
                assert time.monotonic() < deadline
                time.sleep(0.01)
        else:  # until it shows its command line (empty between exec and its arguments: the
            # client then waits, as for a server still starting)
            while "sleep" not in psutil.Process(other.pid).cmdline():
                assert time.monotonic() < deadline
                time.sleep(0.01)
        assert forkserver._alive(other.pid) == (state != "zombie")
        monkeypatch.setenv(forkserver.FORKSERVER_SOCKET_VAR + "_PID", str(other.pid))
        waits: list[float] = []
        with monkeypatch.context() as patch:
            patch.setattr(forkserver.time, "sleep", waits.append)
            assert forkserver.delegate(["train"], path=str(tmp_path / "socket"),
                                       wait_s=20) is None
        assert waits == []  # not one wait for the socket: started at once
    finally:
        other.kill()
        other.wait()
    err = capsys.readouterr().err
    assert "not reachable" in err and str(other.pid) in err and "new process" in err


def test_folder_at_the_socket_path_is_a_clear_error(tmp_path, capsys):
    """A folder at the socket path stops the server with one paragraph naming the path and
    the fix (no traceback), is never taken for a ready server, and clients fall back."""
    folder = tmp_path / "socket"
    folder.mkdir()
    result = subprocess.run([sys.executable, "-m", "mnistbench.launch.forkserver", "--socket",
                             str(folder)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert str(folder) in result.stderr and f"rmdir {folder}" in result.stderr
    assert folder.is_dir()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        assert not forkserver.Handle(sleeper, folder).wait_ready(timeout=0.3)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert forkserver.delegate(["train"], path=str(folder)) is None
    err = capsys.readouterr().err
    assert f"{folder} is a folder, not a socket" in err and "new process" in err


def test_stale_folders_of_killed_owners_are_removed():
    """Only the server folders whose owner has ended and whose socket no server answers are
    removed (as spawn does at each start)."""
    root = Path(tempfile.mkdtemp(prefix="mnb-"))  # short: a socket path has <= 107 bytes
    ended = subprocess.Popen(["true"])
    ended.wait()
    prefix = forkserver.FOLDER_PREFIX
    stale, serving, owned, foreign = (root / f"{prefix}{ended.pid}-a", root / f"{prefix}"
                                      f"{ended.pid}-b", root / f"{prefix}{os.getpid()}-c",
                                      root / f"{prefix}abc")
    for folder in (stale, serving, owned, foreign):
        folder.mkdir()
    (stale / "socket").write_text("")  # what a killed server leaves: nothing answers there
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(serving / "socket"))
        listener.listen(1)
        assert forkserver.remove_stale_folders(root) == [stale]
        assert not stale.exists() and serving.is_dir() and owned.is_dir() and foreign.is_dir()
    finally:
        listener.close()
        shutil.rmtree(root)


def test_timed_work_outside_the_server_waits_while_it_starts(tmp_path, monkeypatch):
    """`mnistbench peak` waits while the named server is still importing (no socket yet, its
    process alive), returns once the socket is there or the server has ended, and does not
    wait at all where no server is named."""
    monkeypatch.delenv(forkserver.FORKSERVER_SOCKET_VAR, raising=False)
    assert forkserver.wait_while_starting(wait_s=0)
    path = tmp_path / "socket"
    monkeypatch.setenv(forkserver.FORKSERVER_SOCKET_VAR, str(path))
    # A stand-in for a server still importing: alive, named like one, no socket yet.
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                           "mnistbench.launch.forkserver"]) as starting:
        try:
            monkeypatch.setenv(forkserver.FORKSERVER_SOCKET_VAR + "_PID", str(starting.pid))
            started = time.monotonic()
            assert not forkserver.wait_while_starting(wait_s=0.3)
            assert time.monotonic() - started >= 0.3
            path.touch()  # the server has bound its socket
            assert forkserver.wait_while_starting(wait_s=5)
            path.unlink()
        finally:
            starting.kill()
    assert forkserver.wait_while_starting(wait_s=5)  # it has ended: nothing to wait for


def test_a_server_between_exec_and_its_arguments_is_still_starting(monkeypatch):
    """Right after exec its command line reads empty for a moment (CI stop 30 failed under
    load when that counted as a reused pid): still starting; another command: not a server."""
    monkeypatch.setenv(forkserver.FORKSERVER_SOCKET_VAR, "/nonexistent/socket")
    monkeypatch.setenv(forkserver.FORKSERVER_SOCKET_VAR + "_PID", str(os.getpid()))  # alive
    monkeypatch.setattr(forkserver, "_command_line", lambda pid: b"")
    assert forkserver._server_starting() is True
    assert not forkserver.wait_while_starting(wait_s=0.1)
    monkeypatch.setattr(forkserver, "_command_line", lambda pid: b"python3\0-m\0http.server\0")
    assert "is not a fork server" in forkserver._server_starting()
    assert forkserver.wait_while_starting(wait_s=5)
