"""Tests of mnistbench.forkserver: cells started by forking a server that has imported torch
run, record and exit exactly like cells started as new processes; the client falls back to a
new process when the server is absent or refuses; signals and vanished clients stop cells; the
server ends with its parent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from mnistbench import forkserver, schema

BIN = Path(sys.executable).parent
TINY = ["--max-steps", "2", "--test-limit", "64", "--warmup-steps", "1", "--batch-size", "32",
        "--sample-interval", "0.05", "--quiet"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A fork server started the way the workflow starts it (without the thread variables)."""
    log = tmp_path_factory.mktemp("forkserver") / "server.log"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS",)}
    handle = forkserver.spawn(log=log, env=env)
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


def summary(out: Path) -> dict:
    """The cell's summary.json."""
    return json.loads((out / schema.SUMMARY_FILE).read_text())


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


def test_exit_codes_and_streams_pass_through(tmp_path, tiny_mnist, server):
    """A cell's status exit code (10: cuda unavailable) and its stderr reach the client."""
    proc, out = train(tmp_path, tiny_mnist, _env(server), "--device", "cuda")
    assert proc.returncode == schema.EXIT_CODES["unavailable"]
    assert summary(out)["env"]["launch"] == "fork-server"
    assert "unavailable" in (tmp_path / "cell.log").read_text()
    result = subprocess.run([str(BIN / "mnistbench"), "train", "--batch-size", "0"],
                            capture_output=True, text=True, env=_env(server), timeout=60)
    assert result.returncode == 2 and "--batch-size" in result.stderr


def test_different_load_time_environment_is_refused(tmp_path, tiny_mnist, server):
    """A client whose OMP_NUM_THREADS differs from the server's runs the cell itself, and says
    why."""
    proc, out = train(tmp_path, tiny_mnist, _env(server, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0
    assert summary(out)["env"]["launch"] == "exec"
    log = (tmp_path / "cell.log").read_text()
    assert "refused" in log and "OMP_NUM_THREADS" in log


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


def test_server_ends_with_its_parent(tmp_path):
    """A server whose parent process ends stops serving and removes its socket."""
    script = ("import sys, time; from mnistbench import forkserver; "
              "h = forkserver.spawn(); print(h.process.pid, h.path, flush=True); "
              "time.sleep(60)")
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
