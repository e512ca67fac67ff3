"""Tests for mnistbench.measure.train: one honest cell, its outputs, statuses and exit codes."""

from __future__ import annotations

import contextlib
import csv
import errno
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mnistbench import cli
from mnistbench.core import atomic, envvars, network, options, provenance, schema
from mnistbench.core.devices import SUPPORTED
from mnistbench.measure import train, trainer
from tests.conftest import TINY_TRAIN

TINY = {"max_steps": 4, "test_limit": 128, "warmup_steps": 1, "batch_size": 32,
        "sample_interval": 0.05, "quiet": True}


def run(tmp_path: Path, data: Path, name: str = "cell", **overrides) -> tuple[int, dict, Path]:
    """Run one cell in-process; its exit code, summary and folder."""
    settings = {**TINY, **overrides}
    out = tmp_path / name
    code = train.run_cell(train.TrainConfig(out=out, data=data, **settings))
    summary = json.loads((out / schema.SUMMARY_FILE).read_text())
    return code, summary, out


def read_csv(path: Path) -> list[dict]:
    """Rows of a CSV file as dicts."""
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("loader", ["resident", "dataloader"])
@pytest.mark.parametrize("precision", SUPPORTED["cpu"])
def test_every_cpu_precision_and_loader_runs(tmp_path, tiny_mnist, loader, precision) -> None:
    """Each CPU precision with each loader ends ok with complete, schema-shaped outputs."""
    code, summary, out = run(tmp_path, tiny_mnist, loader=loader, precision=precision, epochs=2)
    assert code == 0, summary["reason"]
    assert summary["status"] == "ok"
    assert set(summary["params"]) == set(schema.PARAM_FIELDS)
    assert set(summary["results"]) == set(schema.RESULT_FIELDS)
    assert set(summary["timing"]) == set(schema.TIMING_FIELDS)
    assert set(summary["env"]) == set(schema.ENV_FIELDS)
    assert summary["params"]["precision"] == precision
    assert summary["params"]["loader"] == loader
    assert summary["params"]["eval_batch_size"] == 32  # 0 resolves to the training batch size
    rows = read_csv(out / schema.EPOCHS_FILE)
    assert list(rows[0]) == list(schema.EPOCH_COLUMNS)
    assert [int(r["steps"]) for r in rows] == [4, 4]
    assert [int(r["samples"]) for r in rows] == [128, 128]
    resources = read_csv(out / schema.RESOURCES_FILE)
    assert resources and list(resources[0]) == list(schema.RESOURCE_COLUMNS)
    res = summary["results"]
    assert res["steps_per_epoch"] == 4
    assert 0 <= res["final_test_acc"] <= 100
    assert res["peak_rss_mb"] > 50
    assert summary["sources"]["adam"] == "torch._fused_adam_"  # the pinned torch passes
    assert summary["sources"]["adam_fallback"] is None


@pytest.mark.slow
def test_phases_add_up_to_epoch_wall_time(tmp_path, tiny_mnist) -> None:
    """Data + forward + backward + optimizer + eval is within 5% of each epoch's wall time."""
    code, _, out = run(tmp_path, tiny_mnist, max_steps=0, epochs=2, loader="dataloader")
    assert code == 0
    for row in read_csv(out / schema.EPOCHS_FILE):
        phases = sum(float(row[f"{p}_s"]) for p in schema.PHASES)
        assert phases == pytest.approx(float(row["epoch_s"]), rel=0.05)
        assert float(row["train_s"]) + float(row["eval_s"]) == pytest.approx(phases)
        assert all(float(row[f"{p}_s"]) > 0 for p in schema.PHASES)


@pytest.mark.slow
def test_warm_up_does_not_change_the_trajectory(tmp_path, tiny_mnist) -> None:
    """The same seed gives the same losses and accuracy with and without warm-up steps."""
    settings = {"epochs": 2, "max_steps": 6, "loader": "resident", "threads": 1}
    _, cold, out_cold = run(tmp_path, tiny_mnist, "cold", warmup_steps=0, **settings)
    _, warm, out_warm = run(tmp_path, tiny_mnist, "warm", warmup_steps=4, **settings)
    assert cold["timing"]["warmup_s"] == 0
    assert warm["timing"]["warmup_s"] > 0
    keys = ("train_loss", "test_loss", "test_acc")
    strip = [{k: r[k] for k in keys} for r in read_csv(out_cold / schema.EPOCHS_FILE)]
    assert strip == [{k: r[k] for k in keys} for r in read_csv(out_warm / schema.EPOCHS_FILE)]


def test_seed_changes_the_trajectory(tmp_path, tiny_mnist) -> None:
    """A different seed gives a different run (the seed is really used)."""
    _, a, _ = run(tmp_path, tiny_mnist, "a", seed=0)
    _, b, _ = run(tmp_path, tiny_mnist, "b", seed=1)
    assert a["results"]["final_train_loss"] != b["results"]["final_train_loss"]


@pytest.mark.slow
def test_learns_tiny_data(tmp_path, tiny_mnist) -> None:
    """Two full epochs on the synthetic digits reach high test accuracy."""
    code, summary, _ = run(tmp_path, tiny_mnist, max_steps=0, test_limit=0, epochs=2)
    assert code == 0
    assert summary["results"]["best_test_acc"] > 90


def test_cuda_without_gpu_is_unavailable(tmp_path, tiny_mnist) -> None:
    """Asking for cuda on a machine without a GPU gives status unavailable and exit 10."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code, summary, out = run(tmp_path, tiny_mnist, device="cuda")
    assert code == schema.EXIT_CODES["unavailable"] == 10
    assert summary["status"] == "unavailable"
    assert "cuda" in summary["reason"] and "GPU" in summary["reason"]
    assert summary["results"]["epoch_s_median"] is None
    assert read_csv(out / schema.EPOCHS_FILE) == []


def test_out_of_memory_is_a_result(tmp_path, tiny_mnist, monkeypatch) -> None:
    """An out-of-memory error gives status oom naming the batch size, and exit 11."""
    def explode(self, x, y, timer):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(train.Trainer, "step", explode)
    code, summary, _ = run(tmp_path, tiny_mnist, batch_size=64)
    assert code == schema.EXIT_CODES["oom"] == 11
    assert summary["status"] == "oom"
    assert "batch size 64" in summary["reason"]


def test_other_errors_fail_with_their_message(tmp_path, tiny_mnist, monkeypatch) -> None:
    """Any other exception gives status failed with its message, and exit 12."""
    def explode(self, x, y, timer):
        raise ValueError("the <b>step</b> broke")

    monkeypatch.setattr(train.Trainer, "step", explode)
    code, summary, out = run(tmp_path, tiny_mnist)
    assert code == schema.EXIT_CODES["failed"] == 12
    assert summary["status"] == "failed"
    assert summary["reason"] == "ValueError: the <b>step</b> broke"
    assert not list(out.glob("*.part")) and not list(out.glob(".*"))


def test_time_limit_fails_the_cell_with_the_limit_as_reason(tmp_path, tiny_mnist,
                                                           monkeypatch) -> None:
    """A cell that outruns --time-limit ends failed (exit 12), naming the limit, the epoch it
    reached and the config key, with no epoch rows, and the next cell is not disturbed."""
    real_step = train.Trainer.step

    def slow(self, x, y, timer):
        time.sleep(0.05)
        return real_step(self, x, y, timer)

    monkeypatch.setattr(train.Trainer, "step", slow)
    code, summary, out = run(tmp_path, tiny_mnist, epochs=50, time_limit=0.6,
                             experiment="convergence")
    assert code == schema.EXIT_CODES["failed"]
    assert summary["status"] == "failed"
    assert summary["reason"].startswith("time limit of 0.6 s reached in timed epoch ")
    assert "of 50" in summary["reason"]
    assert "experiments.convergence.time_limit" in summary["reason"]
    assert summary["params"]["time_limit"] == 0.6
    assert read_csv(out / schema.EPOCHS_FILE) == []
    assert summary["timing"]["warmup_s"] > 0
    monkeypatch.setattr(train.Trainer, "step", real_step)
    code, summary, _ = run(tmp_path, tiny_mnist, name="after", time_limit=60)
    assert code == 0 and summary["status"] == "ok", summary["reason"]
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.default_int_handler)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_time_limit_is_not_swallowed_by_broad_handlers(tmp_path, tiny_mnist,
                                                      monkeypatch) -> None:
    """The limit fires through code that catches every Exception (as the resource sampler's
    stage switch does): the cell still ends failed, never ok."""
    real_step = train.Trainer.step

    def guarded(self, x, y, timer):
        with contextlib.suppress(Exception):  # a broad handler must not hide the limit
            time.sleep(0.05)
        return real_step(self, x, y, timer)

    monkeypatch.setattr(train.Trainer, "step", guarded)
    code, summary, _ = run(tmp_path, tiny_mnist, epochs=50, time_limit=0.3)
    assert code == 12 and summary["reason"].startswith("time limit of 0.3 s")


def test_time_limit_in_warm_up_says_so(tmp_path, tiny_mnist, monkeypatch) -> None:
    """A limit reached before the first timed epoch names the warm-up."""
    def stuck(trainer, loaders, cfg):
        time.sleep(5)

    monkeypatch.setattr(train, "warm_up", stuck)
    code, summary, _ = run(tmp_path, tiny_mnist, time_limit=0.2)
    assert code == 12 and "reached in the warm-up" in summary["reason"]


def test_missing_data_fails_with_the_fix(tmp_path) -> None:
    """A data folder without MNIST gives a failed cell whose reason says how to fetch it."""
    code, summary, _ = run(tmp_path, tmp_path / "nowhere")
    assert code == 12
    assert "mnistbench fetch" in summary["reason"]


def test_stale_outputs_are_removed_before_a_rerun(tmp_path, tiny_mnist) -> None:
    """A rerun never leaves an earlier run's epochs beside a new summary."""
    out = tmp_path / "cell"
    out.mkdir()
    (out / schema.EPOCHS_FILE).write_text("epoch\n1\n2\n")
    (out / schema.SUMMARY_FILE).write_text("{}")
    code, summary, out = run(tmp_path, tmp_path / "nowhere")  # fails before any epoch
    assert code == 12 and summary["status"] == "failed"
    assert read_csv(out / schema.EPOCHS_FILE) == []


@pytest.mark.parametrize("args, message", [
    (["--device", "cpu", "--precision", "fp16"], "allowed on cpu: fp32, bf16"),
    (["--device", "cpu", "--precision", "tf32"], "allowed on cpu: fp32, bf16"),
])
def test_unsupported_combination_is_rejected_up_front(tmp_path, tiny_mnist, capsys, args,
                                                      message) -> None:
    """fp16/tf32 on CPU exit 2 with the allowed values and write nothing."""
    from mnistbench import cli

    out = tmp_path / "cell"
    code = cli.main(["train", "--data", str(tiny_mnist), "--out", str(out), *args])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_cli_usage_errors_exit_2(tmp_path) -> None:
    """Bad flag values are argparse usage errors (exit 2) naming the flag."""
    proc = subprocess.run([sys.executable, "-m", "mnistbench.cli", "train", "--out",
                           str(tmp_path), "--batch-size", "0"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "--batch-size" in proc.stderr


@pytest.mark.slow
def test_cli_cell_subprocess_records_env_and_exit_code(tmp_path, tiny_mnist) -> None:
    """The real command line writes the summary and exits with the cell's status code."""
    out = tmp_path / "sub"
    proc = subprocess.run(
        [sys.executable, "-m", "mnistbench.cli", "train", "--data", str(tiny_mnist),
         "--out", str(out), "--max-steps", "2", "--test-limit", "64", "--warmup-steps", "0",
         "--env", "lab-1", "--experiment", "sweep", "--cell", "c1", "--repeat", "2",
         "--device", "cuda" if not torch.cuda.is_available() else "cpu"],
        capture_output=True, text=True)
    summary = json.loads((out / schema.SUMMARY_FILE).read_text())
    expected = "ok" if torch.cuda.is_available() else "unavailable"
    assert summary["status"] == expected
    assert proc.returncode == schema.EXIT_CODES[expected]
    assert summary["params"]["env"] == "lab-1"
    assert summary["params"]["cell"] == "c1" and summary["params"]["repeat"] == 2
    assert summary["timing"]["start_unix"] <= summary["timing"]["end_unix"]


@pytest.mark.gpu
@pytest.mark.parametrize("precision", SUPPORTED["cuda"])
@pytest.mark.parametrize("loader", ["resident", "dataloader"])
def test_every_cuda_precision_and_loader_runs(tmp_path, tiny_mnist, precision, loader) -> None:
    """Each CUDA precision with each loader ends ok, with phases adding up (CUDA events)."""
    code, summary, out = run(tmp_path, tiny_mnist, device="cuda", precision=precision,
                             loader=loader, max_steps=0, epochs=2, pin_memory=True)
    assert code == 0, summary["reason"]
    assert summary["results"]["peak_cuda_mem_mb"] > 0
    assert summary["env"]["gpu_name"]
    for row in read_csv(out / schema.EPOCHS_FILE):
        phases = sum(float(row[f"{p}_s"]) for p in schema.PHASES)
        assert phases == pytest.approx(float(row["epoch_s"]), rel=0.05)


@pytest.mark.gpu
def test_cuda_out_of_memory_is_reported(tmp_path, tiny_mnist) -> None:
    """A cell that needs more than the GPU may give (this process capped at 1 MiB of it)
    ends as oom, not as a crash. (A batch larger than the training set, which once provoked
    it, is a usage error now.)"""
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(2**20 / total)
    try:
        code, summary, _ = run(tmp_path, tiny_mnist, device="cuda", batch_size=256,
                               max_steps=1)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    assert code == 11 and summary["status"] == "oom", summary["reason"]
    assert "batch size 256" in summary["reason"]


@pytest.mark.slow
@pytest.mark.first
def test_one_real_epoch_reaches_98_2_percent(tmp_path, real_mnist) -> None:
    """One epoch of real MNIST, batch 128, fp32, resident, on CPU: at least 98.2% accuracy.
    On one thread (about 95 CPU-s on a 2-core AVX2 machine): beside the other test worker, a
    second thread would wait on the first for a core rather than add one."""
    threads = torch.get_num_threads()  # a cell sets the process's threads: restored after
    try:
        code, summary, _ = run(tmp_path, real_mnist, max_steps=0, test_limit=0,
                               batch_size=128, warmup_steps=3, epochs=1, precision="fp32",
                               loader="resident", sample_interval=0.5, threads=1)
    finally:
        torch.set_num_threads(threads)
    assert code == 0, summary["reason"]
    assert summary["results"]["final_test_acc"] >= 98.2


def test_stream_seeds_are_distinct_and_deterministic() -> None:
    """One seed gives three different, reproducible stream seeds; another seed, others."""
    a, b = train.stream_seeds(0), train.stream_seeds(0)
    assert a == b and len(set(a.values())) == 3
    assert not set(a.values()) & set(train.stream_seeds(1).values())


@pytest.mark.slow
def test_compiled_model_puts_compilation_into_warm_up(tmp_path, tiny_mnist,
                                                      monkeypatch) -> None:
    """With torch.compile the cell ends ok and compilation shows up as warm-up, not epochs."""
    if not any(shutil.which(cxx) for cxx in ("g++", "c++", "clang++")):
        pytest.skip("torch.compile on CPU needs a C++ compiler, and none is on PATH "
                    "(apt-get install g++)")
    # Inductor compiles in this process, not in a pool of workers that each import torch
    # first: on 2 cores beside the other test worker, 35 CPU-s instead of 47.
    import torch._inductor.config as inductor_config

    monkeypatch.setattr(inductor_config, "compile_threads", 1)
    code, summary, _ = run(tmp_path, tiny_mnist, compile="default", epochs=2, max_steps=4)
    assert code == 0, summary["reason"]
    assert summary["params"]["compile"] == "default"
    assert summary["timing"]["warmup_s"] > summary["results"]["epoch_s_median"]


def strict_json(path: Path) -> dict:
    """Parse ``path`` as strict JSON: NaN and Infinity raise ValueError."""
    def refuse(name: str):
        raise ValueError(f"{path} holds {name}, which is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


@pytest.mark.parametrize("failing", ["resources", "summary"])
def test_full_disk_leaves_no_output_and_one_clear_error(tmp_path, tiny_mnist, monkeypatch,
                                                       capsys, failing) -> None:
    """A full disk while writing the 2nd or 3rd file leaves none of the three (and no
    temporary), and exits 1 with one paragraph naming the folder and the fix."""
    def full(path, *args, **kwargs):
        Path(path).write_text("partial")
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    if failing == "resources":
        monkeypatch.setattr(train.ResourceMonitor, "write_csv", lambda self, path: full(path))
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

        monkeypatch.setattr(train.tempfile, "mkstemp", denied)
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


@pytest.mark.parametrize(("flag", "value"), [
    ("--lr", "inf"), ("--lr", "nan"), ("--lr", "-inf"), ("--time-limit", "nan"),
    ("--time-limit", "inf"), ("--sample-interval", "inf"), ("--sample-interval", "nan"),
])
def test_cli_rejects_non_finite_numbers(tmp_path, capsys, flag, value) -> None:
    """A NaN or infinite --lr, --time-limit or --sample-interval is a usage error (exit 2)
    naming the flag, and nothing is written."""
    out = tmp_path / "cell"
    with pytest.raises(SystemExit) as info:
        cli.main(["train", "--out", str(out), f"{flag}={value}"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and "must be a finite number" in err
    assert not out.exists()


@pytest.mark.parametrize(("setting", "value"), [
    ("lr", float("inf")), ("lr", float("nan")), ("time_limit", float("nan")),
    ("sample_interval", float("inf")),
])
def test_config_rejects_non_finite_numbers(tmp_path, tiny_mnist, capsys, setting,
                                           value) -> None:
    """TrainConfig (the fork server's and Python callers' way in) refuses the same values:
    exit 2 naming the setting, and nothing is written."""
    out = tmp_path / "cell"
    code = train.run_cell(train.TrainConfig(out=out, data=tiny_mnist, **{**TINY, setting: value}))
    assert code == 2
    assert f"{setting} must be a finite number" in capsys.readouterr().err
    assert not out.exists()


def test_diverging_loss_fails_naming_epoch_and_step(tmp_path, tiny_mnist) -> None:
    """A learning rate that blows the weights up ends failed (exit 12) at the first NaN step,
    with strict JSON, instead of ok with NaN losses."""
    code, _, out = run(tmp_path, tiny_mnist, lr=1e10, warmup_steps=0, epochs=2)
    summary = strict_json(out / schema.SUMMARY_FILE)
    assert code == 12 and summary["status"] == "failed"
    assert summary["reason"].startswith("the training loss became nan in epoch 1 at step 2 ")
    assert "Lower the learning rate" in summary["reason"]
    assert read_csv(out / schema.EPOCHS_FILE) == []


def test_non_finite_loss_names_the_exact_epoch_and_step(tmp_path, tiny_mnist,
                                                       monkeypatch) -> None:
    """A loss that turns NaN at the 7th training step (epoch 2, step 3 of 4) is reported
    there; epoch 1, which was finite, keeps its row."""
    real = trainer.F.cross_entropy
    calls = []

    def poisoned(logits, target, **kwargs):
        loss = real(logits, target, **kwargs)
        if kwargs.get("reduction") == "sum":  # evaluation
            return loss
        calls.append(1)
        return loss * float("nan") if len(calls) == 7 else loss

    monkeypatch.setattr(trainer.F, "cross_entropy", poisoned)
    code, _, out = run(tmp_path, tiny_mnist, warmup_steps=0, epochs=3)
    summary = strict_json(out / schema.SUMMARY_FILE)
    assert code == 12
    assert "the training loss became nan in epoch 2 at step 3 " in summary["reason"]
    assert [r["epoch"] for r in read_csv(out / schema.EPOCHS_FILE)] == ["1"]


def test_non_finite_test_loss_fails_the_cell(tmp_path, tiny_mnist, monkeypatch) -> None:
    """An infinite test loss fails the cell, naming the epoch's evaluation and its step."""
    real = trainer.F.cross_entropy

    def infinite_eval(logits, target, **kwargs):
        loss = real(logits, target, **kwargs)
        return loss * float("inf") if kwargs.get("reduction") == "sum" else loss

    monkeypatch.setattr(trainer.F, "cross_entropy", infinite_eval)
    code, _, out = run(tmp_path, tiny_mnist, warmup_steps=0)
    summary = strict_json(out / schema.SUMMARY_FILE)
    assert code == 12
    assert "the test loss became inf in the evaluation of epoch 1 (after step 4)" in \
        summary["reason"]


def test_non_finite_measurement_is_written_as_null(tmp_path, tiny_mnist, monkeypatch) -> None:
    """A NaN measurement becomes null, so summary.json stays strict JSON."""
    real = train.ResourceMonitor.summary
    monkeypatch.setattr(train.ResourceMonitor, "summary",
                        lambda self, stage="train": {**real(self, stage),
                                                     "cpu_pct_mean": float("nan")})
    code, _, out = run(tmp_path, tiny_mnist)
    summary = strict_json(out / schema.SUMMARY_FILE)
    assert code == 0 and summary["results"]["cpu_pct_mean"] is None


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_cpu_cell_records_its_isa_and_bf16_path(tmp_path, tiny_mnist, precision) -> None:
    """A cell on this machine records the ISA torch dispatches to, the CPU's bf16 flags and
    oneDNN version, how its bf16 ran (native or emulated, as model.py decides; empty for
    fp32) and that the host clock timed it."""
    from mnistbench.measure import model

    code, summary, _ = run(tmp_path, tiny_mnist, precision=precision)
    assert code == 0, summary["reason"]
    env = summary["env"]
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert env["cpu_bf16"] == ("native" if model.NATIVE_CPU_BF16 else "emulated")
    assert env["onednn"] and env["onednn"][0].isdigit()
    assert env["gpu_backend"] == ("cuda" if torch.cuda.is_available() else "")
    expected = ("native" if model.NATIVE_CPU_BF16 else "emulated") if precision == "bf16" else ""
    assert summary["params"]["bf16_path"] == expected
    assert summary["timing"]["timing_method"] == "host-clock"
    assert summary["results"]["peak_device_mem_mb"] is None
    assert summary["results"]["gpu_throttle_start"] is None


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
        code = train.run_cell(train.TrainConfig(out=out, data=tiny_mnist, env="lab", **TINY))
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
    assert train.run_cell(train.TrainConfig(out=out, data=tiny_mnist, env="lab", **TINY)) == 0
    assert "could not save" in capsys.readouterr().err


@pytest.mark.gpu
def test_cuda_cell_records_its_timing_backend_and_gpu_state(tmp_path, tiny_mnist) -> None:
    """A cuda cell is timed with CUDA events, names its backend (cuda, or rocm under HIP),
    reads its peak memory through torch.accelerator (the same figure as torch.cuda's), and
    with NVML records the GPU's clocks, power limit and throttle reasons at start and end."""
    code, summary, _ = run(tmp_path, tiny_mnist, device="cuda", precision="bf16")
    assert code == 0, summary["reason"]
    assert summary["timing"]["timing_method"] == "cuda-events"
    assert summary["env"]["gpu_backend"] == ("rocm" if torch.version.hip else "cuda")
    assert summary["params"]["bf16_path"] in ("native", "emulated")
    res = summary["results"]
    assert res["peak_device_mem_mb"] == pytest.approx(res["peak_cuda_mem_mb"])
    if summary["sources"]["gpu_energy"] and summary["env"]["gpu_backend"] == "cuda":
        for when in ("start", "end"):
            assert res[f"gpu_sm_clock_{when}_mhz"] > 0
            assert res[f"gpu_power_limit_{when}_w"] > 0
            assert res[f"gpu_throttle_{when}"]


@pytest.mark.slow
def test_stock_implementation_runs_the_blogs_code(tmp_path, tiny_mnist) -> None:
    """--implementation stock trains the literal ReferenceNet with torch.optim.Adam in the
    default memory format, records it, and ends ok; tuned records the fused kernel."""
    code, summary, _ = run(tmp_path / "stock", tiny_mnist, implementation="stock",
                           cudnn_benchmark=False, tip="baseline")
    assert code == 0, summary["reason"]
    assert summary["params"]["implementation"] == "stock"
    assert summary["params"]["cudnn_benchmark"] is False and summary["params"]["tip"] == "baseline"
    assert summary["sources"]["adam"] == trainer.STOCK_ADAM
    code, summary, _ = run(tmp_path / "tuned", tiny_mnist)
    assert summary["params"]["implementation"] == "tuned"
    assert summary["sources"]["adam"] == "torch._fused_adam_"


def test_stock_and_tuned_models_start_from_the_same_weights() -> None:
    """One seed gives ReferenceNet and Net the same initial parameters."""
    from mnistbench.measure import model

    stock, tuned = model.build_model(3, "stock"), model.build_model(3, "tuned")
    assert type(stock) is model.ReferenceNet and type(tuned) is model.Net
    for a, b in zip(stock.parameters(), tuned.parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.slow
def test_max_batch_doubles_until_out_of_memory_and_times_the_same_samples(
        tmp_path, tiny_mnist, monkeypatch) -> None:
    """--max-batch doubles from --batch-size until a step runs out of memory (simulated
    above 64 samples), trains at the last size that fitted, and scales max_steps so the cell
    times the same number of samples; the stop reason is recorded."""
    real_step = train.Trainer.step

    def step(self, x, y, timer):
        if len(y) > 64:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real_step(self, x, y, timer)

    monkeypatch.setattr(train.Trainer, "step", step)
    code, summary, _ = run(tmp_path, tiny_mnist, batch_size=16, max_steps=8, max_batch=True)
    assert code == 0, summary["reason"]
    params = summary["params"]
    assert (params["batch_size"], params["max_batch"], params["max_batch_stop"]) == (
        64, True, "out of memory")
    assert params["max_steps"] == 2  # 8 steps of 16 samples = 2 steps of 64
    assert summary["results"]["steps_per_epoch"] == 2


@pytest.mark.slow
def test_max_batch_on_a_cpu_stops_at_its_cap(tmp_path, tiny_mnist) -> None:
    """On a CPU the search stops at the training samples or the CPU cap, never beyond."""
    code, summary, _ = run(tmp_path, tiny_mnist, batch_size=64, max_steps=4, max_batch=True)
    assert code == 0, summary["reason"]
    assert summary["params"]["batch_size"] == min(options.CPU_MAX_BATCH_CAP, TINY_TRAIN)
    assert summary["params"]["max_batch_stop"] == "the cap"


@pytest.mark.slow
def test_busy_machine_is_recorded(tmp_path, tiny_mnist) -> None:
    """Every cell records the machine's load over its timed epochs and whether it was busy."""
    code, summary, _ = run(tmp_path, tiny_mnist, epochs=2)
    assert code == 0
    res = summary["results"]
    assert 0 <= res["system_load_mean"] <= 100.5
    assert res["others_load_mean"] is not None and isinstance(res["busy"], bool)


@pytest.mark.slow
def test_a_cell_records_the_digest_of_the_code_that_measured_it(tmp_path, tiny_mnist,
                                                                 monkeypatch) -> None:
    """env.code_digest is the running package's measuring code and runtime; env.
    workflow_digest is what the workflow passed (empty for a cell started by hand)."""
    code, summary, _ = run(tmp_path, tiny_mnist, name="by-hand")
    assert code == 0 and summary["env"]["workflow_digest"] == ""
    assert summary["env"]["code_digest"] == provenance.code_digest()
    assert len(summary["env"]["code_digest"]) == provenance.DIGEST_HEX
    monkeypatch.setenv(envvars.WORKFLOW_DIGEST_VAR, "0123456789abcdef")
    code, summary, _ = run(tmp_path, tiny_mnist, name="workflow")
    assert code == 0 and summary["env"]["workflow_digest"] == "0123456789abcdef"


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
        train.run_cell(train.TrainConfig(out=out, data=tiny_mnist, env="lab",
                                         **{**TINY, **extra}))
        cell = validate.read_cell(out)
        assert cell.valid, cell.problems
        assert cell.status == name


@pytest.mark.parametrize(("args", "message"), [
    (["--batch-size", "4096", "--train-limit", "1024"],
     "--batch-size 4096 is larger than the 1024 training samples the cell uses "
     "(--train-limit 1024): each step would hold 1024 samples while the cell recorded 4096; "
     "pass --batch-size 1024 or less, or a --train-limit of 4096 or more"),
    (["--batch-size", "65536"],
     "--batch-size 65536 is larger than the 60000 training samples the cell uses (all 60000 "
     "of MNIST)"),
    (["--train-limit", "70000"],
     "argument --train-limit: must be 60000 or less (MNIST has 60000 training samples; 0: "
     "all), got 70000"),
    (["--test-limit", "10001"], "argument --test-limit: must be 10000 or less"),
])
def test_a_batch_or_limit_beyond_mnist_is_a_usage_error(tmp_path, capsys, args, message):
    """A batch larger than the training samples the cell uses (it would be recorded as the
    batch while each step held fewer), and limits above MNIST's splits, exit 2 naming the
    numbers; nothing is created."""
    out = tmp_path / "cell"
    try:
        code = cli.main(["train", "--out", str(out), "--quiet", *args])
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_limits_beyond_mnist_given_to_the_api_are_usage_errors(tmp_path, tiny_mnist,
                                                               capsys) -> None:
    """The trainer's API refuses them too (exit 2, nothing written)."""
    for settings, message in (({"train_limit": 70_000}, "--train-limit 70000: MNIST has 60000"),
                              ({"test_limit": 20_000}, "--test-limit 20000: MNIST has 10000"),
                              ({"batch_size": 512, "train_limit": 256},
                               "--batch-size 512 is larger than the 256 training samples")):
        out = tmp_path / "cell"
        assert train.run_cell(train.TrainConfig(out=out, data=tiny_mnist,
                                                **{**TINY, **settings})) == 2
        assert message in capsys.readouterr().err
        assert not out.exists()


def test_a_batch_larger_than_the_data_folder_holds_fails_naming_both(tmp_path,
                                                                     tiny_mnist) -> None:
    """A data folder with fewer samples than MNIST (here 512) and a batch of 1024: the cell is
    failed naming both numbers, never recorded as batch 1024 with steps of 512."""
    code, summary, _ = run(tmp_path, tiny_mnist, batch_size=1024)
    assert code == 12 and summary["status"] == "failed"
    assert summary["reason"].startswith(
        f"batch size 1024 is larger than the {TINY_TRAIN} training samples in {tiny_mnist}")


@pytest.mark.slow
def test_dataloader_flags_on_a_resident_cell_are_recorded_as_not_applicable(tmp_path,
                                                                            tiny_mnist):
    """The workflow passes --workers and --pin-memory to every cell: a resident cell, which
    has no DataLoader, records them as null (not applicable), a dataloader cell as given;
    an evaluation batch above the test samples is recorded as the test samples."""
    code, resident, _ = run(tmp_path, tiny_mnist, name="resident", workers=2, pin_memory=True,
                            eval_batch_size=1000)
    assert code == 0
    assert resident["params"]["workers"] is None and resident["params"]["pin_memory"] is None
    assert resident["params"]["eval_batch_size"] == TINY["test_limit"]
    code, loader, _ = run(tmp_path, tiny_mnist, name="loader", loader="dataloader")
    assert code == 0
    assert loader["params"]["workers"] == 0 and loader["params"]["pin_memory"] is False


@pytest.mark.slow
def test_a_wider_network_trains_and_records_its_width_and_flops(tmp_path, tiny_mnist) -> None:
    """--width 2 doubles the convolutions' channels: the cell records the width and the
    FLOPs of a training sample at that width."""
    args = options.train_parser().parse_args(["--width", "2", "--data", "d", "--out", "o"])
    assert args.width == 2 and train.TrainConfig.from_namespace(args).width == 2
    code, summary, _ = run(tmp_path, tiny_mnist, width=2, max_steps=2, quiet=True)
    assert code == 0 and summary["params"]["width"] == 2
    assert summary["results"]["train_flops_per_sample"] == network.train_flops(2)


# --------------------------------------------------------------------------- warm-up (issue 39)
def test_warm_up_runs_the_timed_data_path(tiny_mnist, monkeypatch) -> None:
    """A resident cell's warm-up draws its training batches as the timed loop does (a host
    permutation copied over, then index_select: ResidentLoader.batch), from its own generator:
    the cell's shuffling generator is untouched, and a warm-up batch is a shuffled gather, not
    the first rows."""
    from mnistbench.measure import loaders as loaders_mod

    cfg = train.TrainConfig(out=Path("unused"), data=tiny_mnist, batch_size=32,
                            warmup_steps=2, eval_batch_size=32, test_limit=64)
    shuffle_gen = torch.Generator().manual_seed(7)
    before = shuffle_gen.get_state()
    built = loaders_mod.build_loaders(cfg, torch.device("cpu"), shuffle_gen)
    calls = []
    real = loaders_mod.ResidentLoader.batch

    def spy(self, order, i):
        calls.append((len(order), i))
        return real(self, order, i)

    monkeypatch.setattr(loaders_mod.ResidentLoader, "batch", spy)
    x, _ = built.sample_batch("train", 32)
    assert calls == [(TINY_TRAIN, 0)]
    assert not torch.equal(x, built.train.images[:32])  # gathered, not sliced
    calls.clear()
    cell = trainer.Trainer(cfg, torch.device("cpu"), init_seed=0)
    train.warm_up(cell, built, cfg)
    assert len(calls) == cfg.warmup_steps  # 512 % 32 == 0: no tail batch
    assert torch.equal(shuffle_gen.get_state(), before)


def test_grad_scaler_keeps_its_warm_up_state() -> None:
    """The warm-up restore puts the model, optimizer and generators back, but the fp16
    GradScaler keeps the scale the warm-up settled on (recreating it threw that away)."""
    cfg = train.TrainConfig(out=Path("unused"), precision="fp16", batch_size=8)
    cell = trainer.Trainer(cfg, torch.device("cpu"), init_seed=0)
    scaler = cell.scaler
    state = cell.snapshot()
    x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
    cell.step(x, y, trainer._NullTimer())
    scaler.update(new_scale=128.0)  # as a warm-up overflow would have lowered it
    cell.restore(state)
    assert cell.scaler is scaler
    assert cell.scaler.get_scale() == 128.0
