"""Tests of the study on a SLURM cluster (profiles/slurm, workflow/rules/slurm.smk,
docs/slurm.md).

Without a cluster: a dry run through ``snakemake --profile profiles/slurm`` (no sbatch needed)
checks how cells are filed per partition (node type) and the resources each SLURM job asks
for (the CPUs of a node type without ``cpus`` from a fake ``sinfo``), and a run whose executor
does not match config ``executor`` stops before any job starts. The planning behind them
(partitions, environments, CPUs, resources, the executor check, devices ``auto``) is
unit-tested without Snakemake in tests/launch/test_plan.py; that a local run asks for no SLURM
resource, in tests/workflow/test_workflow.py's dry run.

With a cluster (marker ``slurm``; scripts/ci-slurm starts a single-node one): a tiny study runs
through the profile, every timed cell as a SLURM job on each of two partitions; its summaries
name the job, partition and node, the aggregate and the report come out as in a local run, and
a cell made to fail (a short ``time_limit``) is ``failed`` while the rest are ``ok``. The
cluster is the one ``scontrol`` reaches; without one these tests skip, unless
``MNISTBENCH_REQUIRE_SLURM=1``: then they fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from mnistbench.core import schema
from mnistbench.core.study import cell_id
from mnistbench.results import aggregate
from tests.workflow.test_workflow import (
    REPO,
    assert_no_overlap,
    bench_jobs,
    job_resources,
    jobs_of_rule,
    snakemake,
    summaries,
    tiny_config,
)

PROFILE = REPO / "profiles" / "slurm"
REQUIRE_VAR = "MNISTBENCH_REQUIRE_SLURM"

#: A cluster of three node types for dry runs: two CPU partitions, one GPU partition.
NODE_TYPES = {
    "epyc": {"cpus": 2},
    "icelake": {"cpus": 4, "name": "lab-icelake", "constraint": "avx512"},
    "h100": {"cpus": 8, "gpu_model": "h100", "extra": "--qos=short"},
}


def slurm_config(data_dir: Path, workdir: Path, **overrides) -> dict:
    """A tiny study config for the SLURM executor (env empty: folders named slurm-<partition>)."""
    config = tiny_config(data_dir, workdir, env="", executor="slurm")
    config["slurm"] = {"partitions": {"cpu": ["epyc", "icelake"], "cuda": "h100"},
                       "node_types": NODE_TYPES}
    config.update(overrides)
    return config


def profile_run(workdir: Path, config: dict, *args: str, env: dict | None = None):
    """``snakemake --profile profiles/slurm ARGS`` on ``config`` in ``workdir``."""
    return snakemake(workdir, config, "--profile", str(PROFILE), *args, env=env)


def fake_slurm_client(bindir: Path, sinfo: str) -> dict:
    """The environment of a run with SLURM client commands of the test's own (a fresh machine
    has none): sinfo printing ``sinfo``, and squeue, which the executor plugin looks for once
    sinfo exists (it raises "Neither 'sacct' nor 'squeue' ..." otherwise); a dry run never
    calls squeue."""
    bindir.mkdir()
    commands = {"sinfo": f"cat <<'EOF'\n{sinfo}EOF",
                "squeue": "echo 'fake squeue: a dry run must not poll' >&2; exit 1"}
    for name, body in commands.items():
        (bindir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bindir / name).chmod(0o755)
    return dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")


# --------------------------------------------------------------------------- no cluster needed
def test_profile_sets_the_slurm_executor_on_both_sides():
    """The profile selects the slurm executor and config executor=slurm, and polls squeue."""
    profile = yaml.safe_load((PROFILE / "config.yaml").read_text())
    assert profile["executor"] == "slurm"
    assert profile["config"] == {"executor": "slurm"}
    assert profile["slurm-status-command"] == "squeue"


@pytest.mark.slow
def test_dry_run_files_cells_per_partition_with_their_slurm_resources(tmp_path, tiny_mnist):
    """Through the profile, every cell runs once per partition of its device, under that
    partition's environment, asking for its partition, CPUs (configured, or the smallest
    node's from sinfo), GPU, memory, wall time and an exclusive node."""
    config = slurm_config(tiny_mnist, tmp_path, devices=["cpu", "cuda"])
    config["slurm"].update(mem_mb=3000, runtime=15, account="lab")
    del config["slurm"]["node_types"]["epyc"]  # its CPUs: the smallest epyc node's (sinfo)
    env = fake_slurm_client(tmp_path / "bin", "epyc 16\nepyc* 2\nicelake 64\n")
    proc = profile_run(tmp_path, config, "--dry-run", "--printshellcmds", env=env)
    assert proc.returncode == 0, proc.stdout
    jobs = bench_jobs(proc.stdout)
    assert set(jobs) == {
        (env, exp, cell_id(device, "fp32", "resident", batch, 0))
        for exp, batch in (("convergence", 128), ("sweep", 32))
        for env, device in (("slurm-epyc", "cpu"), ("lab-icelake", "cpu"), ("slurm-h100", "cuda"))
    }
    expected = {
        "slurm-epyc": {"slurm_partition": "epyc", "cpus_per_task": "2", "gpu": "0"},
        "lab-icelake": {"slurm_partition": "icelake", "cpus_per_task": "4", "gpu": "0",
                        "constraint": "avx512"},
        "slurm-h100": {"slurm_partition": "h100", "cpus_per_task": "8", "gpu": "1",
                       "gpu_model": "h100"},
    }
    for (env, _, cell), block in jobs.items():
        resources = job_resources(block)
        for key, value in {**expected[env], "mem_mb": "3000", "runtime": "15",
                           "slurm_account": "lab"}.items():
            assert resources.get(key) == value, (cell, key, resources)
        extra = "--exclusive --qos=short" if env == "slurm-h100" else "--exclusive"
        assert resources["slurm_extra"] == extra
        assert ("gpu_model" in resources) == (env == "slurm-h100")
        assert ("constraint" in resources) == (env == "lab-icelake")
        assert f"--env {env} " in block and f"--device {cell.split('-')[0]} " in block


@pytest.mark.slow
def test_slurm_executor_with_config_executor_local_stops_before_any_job(tmp_path, tiny_mnist):
    """The slurm executor with config executor=local (e.g. a command-line --config that
    replaced the profile's) stops the run before any job starts (the other way round, and the
    check itself: tests/launch/test_plan.py)."""
    config = tiny_config(tiny_mnist, tmp_path)
    proc = profile_run(tmp_path, config, "--config", "seed=1")
    assert proc.returncode != 0, proc.stdout
    assert "Snakemake runs with the slurm executor, but config executor is local" in proc.stdout
    assert not (tmp_path / "results").exists()


# --------------------------------------------------------------------------- on a cluster
def _slurm(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout,
                          check=False)


@pytest.fixture(scope="module")
def cluster() -> dict:
    """The cluster scontrol reaches: its partitions (default first, at most two) and nodes.
    Skips without one (fails with MNISTBENCH_REQUIRE_SLURM=1)."""
    reason = None
    if shutil.which("scontrol") is None or shutil.which("sbatch") is None:
        reason = "no scontrol/sbatch on PATH"
    else:
        try:
            ping = _slurm("scontrol", "ping")
        except subprocess.TimeoutExpired:
            ping = None
        if ping is None or "is UP" not in ping.stdout:
            reason = "no SLURM controller answers `scontrol ping`"
    if reason is not None:
        reason += " (start one with scripts/slurm-cluster start)"
        if os.environ.get(REQUIRE_VAR) == "1":
            pytest.fail(f"{REQUIRE_VAR}=1 but {reason}")
        pytest.skip(reason)
    names = _slurm("sinfo", "--noheader", "--format=%P").stdout.split()
    partitions = sorted(names, key=lambda name: not name.endswith("*"))[:2]
    nodes = set(_slurm("sinfo", "--noheader", "--Node", "--format=%N").stdout.split())
    return {"partitions": [p.rstrip("*") for p in partitions], "nodes": nodes}


def _cluster_config(tiny_mnist: Path, workdir: Path, partitions: list[str]) -> dict:
    """The tiny study of the cluster tests: cpu cells on every partition; the convergence
    cells (20 epochs, several seconds) made to fail by a time limit of 0.5 s, the sweep cells
    ok."""
    config = slurm_config(tiny_mnist, workdir, devices=["cpu"])
    config["slurm"] = {"partitions": {"cpu": partitions}, "mem_mb": 1000, "runtime": 10}
    config["experiments"]["convergence"].update(epochs=20, time_limit=0.5)
    return config


@pytest.fixture(scope="module")
def slurm_study(cluster, tmp_path_factory, tiny_mnist):
    """The tiny study through `snakemake --profile profiles/slurm` on the cluster, and the
    same study run locally. Returns (workdir, snakemake output, local workdir)."""
    workdir = tmp_path_factory.mktemp("slurm_study")
    config = _cluster_config(tiny_mnist, workdir, cluster["partitions"])
    proc = profile_run(workdir, config)
    assert proc.returncode == 0, proc.stdout
    local = tmp_path_factory.mktemp("local_study")
    config = _cluster_config(tiny_mnist, local, cluster["partitions"])
    config.update(executor="local", env="local-ref")
    proc_local = snakemake(local, config, "--cores", "2")
    assert proc_local.returncode == 0, proc_local.stdout
    return workdir, proc.stdout, local


@pytest.mark.slurm
def test_every_timed_cell_ran_as_a_slurm_job_of_its_partition(cluster, slurm_study):
    """Each cell's summary names the SLURM job that Snakemake submitted for it, the partition
    its environment folder is named after, and a node of the cluster."""
    workdir, output, _ = slurm_study
    submitted = dict(re.findall(r"Job (\d+) has been submitted with SLURM jobid (\d+)", output))
    envs = {f"slurm-{p}": p for p in cluster["partitions"]}
    cells = {env: summaries(workdir, env) for env in envs}
    assert {(env, name) for env, found in cells.items() for name in found} == {
        (env, name) for env in envs
        for name in ("convergence/cpu-fp32-resident-b128-r0", "sweep/cpu-fp32-resident-b32-r0")}
    job_ids = []
    for env, found in cells.items():
        for name, summary in found.items():
            info = summary["env"]
            assert re.fullmatch(r"\d+", info["slurm_job_id"]), (env, name, info)
            assert info["slurm_partition"] == envs[env], (env, name)
            assert info["slurm_node"] in cluster["nodes"], (env, name)
            assert summary["params"]["env"] == env
            job_ids.append(info["slurm_job_id"])
    # One job per cell, plus each environment's peak job (its measured limit), none other.
    assert set(job_ids) <= set(submitted.values()) and len(set(job_ids)) == len(job_ids)
    assert jobs_of_rule(output, "bench") == len(job_ids)
    assert jobs_of_rule(output, "peak") == len(envs)
    assert len(submitted) == len(job_ids) + len(envs)
    for env in envs:
        assert (workdir / "results" / "runs" / env / schema.PEAK_DIR / "cpu.json").is_file()


@pytest.mark.slurm
def test_cells_asked_for_an_exclusive_node_and_never_overlapped(slurm_study):
    """The jobs SLURM still lists ran exclusive (OverSubscribe=NO) with every CPU of the node,
    and no two cells' timed intervals overlapped."""
    workdir, _, _ = slurm_study
    runs = workdir / "results" / "runs"
    cells = [json.loads(p.read_text()) for p in runs.glob(f"*/*/*/{schema.SUMMARY_FILE}")]
    assert cells
    listed = 0
    for summary in cells:
        job = _slurm("scontrol", "show", "job", "--oneliner", summary["env"]["slurm_job_id"])
        if job.returncode != 0:  # already purged (MinJobAge)
            continue
        listed += 1
        fields = dict(re.findall(r"(\w+)=(\S*)", job.stdout))
        assert fields["JobState"] == "COMPLETED", job.stdout
        assert fields["OverSubscribe"] == "NO", job.stdout
        assert int(fields["NumCPUs"]) == summary["env"]["cpu_cores_logical"], job.stdout
    assert listed > 0, "scontrol lists none of the study's jobs"
    assert_no_overlap(cells)


@pytest.mark.slurm
def test_a_time_limited_cell_fails_while_the_rest_finish(cluster, slurm_study):
    """The convergence cells, made to fail by a 0.5 s time limit, are recorded as failed with
    the limit as their reason; every sweep cell is ok, and the study went on to the report."""
    workdir, _, _ = slurm_study
    for partition in cluster["partitions"]:
        for name, summary in summaries(workdir, f"slurm-{partition}").items():
            if name.startswith("convergence/"):
                assert summary["status"] == "failed", summary
                assert "time limit" in summary["reason"], summary["reason"]
            else:
                assert summary["status"] == "ok", summary
    assert (workdir / "results" / "report" / "index.html").is_file()


@pytest.mark.slurm
def test_aggregate_and_report_match_a_local_run(cluster, slurm_study):
    """summary.csv has the columns of the local run, one row per cell and node type with the
    local run's status for that cell, and the report rule produced the same files."""
    workdir, output, local = slurm_study
    on_slurm = aggregate.load_tables(workdir / "results").summary
    here = aggregate.load_tables(local / "results").summary
    assert list(on_slurm.columns) == list(here.columns)
    assert sorted(set(on_slurm["env"])) == sorted(f"slurm-{p}" for p in cluster["partitions"])
    local_status = dict(zip(here["experiment"] + "/" + here["cell"], here["status"],
                            strict=True))
    assert len(on_slurm) == len(here) * len(cluster["partitions"])
    for row in on_slurm.itertuples():
        assert row.status == local_status[f"{row.experiment}/{row.cell}"], row
    for name in ("summary.csv", "epochs.csv", "resources.csv", "columns.csv",
                 "cost_model.json", "report/index.html"):
        assert (workdir / "results" / name).is_file() and (local / "results" / name).is_file()
    for results in (workdir / "results", local / "results"):
        assert any((results / "report" / "figures").glob("*.png")), results
    html = (workdir / "results" / "report" / "index.html").read_text(encoding="utf-8")
    assert "--profile profiles/slurm" in html  # how to reproduce it
    for rule in ("aggregate", "report", "cost_model"):  # on the submitting host, not as jobs
        assert len(re.findall(rf"^localrule {rule}:$", output, re.MULTILINE)) == 1, rule
