"""mnistbench.launch.timedjob: the bench and peak rules' one command each. A fake launcher
(a small Python script standing for ``mnistbench``) reports what it was given (its
arguments, environment, whether the machine's lock was held while it ran) and exits as told,
so every exit of ``train`` and ``peak`` is mapped here without torch."""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import signal
import stat
import sys
import threading
import time
from pathlib import Path

import pytest

from mnistbench import cli
from mnistbench.core import schema
from mnistbench.core.envvars import WORKFLOW_DIGEST_VAR
from mnistbench.launch import plan, timedjob

#: The fake ``mnistbench``: writes FAKE_REPORT (argv, environment, whether the lock FAKE_LOCK
#: was held by someone else), prints a line, writes --out when FAKE_WRITE is set, then exits
#: FAKE_EXIT (a negative value: killed by that signal) after FAKE_SLEEP seconds.
FAKE = r"""
import fcntl, json, os, sys, time
lock = os.environ.get("FAKE_LOCK")
held = None
if lock and os.path.exists(lock):
    fd = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held = False
    except BlockingIOError:
        held = True
    os.close(fd)
with open(os.environ["FAKE_REPORT"], "w") as handle:
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ), "held": held}, handle)
print("the command's own output", flush=True)
if os.environ.get("FAKE_WRITE"):
    out = sys.argv[sys.argv.index("--out") + 1]
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as handle:
        handle.write(os.environ["FAKE_WRITE"])
time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
code = int(os.environ.get("FAKE_EXIT", "0"))
if code < 0:
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """(launcher, environment, the report's path): the fake launcher as a shell-quoted
    command, and an environment holding OMP_NUM_THREADS as Snakemake sets it."""
    script = tmp_path / "fake-mnistbench.py"
    script.write_text(FAKE)
    report = tmp_path / "report.json"
    env = {**os.environ, "FAKE_REPORT": str(report), "FAKE_LOCK": str(tmp_path / "cells.lock"),
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return shlex.join([sys.executable, str(script)]), env, report


def reported(report: Path) -> dict:
    return json.loads(report.read_text())


# --------------------------------------------------------------------------- the pieces
def test_the_launchers_mnistbench_is_this_interpreters():
    """``mnistbench`` stands for this interpreter's console (the fork server's client, as
    under conda's shell function); a docker launcher keeps its words; others are left."""
    assert timedjob.command_of("mnistbench", "train", "--quiet") == [
        sys.executable, "-m", "mnistbench.console", "train", "--quiet"]
    docker = "mnistbench docker run --record 'results/images/a b.json' --"
    assert timedjob.command_of(docker, "train") == [
        sys.executable, "-m", "mnistbench.console", "docker", "run", "--record",
        "results/images/a b.json", "--", "train"]
    assert timedjob.command_of(["/opt/bin/mnistbench"], "peak") == ["/opt/bin/mnistbench", "peak"]
    with pytest.raises(timedjob.TimedJobError, match="launcher is empty"):
        timedjob.command_of("  ")


def test_a_status_is_what_a_shell_gives():
    assert [timedjob.shell_status(code) for code in (0, 12, -signal.SIGTERM, -signal.SIGKILL)] \
        == [0, 12, 143, 137]


def test_the_results_are_the_schemas_exit_codes():
    """The statuses a cell's and a peak's command exit with after writing their record are
    schema.EXIT_CODES (one home), and the log spells them as the rules did."""
    assert timedjob.results_text(timedjob.CELL_RESULTS) == "10 unavailable, 11 oom, 12 failed"
    assert timedjob.results_text(timedjob.PEAK_RESULTS) == "10 unavailable, 12 failed"
    assert set(timedjob.CELL_RESULTS) == {c for c in schema.EXIT_CODES.values() if c}


class FakeFlock:
    """flock(2) that fails ``busy`` times without waiting, then ``errors`` times waiting."""

    def __init__(self, busy: int = 0, errors: int = 0):
        self.busy, self.errors, self.calls = busy, errors, []

    def __call__(self, fd: int, operation: int) -> None:
        self.calls.append(operation)
        if operation & fcntl.LOCK_NB:
            if self.busy:
                self.busy -= 1
                raise BlockingIOError(11, "Resource temporarily unavailable")
            return
        if self.errors:
            self.errors -= 1
            raise OSError(4, "Interrupted system call")


def test_the_wait_for_the_lock_is_said_once_and_a_failed_wait_is_false(tmp_path):
    log_path = tmp_path / "job.log"
    with open(log_path, "wb") as log:
        free = FakeFlock()
        assert timedjob.wait_for_lock(3, tmp_path / "x.lock", log, free)
        assert free.calls == [fcntl.LOCK_EX | fcntl.LOCK_NB]
        busy = FakeFlock(busy=1)
        assert timedjob.wait_for_lock(3, tmp_path / "x.lock", log, busy)
        assert busy.calls == [fcntl.LOCK_EX | fcntl.LOCK_NB, fcntl.LOCK_EX]
        assert not timedjob.wait_for_lock(3, tmp_path / "x.lock", log, FakeFlock(1, 1))
    lines = log_path.read_text().splitlines()
    assert lines == [timedjob.waiting_message(tmp_path / "x.lock")] * 2 + [
        f"the lock of timed cells, {tmp_path / 'x.lock'}, cannot be taken: "
        "Interrupted system call"]
    assert lines[0] == (f"waiting for the machine's lock of timed cells, {tmp_path}/x.lock: "
                        "another study is timing a cell")


def test_a_command_past_its_time_is_stopped_as_124(tmp_path):
    """Stopped (SIGTERM) at its limit: 124, where it would have ended 0 after 60 s."""
    with open(tmp_path / "job.log", "wb") as log:
        status = timedjob.run_command([sys.executable, "-c", "import time; time.sleep(60)"],
                                      log, dict(os.environ), timeout=1.0)
    assert status == timedjob.TIMED_OUT == 124


def test_a_command_that_cannot_start_is_127_with_the_reason_in_the_log(tmp_path):
    with open(tmp_path / "job.log", "wb") as log:
        status = timedjob.run_command([str(tmp_path / "no-such-command")], log, {})
    assert status == 127
    assert "no-such-command: No such file or directory" in (tmp_path / "job.log").read_text()


# --------------------------------------------------------------------------- a cell
def run_cell(tmp_path, fake, **env):
    launcher, environment, _ = fake
    return timedjob.run_cell(
        launcher, ["--device", "cpu", "--seed", "3", "--quiet"], tmp_path / "cell",
        tmp_path / "logs" / "cell.log", lock=tmp_path / "cells.lock",
        workflow_digest="0123456789abcdef", env={**environment, **env})


def test_a_cell_runs_train_under_the_lock_without_the_thread_variables(tmp_path, fake):
    """The command is LAUNCHER train FLAGS --out DIR, run while the job holds the lock
    (created readable by all), without Snakemake's thread variables, with the digest; its
    output goes into a log written afresh."""
    log = tmp_path / "logs" / "cell.log"
    log.parent.mkdir()
    log.write_text("an earlier run's log\n")
    assert run_cell(tmp_path, fake) == timedjob.Ended(0, 0)
    seen = reported(fake[2])
    assert seen["argv"] == ["train", "--device", "cpu", "--seed", "3", "--quiet",
                            "--out", str(tmp_path / "cell")]
    assert seen["held"] is True
    assert not set(plan.THREAD_VARIABLES) & set(seen["env"])
    assert seen["env"][WORKFLOW_DIGEST_VAR] == "0123456789abcdef"
    assert log.read_text() == "the command's own output\n"
    assert stat.S_IMODE(os.stat(tmp_path / "cells.lock").st_mode) == 0o644


@pytest.mark.parametrize(("exit_code", "status"), [(10, "unavailable"), (11, "oom"),
                                                   (12, "failed")])
def test_a_cells_result_exits_0_and_the_log_names_its_summary(tmp_path, fake, exit_code,
                                                               status):
    assert schema.EXIT_CODES[status] == exit_code
    ended = run_cell(tmp_path, fake, FAKE_EXIT=str(exit_code))
    assert ended == timedjob.Ended(exit_code, 0)
    summary = tmp_path / "cell" / schema.SUMMARY_FILE
    assert (tmp_path / "logs" / "cell.log").read_text().splitlines()[-1] == (
        f"exit {exit_code} (10 unavailable, 11 oom, 12 failed): see {summary}")


@pytest.mark.parametrize(("exit_code", "expected"), [(1, 1), (2, 2), (13, 13),
                                                     (-signal.SIGTERM, 143),
                                                     (-signal.SIGKILL, 137)])
def test_a_cells_crash_or_kill_is_the_jobs_exit(tmp_path, fake, exit_code, expected):
    """Anything but 0 and the results fails the job with the shell's status, and the log
    adds nothing: the next run redoes the cell."""
    ended = run_cell(tmp_path, fake, FAKE_EXIT=str(exit_code))
    assert ended == timedjob.Ended(expected, expected)
    assert (tmp_path / "logs" / "cell.log").read_text() == "the command's own output\n"


def test_a_cell_waits_for_the_lock_another_study_holds_and_says_so(tmp_path, fake):
    """While another process holds the lock, the job waits (its log says so) and starts its
    command only once the lock is free."""
    lock = tmp_path / "cells.lock"
    lock.touch(mode=0o644)
    holder = os.open(lock, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    result = []
    job = threading.Thread(target=lambda: result.append(run_cell(tmp_path, fake)))
    job.start()
    log = tmp_path / "logs" / "cell.log"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (log.exists() and "waiting" in log.read_text()):
        time.sleep(0.05)
    try:
        assert log.read_text() == timedjob.waiting_message(lock) + "\n"
        assert not fake[2].exists()  # not started while the lock is held
    finally:
        os.close(holder)
    job.join(30)
    assert result == [timedjob.Ended(0, 0)]
    assert reported(fake[2])["held"] is True
    assert log.read_text().splitlines() == [timedjob.waiting_message(lock),
                                            "the command's own output"]


def test_a_failed_wait_is_status_1_and_runs_nothing(tmp_path, fake):
    launcher, env, report = fake
    ended = timedjob.run_cell(launcher, [], tmp_path / "cell", tmp_path / "cell.log",
                              lock=tmp_path / "cells.lock", env=env,
                              flock=FakeFlock(busy=1, errors=1))
    assert ended == timedjob.Ended(1, 1)
    assert not report.exists()
    assert "cannot be taken: Interrupted system call" in (tmp_path / "cell.log").read_text()


def test_an_unsafe_lock_file_stops_the_job_naming_it(tmp_path, fake):
    """A planted symlink as the lock file: the job stops before its command (exit 1 from
    the command line), the reason in its log and on stderr; the link's target is never
    created."""
    launcher, env, report = fake
    lock = tmp_path / "cells.lock"
    lock.symlink_to(tmp_path / "target")
    with pytest.raises(timedjob.TimedJobError, match="symbolic link"):
        timedjob.run_cell(launcher, [], tmp_path / "cell", tmp_path / "cell.log", lock=lock,
                          env=env)
    assert not report.exists() and not (tmp_path / "target").exists()
    assert (tmp_path / "cell.log").read_text().startswith(f"error: lock file {lock} is a "
                                                           "symbolic link")


def test_run_cell_on_the_command_line(tmp_path, fake, monkeypatch, capsys):
    """`mnistbench run-cell` with the workflow's flags: the train flags after --, the cell's
    exit mapped; an unsafe lock exits 1 with the reason."""
    launcher, env, report = fake
    for name in ("FAKE_REPORT", "FAKE_LOCK", "OMP_NUM_THREADS"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.setenv("FAKE_EXIT", "11")
    argv = ["run-cell", "--lock", str(tmp_path / "cells.lock"), "--log",
            str(tmp_path / "cell.log"), "--launcher", launcher, "--workflow-digest", "abc",
            "--out", str(tmp_path / "cell"), "--", "--threads", "0", "--quiet"]
    assert cli.main(argv) == 0
    seen = reported(report)
    assert seen["argv"] == ["train", "--threads", "0", "--quiet", "--out", str(tmp_path / "cell")]
    assert seen["env"][WORKFLOW_DIGEST_VAR] == "abc" and "OMP_NUM_THREADS" not in seen["env"]
    assert "exit 11 (10 unavailable" in (tmp_path / "cell.log").read_text()
    monkeypatch.setenv("FAKE_EXIT", "-15")
    assert cli.main(argv) == 143
    (tmp_path / "cells.lock").unlink()
    (tmp_path / "cells.lock").symlink_to(tmp_path / "elsewhere")
    assert cli.main(argv) == 1
    assert "mnistbench run-cell: error: lock file" in capsys.readouterr().err


# --------------------------------------------------------------------------- a peak
def run_peak(tmp_path, fake, timeout=None, **env):
    launcher, environment, _ = fake
    return timedjob.run_peak(
        launcher, "cpu", ["fp32", "bf16"], 2, tmp_path / "peak" / "cpu.json",
        tmp_path / "logs" / "peak.log", lock=tmp_path / "cells.lock",
        env={**environment, **env}, timeout=timeout)


def test_a_peak_runs_under_the_lock_with_its_flags(tmp_path, fake):
    assert run_peak(tmp_path, fake, FAKE_WRITE="{}") == timedjob.Ended(0, 0)
    seen = reported(fake[2])
    assert seen["argv"] == ["peak", "--device", "cpu", "--precision", "fp32", "--precision",
                            "bf16", "--threads", "2", "--out", str(tmp_path / "peak" / "cpu.json")]
    assert seen["held"] is True
    assert not set(plan.THREAD_VARIABLES) & set(seen["env"])


@pytest.mark.parametrize("exit_code", [10, 12])
def test_a_peaks_result_keeps_its_record_and_exits_0(tmp_path, fake, exit_code):
    (tmp_path / "peak").mkdir()
    ended = run_peak(tmp_path, fake, FAKE_EXIT=str(exit_code), FAKE_WRITE='{"written": 1}')
    assert ended == timedjob.Ended(exit_code, 0)
    assert json.loads((tmp_path / "peak" / "cpu.json").read_text()) == {"written": 1}
    assert (tmp_path / "logs" / "peak.log").read_text().splitlines()[-1] == (
        f"mnistbench peak exited {exit_code} (10 unavailable, 12 failed): the study goes on "
        "without this limit")


@pytest.mark.slow
def test_a_peak_that_crashed_or_ran_past_its_time_gets_a_failed_record(tmp_path, fake):
    """A status that is neither 0 nor a signal (a crash; 124 past the time limit) writes a
    record of status failed with the status and the log, by `mnistbench peak
    --record-failure` (the real one), and the job exits 0."""
    assert run_peak(tmp_path, fake, FAKE_EXIT="1") == timedjob.Ended(1, 0)
    record = json.loads((tmp_path / "peak" / "cpu.json").read_text())
    log = tmp_path / "logs" / "peak.log"
    assert (record["status"], record["device"]) == ("failed", "cpu")
    assert record["reason"] == f"mnistbench peak exited 1; see {log}"
    (tmp_path / "peak" / "cpu.json").unlink()
    assert run_peak(tmp_path, fake, timeout=1.0, FAKE_SLEEP="60") == timedjob.Ended(124, 0)
    record = json.loads((tmp_path / "peak" / "cpu.json").read_text())
    assert record["reason"] == f"mnistbench peak exited 124; see {log}"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_peak_killed_by_a_signal_fails_the_job_with_no_record(tmp_path, fake, sig):
    """The next run measures again: no record, the shell's status as the job's exit."""
    assert run_peak(tmp_path, fake, FAKE_EXIT=str(-sig)) == timedjob.Ended(128 + sig, 128 + sig)
    assert not (tmp_path / "peak" / "cpu.json").exists()
    assert (tmp_path / "logs" / "peak.log").read_text() == "the command's own output\n"


def test_a_record_that_cannot_be_written_is_the_jobs_exit(tmp_path, fake, monkeypatch):
    """As under the rule's `set -e`: when `peak --record-failure` fails (here: a fake
    ``mnistbench`` standing for it too, exiting 1), the job fails with its code."""
    launcher, env, _ = fake
    calls = []

    def command_of(launcher_, *args):
        calls.append(args)
        return [sys.executable, "-c", "import sys; sys.exit(3 if '--record-failure' in "
                "sys.argv else 1)", *args]

    monkeypatch.setattr(timedjob, "command_of", command_of)
    ended = timedjob.run_peak(launcher, "cpu", [], 0, tmp_path / "cpu.json",
                              tmp_path / "peak.log", lock=None, env=env)
    assert ended == timedjob.Ended(1, 3)
    assert calls[1][-2:] == ("--record-failure", f"mnistbench peak exited 1; see "
                                                 f"{tmp_path / 'peak.log'}")


def test_run_peak_on_the_command_line(tmp_path, fake, monkeypatch):
    launcher, env, report = fake
    for name in ("FAKE_REPORT", "FAKE_LOCK"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.setenv("FAKE_WRITE", "{}")
    argv = ["run-peak", "--lock", str(tmp_path / "cells.lock"), "--log",
            str(tmp_path / "peak.log"), "--launcher", launcher, "--device", "cuda",
            "--precision", "tf32", "--threads", "4", "--out", str(tmp_path / "cuda.json")]
    assert cli.main(argv) == 0
    assert reported(report)["argv"] == ["peak", "--device", "cuda", "--precision", "tf32",
                                        "--threads", "4", "--out", str(tmp_path / "cuda.json")]
    monkeypatch.setenv("FAKE_EXIT", "-9")
    assert cli.main(argv) == 137


def test_a_log_that_is_a_device_or_a_folder_is_named_before_the_job(tmp_path, capsys):
    """Weak case of the sweep of issue 41 (/dev/full as output): `run-cell --log /dev/full`
    said "cannot be written: Invalid argument" (the log is emptied first, and a character
    device cannot be truncated); a folder said "Is a directory". Now one line naming what
    the log is and the fix; the command never runs."""
    folder = tmp_path / "logs"
    folder.mkdir()
    logs = [folder] + ([Path("/dev/full")] if Path("/dev/full").exists() else [])
    for log, kind in zip(logs, ("a folder", "a character device"), strict=False):
        assert cli.main(["run-cell", "--log", str(log), "--out", str(tmp_path / "cell"),
                         "--", "--epochs", "1"]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"the log {log} is {kind}, not a regular file" in err[0], err
        assert "Give --log the path of a regular file" in err[0]
    assert not (tmp_path / "cell").exists() and list(folder.iterdir()) == []
