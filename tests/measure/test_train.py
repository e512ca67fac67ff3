"""Tests for mnistbench.measure.train: one honest cell from its settings to its summary, its
statuses and exit codes (ok, unavailable, oom, failed; a usage error refused up front), and
what it records of the machine and the code. The jobs it runs have their own tests:
test_cellconfig, test_limits, test_warmup, test_epochs and test_outputs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from mnistbench.core import cpuruntime, envvars, provenance, schema
from mnistbench.core.devices import SUPPORTED, Loader
from mnistbench.measure import train, trainer
from mnistbench.measure.cellconfig import TrainConfig
from tests.measure.cells import read_csv, run


@pytest.mark.parametrize("loader", list(Loader))
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

    monkeypatch.setattr(trainer.Trainer, "step", explode)
    code, summary, _ = run(tmp_path, tiny_mnist, batch_size=64)
    assert code == schema.EXIT_CODES["oom"] == 11
    assert summary["status"] == "oom"
    assert "batch size 64" in summary["reason"]


def test_other_errors_fail_with_their_message(tmp_path, tiny_mnist, monkeypatch) -> None:
    """Any other exception gives status failed with its message, and exit 12."""
    def explode(self, x, y, timer):
        raise ValueError("the <b>step</b> broke")

    monkeypatch.setattr(trainer.Trainer, "step", explode)
    code, summary, out = run(tmp_path, tiny_mnist)
    assert code == schema.EXIT_CODES["failed"] == 12
    assert summary["status"] == "failed"
    assert summary["reason"] == "ValueError: the <b>step</b> broke"
    assert not list(out.glob("*.part")) and not list(out.glob(".*"))


def test_missing_data_fails_with_the_fix(tmp_path) -> None:
    """A data folder without MNIST gives a failed cell whose reason says how to fetch it."""
    code, summary, _ = run(tmp_path, tmp_path / "nowhere")
    assert code == 12
    assert "mnistbench fetch" in summary["reason"]


def test_set_up_refuses_a_usage_error_with_its_exit_code(tmp_path, capsys) -> None:
    """set_up raises CellRefused, carrying exit code 2 and the reason, before it creates
    anything; run_cell turns it into that exit code and one error line, writing nothing."""
    out = tmp_path / "cell"
    with pytest.raises(train.CellRefused) as refused:
        train.set_up(TrainConfig(out=out, precision="fp16"))
    assert refused.value.code == train.USAGE_ERROR == 2
    assert "allowed on cpu: fp32, bf16" in str(refused.value)
    assert not out.exists()
    assert train.run_cell(TrainConfig(out=out, precision="fp16")) == 2
    assert capsys.readouterr().err == (
        f"mnistbench train: error: {refused.value}\n")
    assert not out.exists()


def test_an_allocator_that_cannot_be_had_is_refused_up_front(tmp_path, capsys,
                                                            monkeypatch) -> None:
    """An allocator the process cannot have (cpuruntime.AllocatorError) is a usage error too:
    exit 2 with its message, nothing created."""
    def refuse(requested):
        raise cpuruntime.AllocatorError(f"no {requested} here")

    monkeypatch.setattr(cpuruntime, "prepare", refuse)
    out = tmp_path / "cell"
    with pytest.raises(train.CellRefused, match="no tcmalloc here") as refused:
        train.set_up(TrainConfig(out=out, allocator="tcmalloc"))
    assert refused.value.code == 2
    assert train.run_cell(TrainConfig(out=out, allocator="tcmalloc")) == 2
    assert capsys.readouterr().err == "mnistbench train: error: no tcmalloc here\n"
    assert not out.exists()


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
@pytest.mark.parametrize("loader", list(Loader))
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
