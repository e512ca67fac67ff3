"""Tests for mnistbench.measure.outputs: a cell's three files appear together or not at all,
an unusable --out is one clear error before the run, measurements are strict JSON, and
collect_env is saved once per environment."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import torch

from mnistbench import cli
from mnistbench.core import atomic, schema
from mnistbench.measure import monitor, outputs, train
from mnistbench.measure.cellconfig import TrainConfig
from tests.measure.cells import TINY, read_csv, run, strict_json


def test_stale_outputs_are_removed_before_a_rerun(tmp_path, tiny_mnist) -> None:
    """A rerun never leaves an earlier run's epochs beside a new summary."""
    out = tmp_path / "cell"
    out.mkdir()
    (out / schema.EPOCHS_FILE).write_text("epoch\n1\n2\n")
    (out / schema.SUMMARY_FILE).write_text("{}")
    code, summary, out = run(tmp_path, tmp_path / "nowhere")  # fails before any epoch
    assert code == 12 and summary["status"] == "failed"
    assert read_csv(out / schema.EPOCHS_FILE) == []


@pytest.mark.parametrize("failing", ["resources", "summary"])
def test_full_disk_leaves_no_output_and_one_clear_error(tmp_path, tiny_mnist, monkeypatch,
                                                       capsys, failing) -> None:
    """A full disk while writing the 2nd or 3rd file leaves none of the three (and no
    temporary), and exits 1 with one paragraph naming the folder and the fix."""
    def full(path, *args, **kwargs):
        Path(path).write_text("partial")
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    if failing == "resources":
        monkeypatch.setattr(monitor.ResourceMonitor, "write_csv", lambda self, path: full(path))
    else:
        monkeypatch.setattr(atomic, "write_json", full)
    out = tmp_path / "runs" / "cell"
    code = cli.main(["train", "--data", str(tiny_mnist), "--out", str(out), "--max-steps", "2",
                     "--test-limit", "64", "--warmup-steps", "0", "--batch-size", "32",
                     "--sample-interval", "0.05", "--quiet"])
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mnistbench train: error: cannot write")
    assert str(out) in err[0] and "No space left on device" in err[0]
    assert "Free space on that disk, or pass --out" in err[0]
    assert "holds none of epochs.csv, resources.csv, summary.json" in err[0]
    assert list(tmp_path.iterdir()) == []  # the folders the cell created go too


@pytest.mark.parametrize("case", ["a file", "under a file", "read-only folder"])
def test_unusable_out_is_one_clear_error_before_the_run(tmp_path, tiny_mnist, monkeypatch,
                                                        capsys, case) -> None:
    """--out at a file, under a file or in a read-only folder exits 1 at once with one
    paragraph naming the path and the fix, and changes nothing on disk."""
    blocker = tmp_path / "file"
    blocker.write_text("keep")
    out = {"a file": blocker, "under a file": blocker / "sub" / "cell",
           "read-only folder": tmp_path / "ro"}[case]
    if case == "read-only folder":
        out.mkdir()

        def denied(*args, dir=None, **kwargs):  # what a read-only folder does to non-root
            raise PermissionError(errno.EACCES, "Permission denied", str(dir))

        monkeypatch.setattr(outputs.tempfile, "mkstemp", denied)
    monkeypatch.setattr(train, "build_loaders", lambda *a: pytest.fail("the cell ran"))
    code = cli.main(["train", "--data", str(tiny_mnist), "--out", str(out), "--quiet"])
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mnistbench train: error: cannot write")
    assert f"into {out}:" in err[0] and "--out" in err[0]
    assert "Nothing was run or written" in err[0]
    if case == "read-only folder":
        assert "Permission denied" in err[0] and "writable" in err[0]
        assert list(out.iterdir()) == []
    else:
        assert f"{blocker} is a file" in err[0] or "it is a file" in err[0]
        assert blocker.read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["file"] + (["ro"] if case == "read-only folder" else []))


def test_non_finite_measurement_is_written_as_null(tmp_path, tiny_mnist, monkeypatch) -> None:
    """A NaN measurement becomes null, so summary.json stays strict JSON."""
    real = monitor.ResourceMonitor.summary
    monkeypatch.setattr(monitor.ResourceMonitor, "summary",
                        lambda self, stage="train": {**real(self, stage),
                                                     "cpu_pct_mean": float("nan")})
    code, _, out = run(tmp_path, tiny_mnist)
    summary = strict_json(out / schema.SUMMARY_FILE)
    assert code == 0 and summary["results"]["cpu_pct_mean"] is None


@pytest.mark.slow
def test_collect_env_is_saved_once_per_environment(tmp_path, tiny_mnist, monkeypatch) -> None:
    """A cell filed at RUNS/ENV/EXPERIMENT/CELL leaves torch's collect_env report in RUNS/ENV
    once (a later cell keeps it); a cell elsewhere leaves none; the aggregate ignores it."""
    from mnistbench.measure import hardware
    from mnistbench.results import aggregate

    runs = tmp_path / "runs"
    made = []
    real = hardware.collect_env_report
    monkeypatch.setattr(hardware, "collect_env_report",
                        lambda: made.append(1) or real())
    for cell in ("a", "b"):
        out = runs / "lab" / "adhoc" / cell
        code = train.run_cell(TrainConfig(out=out, data=tiny_mnist, env="lab", **TINY))
        assert code == 0
    report = runs / "lab" / hardware.COLLECT_ENV_FILE
    assert "PyTorch version" in report.read_text()
    assert made == [1]
    code, _, out = run(tmp_path, tiny_mnist, name="loose")
    assert code == 0
    assert made == [1]
    assert not (out.parent / hardware.COLLECT_ENV_FILE).exists()
    assert not (out.parent.parent / hardware.COLLECT_ENV_FILE).exists()
    aggregate.aggregate(runs, tmp_path / "tables")
    assert len(read_csv(tmp_path / "tables" / "summary.csv")) == 2


@pytest.mark.slow
def test_collect_env_failure_does_not_fail_the_cell(tmp_path, tiny_mnist, monkeypatch,
                                                    capsys) -> None:
    """A collect_env report that cannot be made is a warning; the cell stays ok."""
    from mnistbench.measure import hardware

    def broken():
        raise RuntimeError("pip is missing")

    monkeypatch.setattr(hardware, "collect_env_report", broken)
    out = tmp_path / "runs" / "lab" / "adhoc" / "a"
    assert train.run_cell(TrainConfig(out=out, data=tiny_mnist, env="lab", **TINY)) == 0
    assert "could not save" in capsys.readouterr().err


@pytest.mark.slow
def test_the_trainers_cells_of_every_status_pass_the_readers_checks(tmp_path, tiny_mnist,
                                                                    monkeypatch) -> None:
    """What the trainer writes, ok, failed by a diverged loss, or unavailable, is valid to
    mnistbench.results.validate (which refuses only bad values), with its recorded status;
    collect_env.txt is the environment file an archive carries."""
    from mnistbench.measure import hardware
    from mnistbench.results import archive, validate

    assert archive.ENV_FILES == (hardware.COLLECT_ENV_FILE,)
    monkeypatch.setattr(hardware, "collect_env_report", lambda: "report\n")
    runs = tmp_path / "runs"
    settings = {"ok": {"epochs": 2}, "failed": {"lr": 1e10, "warmup_steps": 0, "epochs": 2},
                "unavailable": {"device": "cuda"} if not torch.cuda.is_available() else None}
    for name, extra in settings.items():
        if extra is None:
            continue
        out = runs / "lab" / "adhoc" / name
        train.run_cell(TrainConfig(out=out, data=tiny_mnist, env="lab",
                                   **{**TINY, **extra}))
        cell = validate.read_cell(out)
        assert cell.valid, cell.problems
        assert cell.status == name
