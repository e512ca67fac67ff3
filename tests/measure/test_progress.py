"""The timed process's progress off a terminal (mnistbench.measure.progress.Progress): a plain
line at most once a minute where a person reads a log (the workflow's cell log, a container's
or a SLURM job's output), none on a terminal's bar's behalf, none when off."""

from __future__ import annotations

from types import SimpleNamespace

from mnistbench.measure import progress as progress_mod


def test_off_a_terminal_a_line_at_most_every_interval(monkeypatch, capsys):
    now = [1000.0]
    monkeypatch.setattr(progress_mod.time, "perf_counter", lambda: now[0])
    progress = progress_mod.Progress(enabled=False, log_every_s=60.0)
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
    monkeypatch.setattr(progress_mod.time, "perf_counter", lambda: now[0])
    progress = progress_mod.Progress(enabled=False)
    for step in range(5):
        now[0] += 100
        progress.update(1, 1, step, 5, start=0.0)
    assert capsys.readouterr().err == ""


def test_a_cell_logs_a_line_a_minute_off_a_terminal_even_when_quiet(monkeypatch):
    """Progress.for_cell: on a terminal the bar unless --quiet; off one (a log), a line every
    PROGRESS_LOG_EVERY_S whatever --quiet says."""
    for terminal, quiet, enabled, every in ((True, False, True, 0.0), (True, True, False, 0.0),
                                            (False, False, False, 60.0),
                                            (False, True, False, 60.0)):
        stderr = SimpleNamespace(isatty=lambda t=terminal: t)
        monkeypatch.setattr(progress_mod, "sys", SimpleNamespace(stderr=stderr))
        progress = progress_mod.Progress.for_cell(quiet)
        assert (progress.enabled, progress.log_every_s) == (enabled, every), (terminal, quiet)
    assert progress_mod.PROGRESS_LOG_EVERY_S == 60.0
