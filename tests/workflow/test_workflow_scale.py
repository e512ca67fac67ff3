"""Workflow tests of issue 25 through the real ``snakemake`` command: the scale experiment's
cells in the default and the quick study's dry runs, and the ``peak`` step (one job per
environment and device, timed work like a cell, before the cells, the aggregate and ``all``
waiting for it), with one tiny end-to-end run (an absent device recorded unavailable, the
limit joined to the cells). The helpers are tests/workflow/test_workflow.py's; the planning behind
the jobs is unit-tested in tests/launch/test_plan.py and tests/results/test_peak_results.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mnistbench.core import network, schema
from mnistbench.results import aggregate, validate
from tests.workflow.test_workflow import (
    ENV,
    REPO,
    TINY_EXPERIMENT,
    cuda_usable,
    job_resources,
    jobs_of_rule,
    planned_cells,
    snakemake,
    tiny_config,
)

DEFAULT = ["--configfile", str(REPO / "config" / "config.yaml")]
QUICK = [*DEFAULT, str(REPO / "config" / "quick.yaml")]
#: A tiny scale experiment on synthetic data.
TINY_SCALE = {"widths": [1, 2], "accelerator_widths": [4], "precisions": ["fp32", "bf16"],
              "repeats": 1, "max_steps": 2, **TINY_EXPERIMENT}


def rule_jobs(output: str, rule: str) -> dict[str, str]:
    """The text of every job of ``rule`` a snakemake run printed, keyed by its wildcards."""
    jobs = {}
    for block in re.split(r"^\[[^\]\n]+\]$", output, flags=re.MULTILINE):
        found = re.search(rf"^(?:local)?rule {rule}:$.*?^\s+wildcards: (.*?)$", block,
                          re.MULTILINE | re.DOTALL)
        if found:
            jobs[found.group(1).strip()] = block
    return jobs


def rule_blocks(output: str, rule: str) -> list[str]:
    """The text of every job of ``rule`` a snakemake run printed (wildcards or none)."""
    return [block for block in re.split(r"^\[[^\]\n]+\]$", output, flags=re.MULTILINE)
            if re.search(rf"^(?:local)?rule {rule}:$", block, re.MULTILINE)]


def job_input(block: str) -> list[str]:
    """The ``input:`` files of one printed job."""
    line = re.search(r"^\s*input: (.*)$", block, re.MULTILINE)
    return line.group(1).split(", ") if line else []


def scale_config(data_dir: Path, workdir: Path, **overrides) -> dict:
    """tiny_config with a tiny scale experiment."""
    config = tiny_config(data_dir, workdir, **overrides)
    config["experiments"]["scale"] = dict(TINY_SCALE)
    return config


# --------------------------------------------------------------------------- dry runs
@pytest.mark.slow
@pytest.mark.parametrize("study", ["default", "quick"])
def test_the_shipped_studies_plan_scale_cells_and_a_peak_per_device(tmp_path, study):
    """The default study plans the schema's scale (x1, x2, x4 on the CPU and x8 too on a GPU,
    fp32 and bf16, 2 repeats), the quick one its tiny scale (x1, x2, fp32); each plans one
    peak job per device."""
    args = {"default": DEFAULT, "quick": QUICK}[study]
    proc = snakemake(tmp_path, None, *args, "--config", 'devices=["cpu","cuda"]', "--dry-run")
    assert proc.returncode == 0, proc.stdout
    scale = {cell for _, experiment, cell in planned_cells(proc.stdout)
             if experiment == "scale"}
    if study == "default":
        widths = {"cpu": (1, 2, 4), "cuda": (1, 2, 4, 8)}
        precisions = ("fp32", "bf16")
        repeats = 2
    else:
        widths = {"cpu": (1, 2), "cuda": (1, 2)}
        precisions = ("fp32",)
        repeats = 2
    assert scale == {f"{d}-{p}-resident-b128-x{w}-r{r}" for d, ws in widths.items()
                     for p in precisions for w in ws for r in range(repeats)}
    peaks = rule_jobs(proc.stdout, "peak")
    assert len(peaks) == 2 and jobs_of_rule(proc.stdout, "peak") == 2
    assert {re.search(r"device=(\w+)", key).group(1) for key in peaks} == {"cpu", "cuda"}


@pytest.mark.slow
def test_peak_jobs_are_timed_work_at_the_cells_precisions_before_the_cells(tmp_path,
                                                                          tiny_mnist):
    """One peak job per device of the environment, at the precisions its cells train at,
    with the cells' threads, under the machine's lock, holding timed_cell and every core,
    with a higher priority than any cell; the aggregate and `all` wait for both limits; the
    scale cells pass their width."""
    config = scale_config(tiny_mnist, tmp_path, devices=["cpu", "cuda"], threads=2)
    config["experiments"]["sweep"]["precisions"] = ["fp32", "tf32"]
    proc = snakemake(tmp_path, config, "--dry-run", "--printshellcmds", "--cores", "2")
    assert proc.returncode == 0, proc.stdout
    peaks = rule_jobs(proc.stdout, "peak")
    assert set(peaks) == {f"env={ENV}, device=cpu", f"env={ENV}, device=cuda"}
    cpu, cuda = (" ".join(peaks[f"env={ENV}, device={d}"].replace("\\\n", " ").split())
                 for d in ("cpu", "cuda"))
    assert "--device cpu --precision fp32 --precision bf16 --threads 2" in cpu
    assert "--device cuda --precision fp32 --precision tf32 --precision bf16" in cuda
    for block in peaks.values():
        assert f"output: results/runs/{ENV}/peak/" in block
        assert f"mnistbench run-peak --lock {config['lock_file']} --log " in block
        assert "--launcher mnistbench --device" in block
        assert job_resources(block).get("timed_cell") == "1"
        assert re.search(r"^\s+threads: \d+$", block, re.MULTILINE)
    (peak_priority,) = {int(re.search(r"priority: (\d+)", b).group(1)) for b in peaks.values()}
    cells = [int(re.search(r"priority: (\d+)", b).group(1))
             for b in rule_jobs(proc.stdout, "bench").values()]
    assert peak_priority > max(cells) and len(cells) == 15  # 2 + 3 + 4 + 6 cells
    limits = {f"results/runs/{ENV}/peak/cpu.json", f"results/runs/{ENV}/peak/cuda.json"}
    (aggregate_job,) = rule_blocks(proc.stdout, "aggregate")
    assert limits <= set(job_input(aggregate_job))
    (all_job,) = rule_blocks(proc.stdout, "all")
    assert limits <= set(job_input(all_job))
    x4 = next(block for key, block in rule_jobs(proc.stdout, "bench").items()
              if key.endswith("cell=cuda-bf16-resident-b128-x4-r0"))
    assert "--width 4" in x4 and "--implementation tuned" in x4
    assert not (tmp_path / "results").exists()  # a dry run writes nothing


@pytest.mark.slow
def test_the_docker_runner_measures_the_limit_in_the_devices_image(tmp_path, tiny_mnist):
    """runner docker: the peak job waits for the device's image and starts `mnistbench docker
    run` with its record, as the cells do."""
    config = scale_config(tiny_mnist, tmp_path, runner="docker")
    proc = snakemake(tmp_path, config, "--dry-run", "--printshellcmds", "--cores", "2")
    assert proc.returncode == 0, proc.stdout
    (block,) = rule_jobs(proc.stdout, "peak").values()
    assert "results/images/cpu.json" in job_input(block)
    assert ("mnistbench docker run --record results/images/cpu.json --results results"
            in block)


@pytest.mark.slow
def test_a_copied_environments_limit_is_an_input_of_the_aggregate(tmp_path, tiny_mnist):
    """A limit copied in with another machine's cells reruns the aggregate, never its peak."""
    config = scale_config(tiny_mnist, tmp_path)
    other = tmp_path / "results" / "runs" / "other-box" / schema.PEAK_DIR / "cpu.json"
    other.parent.mkdir(parents=True)
    other.write_text("{}")
    proc = snakemake(tmp_path, config, "--dry-run", "--cores", "1")
    assert proc.returncode == 0, proc.stdout
    (block,) = rule_blocks(proc.stdout, "aggregate")
    assert "results/runs/other-box/peak/cpu.json" in job_input(block)
    assert set(rule_jobs(proc.stdout, "peak")) == {f"env={ENV}, device=cpu"}


# --------------------------------------------------------------------------- a real run
@pytest.mark.slow
def test_a_tiny_study_measures_its_limits_and_joins_them_to_the_cells(tmp_path, tiny_mnist):
    """cpu and cuda: the cpu limit is measured (the cells' threads), the cuda one recorded
    unavailable where this machine has no usable GPU (the study goes on); every ok cpu cell
    gets its share of the limit; the scale cells ran at their widths."""
    config = scale_config(tiny_mnist, tmp_path, devices=["cpu", "cuda"], threads=1)
    config["experiments"]["scale"]["precisions"] = ["fp32"]
    proc = snakemake(tmp_path, config, "--cores", "2", "results/summary.csv")
    assert proc.returncode == 0, proc.stdout
    runs = tmp_path / "results" / "runs"
    cpu = validate.read_peak(runs / ENV / schema.PEAK_DIR / "cpu.json", "cpu")
    assert cpu.status == "ok" and cpu.threads == 1
    assert {r["precision"] for r in cpu.rows} == {"fp32"}
    cuda = validate.read_peak(runs / ENV / schema.PEAK_DIR / "cuda.json", "cuda")
    assert cuda.status == ("ok" if cuda_usable() else "unavailable"), cuda
    log = tmp_path / "results" / "logs" / "runs" / ENV / "peak" / "cuda.log"
    assert log.is_file()
    for _ in range(3):
        summary = aggregate.load_tables(tmp_path / "results").summary
        ok_cpu = summary[(summary["device"] == "cpu") & (summary["status"] == "ok")]
        if ok_cpu["limit_gflops"].notna().all():
            break
        # A limit measured while the other test worker loaded the machine can be below what
        # a cell reached later: the aggregate refuses it, saying so. Measure it again.
        assert ok_cpu["limit_source"].str.startswith("refused: ").all(), ok_cpu["limit_source"]
        # The record is a target too: with the final tables there, Snakemake reruns no job for
        # a missing input of the (temp) aggregate (aggregate.smk); `all` lists the records.
        record = runs / ENV / schema.PEAK_DIR / "cpu.json"
        record.unlink()
        proc = snakemake(tmp_path, config, "--cores", "2", str(record.relative_to(tmp_path)),
                         "results/summary.csv")
        assert proc.returncode == 0, proc.stdout
        assert jobs_of_rule(proc.stdout, "peak") == 1, proc.stdout
        assert jobs_of_rule(proc.stdout, "aggregate") == 1, proc.stdout
        assert jobs_of_rule(proc.stdout, "bench") == 0, proc.stdout  # the cells stay
    assert len(ok_cpu) >= 4 and ok_cpu["limit_gflops"].notna().all()
    assert (ok_cpu["limit_share_pct"] > 0).all()
    assert set(ok_cpu["limit_source"]) == {f"measured: runs/{ENV}/peak/cpu.json, 1 thread"}
    scale = {p.parent.name: json.loads(p.read_text())
             for p in (runs / ENV / "scale").glob(f"*/{schema.SUMMARY_FILE}")}
    x2 = scale["cpu-fp32-resident-b128-x2-r0"]
    assert x2["params"]["width"] == 2
    assert x2["results"]["train_flops_per_sample"] == network.train_flops(2)
