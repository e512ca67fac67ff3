"""The timed process's progress off a terminal (mnistbench.measure.train.Progress): a plain
line at most once a minute where a person reads a log (the workflow's cell log, a container's
or a SLURM job's output), none on a terminal's bar's behalf, none when off."""

from __future__ import annotations

from mnistbench.measure import train


def test_off_a_terminal_a_line_at_most_every_interval(monkeypatch, capsys):
    now = [1000.0]
    monkeypatch.setattr(train.time, "perf_counter", lambda: now[0])
    progress = train.Progress(enabled=False, log_every_s=60.0)
    progress.update(1, 2, 10, 100, start=1000.0)
    now[0] += 59
    progress.update(1, 2, 20, 100, start=1000.0)
    assert capsys.readouterr().err == ""
    now[0] += 2
    progress.update(1, 2, 30, 100, start=1000.0)
    progress.update(1, 2, 31, 100, start=1000.0)
    assert capsys.readouterr().err == "progress: epoch 1/2, 30/100 steps, 61 s into the epoch\n"
    now[0] += 60
    progress.update(2, 2, 5, 100, start=now[0] - 3)
    assert capsys.readouterr().err == "progress: epoch 2/2, 5/100 steps, 3 s into the epoch\n"


def test_off_without_an_interval_it_prints_nothing(monkeypatch, capsys):
    now = [0.0]
    monkeypatch.setattr(train.time, "perf_counter", lambda: now[0])
    progress = train.Progress(enabled=False)
    for step in range(5):
        now[0] += 100
        progress.update(1, 1, step, 5, start=0.0)
    assert capsys.readouterr().err == ""
