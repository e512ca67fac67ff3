"""Tests of mnistbench.measure.disturbance and the sampler's per-epoch load: a disturbed epoch
is flagged, by the load it saw or by its own cell's spread."""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time

import pytest

from mnistbench.core import network, schema
from mnistbench.measure import disturbance, entry, monitor, trainer
from tests.measure.test_train import read_csv, run


def test_the_published_disturbed_epoch_is_an_outlier():
    """vm-local's DataLoader cell: epoch 1 took 51.0 s, the other nine 23.6-24.9 s."""
    epochs = [51.0, 23.6, 24.1, 24.9, 23.8, 24.0, 24.3, 24.6, 23.9, 24.2]
    assert disturbance.outliers(epochs) == [True] + [False] * 9
    assert disturbance.flags(epochs, [6.9] + [0.6] * 9) == ["outlier"] + [""] * 9
    assert disturbance.quiet(epochs, disturbance.flags(epochs, [None] * 10)) == epochs[1:]


def test_an_agreeing_cell_flags_nothing_and_short_cells_cannot_tell():
    assert disturbance.outliers([10.0, 10.1, 10.3, 10.2, 10.4]) == [False] * 5
    # 20 % slower but within the spread of a noisy cell: not an outlier
    assert disturbance.outliers([10.0, 12.0, 9.0, 11.5, 12.5]) == [False] * 5
    assert disturbance.outliers([10.0, 30.0]) == [False, False]


def test_load_flags_an_epoch_even_when_its_time_looks_normal():
    flags = disturbance.flags([10.0, 10.1, 10.2], [2.0, 40.0, None])
    assert flags == ["", "load", ""]
    assert disturbance.flags([10.0, 10.1, 10.0, 30.0], [1.0, 1.0, 1.0, 50.0])[3] == "load+outlier"


def test_quiet_keeps_everything_when_every_epoch_was_disturbed():
    assert disturbance.quiet([1.0, 2.0], ["load", "load"]) == [1.0, 2.0]


def test_the_sampler_reports_other_processes_load_over_a_window(monkeypatch):
    """others_load_between weighs each sampler window by its overlap with the epoch and
    subtracts the cell's own share (its 100 % of one core on 2 cores is 50 % of the
    machine)."""
    monkeypatch.setattr(monitor.psutil, "cpu_count", lambda logical=True: 2)
    mon = monitor.ResourceMonitor(interval=1.0)
    mon._t0 = 100.0
    rows = [(1.0, 90.0, 100.0), (2.0, 50.0, 100.0), (3.0, 95.0, 100.0)]  # t_s, sys %, proc %
    for t_s, sys_pct, proc_pct in rows:
        row = dict.fromkeys(monitor.RESOURCE_COLUMNS)
        row.update(t_s=t_s, sys_cpu_pct=sys_pct, proc_cpu_pct=proc_pct, stage="train")
        mon.rows.append(row)
        mon._dts.append(1.0)
    # window (101, 102]: others 50 - 50 = 0; window (100, 101]: 90 - 50 = 40
    assert mon.others_load_between(101.0, 102.0) == 0.0
    assert mon.others_load_between(100.0, 101.0) == 40.0
    assert mon.others_load_between(100.5, 101.5) == 20.0  # half of each window
    assert mon.others_load_between(200.0, 201.0) is None


def test_a_stage_switch_row_does_not_decide_an_epochs_others_load(monkeypatch):
    """The rows of a real tiny cell (2-core AVX2 machine, interval 0.5 s): a 2 ms row at the
    switch from warm-up to training read 799.7 % for the cell (one CPU-time tick), and the
    epoch, which ended before the next sample, got others -299.9 %, which the reader refused.
    Merged with its neighbour, that row gives a share within 0-100 %."""
    monkeypatch.setattr(monitor.psutil, "cpu_count", lambda logical=True: 2)
    mon = monitor.ResourceMonitor(interval=0.5)
    mon._t0 = 0.0
    previous = 0.0
    for t_s, proc_pct, sys_pct in ((0.037, 80.9, 100.0), (0.501, 99.1, 98.9),
                                   (0.503, 799.7, 100.0)):
        row = dict.fromkeys(monitor.RESOURCE_COLUMNS)
        row.update(t_s=t_s, sys_cpu_pct=sys_pct, proc_cpu_pct=proc_pct, stage="train")
        mon.rows.append(row)
        mon._dts.append(t_s - previous)
        previous = t_s
    others = mon.others_load_between(0.5025, 0.964)
    assert others is not None and 0.0 <= others <= 100.0, others


# --------------------------------------------------------------------------- in a real cell
@pytest.mark.slow
def test_a_disturbed_epoch_is_flagged_left_out_and_warned_about(tmp_path, tiny_mnist,
                                                                monkeypatch, capsys) -> None:
    """Where the sampler says others used 60 % of the machine during epoch 2, epochs.csv flags
    it (load), the summary counts it and leaves it out of the medians (the total counts it as
    the median of the others), and `mnistbench train` warns when the cell ends."""
    calls = []

    def others(self, start, end):
        calls.append((start, end))
        return 60.0 if len(calls) == 2 else 1.0

    monkeypatch.setattr(monitor.ResourceMonitor, "others_load_between", others)
    monkeypatch.setattr(disturbance, "OUTLIER_RATIO", float("inf"))  # tiny epochs are noisy
    code, summary, out = run(tmp_path, tiny_mnist, epochs=4, quiet=True)
    assert code == 0
    rows = read_csv(out / schema.EPOCHS_FILE)
    assert [r["disturbed"] for r in rows] == ["", "load", "", ""]
    assert [r["others_load_pct"] for r in rows] == ["1.0", "60.0", "1.0", "1.0"]
    quiet = [float(r["epoch_s"]) for i, r in enumerate(rows) if i != 1]
    res = summary["results"]
    assert res["disturbed_epochs"] == 1
    assert res["epoch_s_median"] == pytest.approx(statistics.median(quiet))
    assert res["total_s"] == pytest.approx(sum(quiet) + statistics.median(quiet))
    assert res["train_flops_per_sample"] == network.train_flops(1)
    assert res["achieved_gflops"] == pytest.approx(
        network.train_flops(1) * res["samples_per_s"] / 1e9)
    entry.report(out / schema.SUMMARY_FILE)  # what `mnistbench train` prints at the end
    err = capsys.readouterr().err
    assert "(median of the 3 quiet epochs of 4)" in err
    assert "mnistbench train: warning: " in err and "1 of 4 timed epoch(s) were disturbed" in err


@pytest.mark.slow
def test_a_cpu_hog_during_one_epoch_flags_it(tmp_path, tiny_mnist, monkeypatch, capsys):
    """Four busy-looping processes started at the beginning of epoch 3 and stopped at the
    beginning of epoch 4 (a real hog, measured by the real sampler) flag epoch 3, and the
    cell warns when it ends."""
    hogs: list[int] = []
    real_begin = trainer.Trainer.begin_epoch
    epochs_begun = []

    def start_hog() -> int:
        """A busy loop that is not the cell's descendant (the sampler counts those as the
        cell's own): started by a shell that exits at once, so it is reparented."""
        shell = subprocess.run(["sh", "-c", f"'{sys.executable}' -c 'while True: pass' "
                                ">/dev/null 2>&1 & echo $!"], capture_output=True, text=True,
                               check=True, timeout=30)
        return int(shell.stdout.strip())

    def stop_hogs() -> None:
        for pid in hogs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        hogs.clear()

    def begin(self, steps):
        epochs_begun.append(steps)
        if len(epochs_begun) == 3:
            hogs.extend(start_hog() for _ in range(4))
            time.sleep(0.3)  # the hogs run before the epoch starts
        elif len(epochs_begun) == 4:
            stop_hogs()
        return real_begin(self, steps)

    monkeypatch.setattr(trainer.Trainer, "begin_epoch", begin)
    try:
        code, summary, out = run(tmp_path, tiny_mnist, epochs=5, max_steps=0,
                                 sample_interval=0.05, batch_size=8, quiet=True)
    finally:
        stop_hogs()
    assert code == 0
    rows = read_csv(out / schema.EPOCHS_FILE)
    assert rows[2]["disturbed"], rows  # load, and most often an outlier as well
    assert float(rows[2]["others_load_pct"]) > disturbance.LOAD_PCT, rows
    assert summary["results"]["disturbed_epochs"] >= 1
    entry.report(out / schema.SUMMARY_FILE)
    assert "timed epoch(s) were disturbed" in capsys.readouterr().err


@pytest.mark.slow
def test_the_disturbed_column_reads_back_as_text_through_the_tables(tmp_path, tiny_mnist,
                                                                     monkeypatch):
    """A flagged epoch's reason survives aggregate and load_tables (a text column), and the
    report's readers see it."""
    from mnistbench.results import aggregate

    monkeypatch.setattr(monitor.ResourceMonitor, "others_load_between",
                        lambda self, start, end: 70.0)
    code, _, _ = run(tmp_path / "runs" / "e" / "adhoc", tiny_mnist, name="cell", epochs=2,
                       quiet=True, env="e", experiment="adhoc", cell="cell")
    assert code == 0
    aggregate.aggregate(tmp_path / "runs", tmp_path / "tables")
    epochs = aggregate.load_tables(tmp_path / "tables").epochs
    assert set(epochs["disturbed"]) <= {"load", "load+outlier"}
