"""Unit tests of mnistbench.launch.estimate, the study's duration: a cell's FLOPs from its
plan, the measured limit it is set against, the least-squares refit of overhead and
efficiencies, the total with its range, the lines a study prints (the first estimate after
the peak jobs, one after each cell, one a minute while a cell runs) on fake files and a fake
clock, and `mnistbench estimate` on a plan file. The wiring into the workflow (the first line
before the first cell, a dry run's last line) is tested through real runs in
tests/workflow/test_module.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mnistbench.core import network, schema, study
from mnistbench.launch import estimate as est

ENV = "est-test"


def cell(experiment: str = "sweep", repeat: int = 0, *, loader: str = "resident",
         precision: str = "fp32", batch_size: int = 64, epochs: int = 1, warmup_steps: int = 3,
         max_steps: int = 10, train_limit: int = 6000, test_limit: int = 1000,
         width: int = 1) -> study.Cell:
    return study.Cell(env=ENV, partition=None, experiment=experiment, repeat=repeat, seed=repeat,
                      device="cpu", precision=precision, loader=loader, batch_size=batch_size,
                      epochs=epochs, lr=1e-3, warmup_steps=warmup_steps, max_steps=max_steps,
                      train_limit=train_limit, test_limit=test_limit, time_limit=0.0,
                      width=width)


def write_peak(runs: Path, gflops: dict[str, float], env: str = ENV) -> Path:
    path = runs / env / schema.PEAK_DIR / schema.peak_file("cpu")
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"kernel": k, "precision": p, "gflops": g * f, "calls": 1, "seconds": 1.0,
             "shape": ""} for p, g in gflops.items() for k, f in (("matmul", 1.0),
                                                                     ("conv2", 0.5))]
    path.write_text(json.dumps({"status": "ok", "device": "cpu", "rows": rows}))
    return path


def write_summary(runs: Path, c: study.Cell, *, process_s: float = 5.0,
                  status: str = "ok") -> Path:
    path = Path(c.folder(str(runs)), schema.SUMMARY_FILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    params = {"env": c.env, "experiment": c.experiment, "device": c.device,
              "precision": c.precision, "loader": c.loader, "batch_size": c.batch_size,
              "epochs": c.epochs, "warmup_steps": c.warmup_steps, "max_steps": c.max_steps,
              "train_limit": c.train_limit, "test_limit": c.test_limit, "width": c.width}
    timing = {"timed_s": process_s * 0.6, "warmup_s": process_s * 0.1,
              "overhead_s": process_s * 0.3}
    path.write_text(json.dumps({"status": status, "params": params, "timing": timing}))
    return path


# --------------------------------------------------------------------------- work and limit
def test_a_cells_gflop_counts_its_steps_warmup_and_test_samples():
    t, e = network.train_flops(1), network.eval_flops(1)
    assert est.cell_gflop(cell()) == pytest.approx((640 * t + 1000 * e + 3 * 64 * t) / 1e9)
    # max_steps 0: every training sample of train_limit, each epoch; 0 limits: all of MNIST.
    full = cell("convergence", epochs=2, max_steps=0, train_limit=0, test_limit=0,
                warmup_steps=0)
    assert est.cell_gflop(full) == pytest.approx(2 * (60_000 * t + 10_000 * e) / 1e9)
    # max_steps beyond the samples there are: the samples.
    assert est.cell_gflop(cell(max_steps=1000, train_limit=640, warmup_steps=0)) == \
        pytest.approx((640 * t + 1000 * e) / 1e9)
    wide = cell(width=2, warmup_steps=0)
    assert est.cell_gflop(wide) == pytest.approx(
        (640 * network.train_flops(2) + 1000 * network.eval_flops(2)) / 1e9)
    work = est.cell_work(cell(loader="dataloader"))
    assert (work.key, work.code, work.name) == (
        cell(loader="dataloader").key, "dataloader", "sweep/cpu-fp32-dataloader-b64-r0")


def test_the_limit_is_the_peak_records_best_row_at_the_precision_else_fp32_else_a_default(
        tmp_path):
    assert est.peak_gflops(tmp_path, ENV, "cpu", "fp32", cores=2) == (
        2 * est.DEFAULT_PEAK_GFLOPS["cpu"], False)
    write_peak(tmp_path, {"fp32": 100.0, "bf16": 300.0})
    assert est.peak_gflops(tmp_path, ENV, "cpu", "bf16", cores=2) == (300.0, True)
    assert est.peak_gflops(tmp_path, ENV, "cpu", "fp16", cores=2) == (100.0, True)
    failed = tmp_path / ENV / schema.PEAK_DIR / "cpu.json"
    failed.write_text(json.dumps({"status": "failed", "rows": []}))
    assert est.peak_gflops(tmp_path, ENV, "cpu", "fp32", cores=1)[1] is False


def test_a_limit_or_summary_that_cannot_be_true_or_is_hostile_is_not_used(tmp_path):
    """Issue 41: the estimate reads runs/ENV/peak/*.json and earlier summaries bounded (no
    RecursionError from JSON nested 5000 deep, no link followed) and takes no limit past
    schema.MAX_GFLOPS (a 1e300 record gave an estimate of about 0 s): the default instead."""
    default = (2 * est.DEFAULT_PEAK_GFLOPS["cpu"], False)
    path = write_peak(tmp_path, {"fp32": 1e300})
    assert est.peak_gflops(tmp_path, ENV, "cpu", "fp32", cores=2) == default
    path.write_text("[" * 5000 + "]" * 5000)
    assert est.peak_gflops(tmp_path, ENV, "cpu", "fp32", cores=2) == default
    real = write_peak(tmp_path / "elsewhere", {"fp32": 100.0})
    path.unlink()
    path.symlink_to(real)
    assert est.peak_gflops(tmp_path, ENV, "cpu", "fp32", cores=2) == default
    plan = est.Plan.of_cells([cell()], [], str(tmp_path), 2, [ENV])
    summary = write_summary(tmp_path, cell(repeat=1))
    assert est.summary_observation(summary, plan) is not None
    summary.write_text('{"status": "ok", "params": ' + "[" * 5000 + "]" * 5000 + "}")
    assert est.summary_observation(summary, plan) is None


# --------------------------------------------------------------------------- the fit
def test_the_fit_recovers_overhead_and_efficiencies_from_many_cells():
    truth = est.Model(overhead={"resident": 2.0, "dataloader": 9.0},
                      k={"resident": 5.0, "dataloader": 25.0})
    observations = [est.Observation(code, x, truth.seconds(x, code))
                    for code in ("resident", "dataloader") for x in (0.1, 0.5, 1.0, 2.0, 4.0)
                    for _ in range(20)]
    model = est.fit(observations)  # from the documented defaults
    assert model.overhead_of("resident") == pytest.approx(2.0, rel=0.1)
    assert model.overhead_of("dataloader") == pytest.approx(9.0, rel=0.1)
    assert model.efficiency("resident") == pytest.approx(0.2, rel=0.02)
    assert model.efficiency("dataloader") == pytest.approx(0.04, rel=0.02)
    # An exact fit: the floor, and what is left of the prior's spread after 200 cells.
    assert model.spread == pytest.approx(1 + est.SPREAD_FLOOR + 1 / 201)
    first = observations[0]
    one = est.fit([first])
    error = abs(first.wall_s / one.seconds(first.x, first.code) - 1)
    assert one.spread == pytest.approx(1 + max(est.SPREAD_FLOOR, error) + 1 / 2)
    assert model.cells == len(observations)


def test_one_cell_moves_the_estimate_between_the_prior_and_what_it_took():
    prior = est.Model(overhead={"resident": 4.0}, k={"resident": 5.0})
    x = 2.0
    slow = est.fit([est.Observation("resident", x, 40.0)], prior, {"resident": x})
    predicted = slow.seconds(x, "resident")
    assert prior.seconds(x, "resident") < predicted < 40.0
    # A code the cells did not show keeps its prior.
    assert slow.k_of("dataloader") == pytest.approx(1 / est.DEFAULT_EFFICIENCY["dataloader"])
    assert est.fit([], prior) is prior


def test_the_fit_keeps_efficiency_at_most_one_and_the_overhead_non_negative():
    fast = [est.Observation("resident", x, 0.0) for x in (1.0, 2.0, 3.0)]
    model = est.fit(fast)
    assert model.overhead_of("resident") >= 0.0
    # More work taking less time: k would be below 1 (an efficiency above 1), so it is 1 and
    # the overhead takes the rest; a negative overhead is 0.
    backwards = [est.Observation("resident", x, 100.0 - 10 * x) for x in (1.0, 2.0, 3.0)] * 10
    assert est.fit(backwards).efficiency("resident") == 1.0
    # (the prior's overhead + the walls less x each) over the 30 cells and the prior's one
    prior_c = est.DEFAULT_OVERHEAD_S["resident"]
    assert est.fit(backwards).overhead_of("resident") == pytest.approx(
        (prior_c + 30 * 80 - 30 * 2) / 31)
    steep = [est.Observation("resident", x, 10 * x - 5) for x in (1.0, 2.0, 3.0)] * 10
    assert est.fit(steep).overhead_of("resident") == 0.0
    assert model.efficiency("resident") <= 1.0


def test_the_spread_is_the_cells_rms_relative_error():
    model = est.Model(overhead={"resident": 0.0}, k={"resident": 1.0})
    noisy = [est.Observation("resident", 10.0, w) for w in (5.0, 15.0)] * 50
    fitted = est.fit(noisy, model, {"resident": 10.0})
    assert fitted.seconds(10.0, "resident") == pytest.approx(10.0, rel=0.02)
    assert fitted.spread == pytest.approx(1.5, rel=0.03)


# --------------------------------------------------------------------------- the total
def test_the_total_sums_the_cells_left_the_peak_jobs_and_the_tail(tmp_path):
    write_peak(tmp_path, {"fp32": 100.0})
    cells = [cell(repeat=r) for r in range(3)] + [cell(loader="dataloader")]
    plan = est.Plan.of_cells(cells, [(ENV, "cpu")], str(tmp_path), 2, [ENV])
    model = est.Model(overhead={"resident": 3.0, "dataloader": 7.0},
                      k={"resident": 4.0, "dataloader": 10.0}, spread=1.5)
    x = est.cell_gflop(cells[0]) / 100.0
    full = est.estimate(plan, model)
    expected = (est.TAIL_S + est.PEAK_JOB_S + 3 * (3.0 + 4.0 * x) + (7.0 + 10.0 * x))
    assert full.left_s == pytest.approx(expected)
    assert (full.low_s, full.high_s) == pytest.approx((expected / 1.5, expected * 1.5))
    assert (full.total, full.done, full.measured_peak) == (4, 0, True)
    later = est.estimate(plan, model, [cells[0].key, cells[3].key], 20.0, 0)
    assert later.left_s == pytest.approx(est.TAIL_S + 2 * (3.0 + 4.0 * x))
    assert (later.done, later.spent_s) == (2, 20.0)


def test_earlier_results_of_this_machine_refit_the_prior(tmp_path):
    write_peak(tmp_path, {"fp32": 100.0})
    earlier = [cell(repeat=r, batch_size=b) for r in range(3) for b in (32, 64, 128)]
    for c in earlier:
        write_summary(tmp_path, c, process_s=9.0)
    write_summary(tmp_path, cell("tips", loader="dataloader"), process_s=1.0, status="failed")
    pending = cell("sweep", repeat=5)
    plan = est.Plan.of_cells([pending], [], str(tmp_path), 2, [ENV])
    model = est.earlier_model(plan, exclude=[pending.key])
    assert model.source == "9 earlier cells of this machine"
    assert model.spread >= est.SPREAD_EARLIER
    x = plan.x(est.cell_work(pending))[0]
    assert model.seconds(x, "resident") == pytest.approx(9.0 + est.DEFAULT_JOB_START_S, rel=0.15)
    # Another environment's cells are not this machine's.
    other = est.Plan.of_cells([pending], [], str(tmp_path), 2, ["elsewhere"])
    assert est.earlier_model(other).source == "documented defaults"


def test_durations_and_clock_times_print_as_people_read_them():
    assert est.duration(0.4) == "0 s"
    assert est.duration(59.6) == "1 min 00 s"
    assert est.duration(250) == "4 min 10 s"
    assert est.duration(3900) == "1 h 05 min"
    assert est.clock(0) == "00:00 UTC"


# --------------------------------------------------------------------------- the watcher
class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_line_while_a_cell_runs_counts_down_through_it():
    """While a cell estimated at 10 min runs, the time left falls with it, and stops at the
    cells after it once the cell outruns its estimate."""
    left = est.Estimate(total=3, done=1, left_s=1800.0, low_s=900.0, high_s=3600.0,
                        spent_s=120.0, measured_peak=True, model=est.Model())
    lines = [est.running_line(left, "convergence/c", running, 600.0)
             for running in (60.0, 300.0, 900.0)]
    assert [line.split("; ")[1] for line in lines] == [
        "2 min 00 s spent, about 29 min 00 s left", "2 min 00 s spent, about 25 min 00 s left",
        "2 min 00 s spent, about 20 min 00 s left"]


def test_the_watcher_prints_the_estimate_after_the_peak_then_a_line_per_cell(tmp_path):
    cells = [cell(repeat=r) for r in range(4)]
    plan = est.Plan.of_cells(cells, [(ENV, "cpu")], str(tmp_path), 2, [ENV])
    lines: list[str] = []
    clock = Clock()
    watcher = est.Watcher(plan, lines.append, now=clock, heartbeat_s=60.0)
    watcher.poll()
    # The peak job has not written its record: at once, the estimate from a default limit.
    assert len(lines) == 1 and lines[0].startswith("estimate: 4 cells, about ")
    assert "a default limit (not measured yet)" in lines.pop()
    assert watcher.preliminary is not None and watcher.first is None
    watcher.poll()
    assert lines == []  # nothing new
    clock.now += 60  # a line a minute while the jobs before the cells run
    watcher.poll()
    assert lines.pop() == ("progress: 1 min 00 s spent; the cells start once the jobs before "
                           "them are done (1 measured limit to go, after MNIST and any image)")
    clock.now -= 50
    write_peak(tmp_path, {"fp32": 100.0})
    watcher.poll()
    assert len(lines) == 1 and lines[0].startswith("estimate: 4 cells, about ")
    assert "the measured limit" in lines[0] and "documented defaults" in lines[0]
    first = watcher.first
    assert first is not None and first.measured_peak and first.spent_s == 10
    # A cell that takes 30 s (from the end of the peak job), then one that runs 61 s: the
    # line a minute.
    clock.now += 30
    write_summary(tmp_path, cells[0])
    watcher.poll()
    assert lines[1].startswith("estimate: 1/4 cells done (sweep/cpu-fp32-resident-b64-r0); "
                               "40 s spent, about ")
    assert watcher.done[cells[0].key].wall_s == 30
    clock.now += 61
    watcher.poll()
    assert lines[2].startswith("progress: cell 2/4 (sweep/cpu-fp32-resident-b64-r1) running "
                               "for 1 min 01 s; 1 min 41 s spent")
    watcher.poll()
    assert len(lines) == 3  # nothing new: no line
    for c in cells[1:]:
        clock.now += 30
        write_summary(tmp_path, c)
        watcher.poll()
    assert watcher.last is not None and watcher.last.done == 4
    # Every cell took 30 s but the second (91 s); all done: only the tail is left.
    assert watcher.last.left_s == pytest.approx(est.TAIL_S)
    assert [o.wall_s for o in watcher.done.values()] == [30, 91, 30, 30]


def test_the_refit_follows_the_cells_done(tmp_path):
    """Cells that take 4x what the defaults say: the estimate after a few cells is near the
    truth, the first one is not."""
    write_peak(tmp_path, {"fp32": 100.0})
    cells = [cell(repeat=r) for r in range(12)]
    plan = est.Plan.of_cells(cells, [], str(tmp_path), 2, [ENV])
    clock = Clock()
    watcher = est.Watcher(plan, lambda line: None, now=clock)
    watcher.poll()
    per_cell = 4 * est.Model().seconds(plan.x(est.cell_work(cells[0]))[0], "resident")
    truth = 12 * per_cell + est.TAIL_S
    assert watcher.first.left_s < truth / 2
    for c in cells[:6]:
        clock.now += per_cell
        write_summary(tmp_path, c)
        watcher.poll()
    assert watcher.last.spent_s + watcher.last.left_s == pytest.approx(truth, rel=0.1)
    assert watcher.last.low_s <= watcher.last.left_s <= watcher.last.high_s


def test_the_watcher_without_peak_jobs_prints_at_once_and_a_failed_cell_does_not_fit(tmp_path):
    write_peak(tmp_path, {"fp32": 100.0})
    cells = [cell(repeat=r) for r in range(2)]
    plan = est.Plan.of_cells(cells, [], str(tmp_path), 2, [ENV])
    lines: list[str] = []
    clock = Clock()
    watcher = est.Watcher(plan, lines.append, now=clock)
    watcher.poll()
    assert len(lines) == 1
    clock.now += 5
    write_summary(tmp_path, cells[0], status="oom")
    watcher.poll()
    assert watcher.done[cells[0].key] is None and watcher.model.source == "documented defaults"
    assert lines[1].startswith("estimate: 1/2 cells done")


def test_the_watcher_thread_starts_and_stops(tmp_path):
    write_peak(tmp_path, {"fp32": 100.0})
    plan = est.Plan.of_cells([cell()], [], str(tmp_path), 2, [ENV])
    lines: list[str] = []
    watcher = est.Watcher(plan, lines.append)
    watcher.start(interval_s=0.01)
    write_summary(tmp_path, cell())
    for _ in range(500):
        if len(lines) == 2:
            break
        time.sleep(0.01)
    watcher.stop()
    assert len(lines) == 2, lines


# --------------------------------------------------------------------------- the plan file
def test_the_plan_round_trips_and_the_cli_prints_where_it_stands(tmp_path):
    write_peak(tmp_path / "runs", {"fp32": 100.0})
    cells = [cell(repeat=r) for r in range(3)]
    plan = est.Plan.of_cells(cells, [(ENV, "cpu")], str(tmp_path / "runs"), 2, [ENV])
    path = est.write_plan(plan, tmp_path / "logs")
    again = est.Plan.from_json(path.read_text())
    assert again == plan

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mnistbench.console", "estimate", *args],
                              capture_output=True, text=True, timeout=120, check=False)

    before = cli("--plan", str(path))
    assert before.returncode == 0, before.stderr
    assert before.stdout.split(" ending")[0] == est.plan_summary(plan).split(" ending")[0]
    assert before.stdout.startswith("estimate: 3 cells, about ")
    write_summary(tmp_path / "runs", cells[0])
    during = cli("--plan", str(path))
    assert during.stdout.startswith("estimate: 1/3 cells done, about "), during.stdout
    missing = cli("--plan", str(tmp_path / "none.json"))
    assert missing.returncode == 1 and "cannot read the plan" in missing.stderr


def test_a_plan_that_no_study_wrote_is_one_paragraph_naming_the_key(tmp_path, capsys):
    """Weak cases of the sweep of issue 41 on `mnistbench estimate --plan`: a plan nested
    5000 deep (RecursionError), `cores` a word or 0, `runs` a number, a cell's `gflop` NaN,
    1e308 or -1e308 (ValueError, OverflowError, TypeError tracebacks, or a silent estimate),
    a cell key a number, an extra key, a folder or non-UTF-8 bytes: each is now exit 1 with
    one line naming the plan, the key and what it should hold."""
    from mnistbench import cli

    plan = est.Plan.of_cells([cell(repeat=r) for r in range(2)], [(ENV, "cpu")],
                             str(tmp_path / "runs"), 2, [ENV])
    good = json.loads(plan.to_json())

    def edited(**changes):
        data = json.loads(json.dumps(good))
        for key, value in changes.items():
            if key.startswith("cell_"):
                data["cells"][0][key[5:]] = value
            else:
                data[key] = value
        return json.dumps(data)

    cases = {
        "deep.json": ("[" * 5000 + "]" * 5000, "nested deeper than 64 levels"),
        "cores_word.json": (edited(cores="x"), "cores is 'x', expected a whole number"),
        "cores_0.json": (edited(cores=0), "cores is 0, expected a whole number 1 or more"),
        "runs.json": (edited(runs=5), "runs is '5', expected a string"),
        "nan.json": (edited(cell_gflop=float("nan")), "cells[0].gflop is nan, expected a "
                     "finite number 0 to 1e+09"),
        "huge.json": (edited(cell_gflop=1e308), "cells[0].gflop is 1e+308"),
        "negative.json": (edited(cell_gflop=-1e308), "cells[0].gflop is -1e+308"),
        "key.json": (edited(cell_key=5), "cells[0].key is '5', expected 3 strings"),
        "extra.json": (edited(cell_extra=1), "cells[0] has extra, which no plan has"),
        "list.json": ("[]", "not a JSON object"),
        "short.json": ('{"cells": []}', "the plan lacks peaks, runs, cores, envs"),
        "bytes.json": (b"\xff\xfe", "not UTF-8 text"),
        "folder": (None, "not a regular file but a folder"),
    }
    for name, (content, words) in cases.items():
        path = tmp_path / name
        if content is None:
            path.mkdir()
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        assert cli.main(["estimate", "--plan", str(path)]) == 1, name
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, (name, err)
        assert err[0].startswith(f"mnistbench estimate: error: cannot read the plan {path} (")
        assert words in err[0], (name, err[0])
    assert est.Plan.from_json(plan.to_json()) == plan  # what the workflow writes still reads


def test_a_peak_record_or_summary_nested_deep_or_with_a_word_is_passed_over(tmp_path):
    """Weak case of the sweep of issue 41 (deep nesting): `estimate` (and the estimate of
    `snakemake -n`) read runs/ENV/peak/cpu.json and every done cell's summary.json with
    json.loads: one nested 5000 deep was a RecursionError traceback, a gflops of "fast" a
    ValueError. Such a record now gives the default limit, such a summary no observation,
    as an unreadable one did."""
    default = (2 * est.DEFAULT_PEAK_GFLOPS["cpu"], False)
    record = write_peak(tmp_path, {"fp32": 100.0})
    deep = "[" * 5000 + "]" * 5000
    for text in (deep, json.dumps({"rows": [{"kernel": "matmul", "precision": "fp32",
                                             "gflops": "fast"}]}),
                 json.dumps({"rows": [{"kernel": "matmul", "precision": "fp32",
                                       "gflops": float("nan")}]})):
        record.write_text(text)
        assert est.peak_gflops(tmp_path, ENV, "cpu", "fp32", cores=2) == default
    done = cell()
    plan = est.Plan.of_cells([done], [], str(tmp_path), 2, [ENV])
    summary = write_summary(tmp_path, done)
    assert est.summary_observation(summary, plan) is not None
    summary.write_text(deep)
    assert est.summary_observation(summary, plan) is None
