"""Tests of the study on a SLURM cluster (profiles/slurm, workflow/rules/slurm.smk,
docs/slurm.md).

Without a cluster: a dry run through ``snakemake --profile profiles/slurm`` (no sbatch needed)
checks how cells are filed per partition (node type) and the resources each SLURM job asks
for (the CPUs of a node type without ``cpus`` from a fake ``sinfo``), and a run whose executor
does not match config ``executor`` stops before any job starts. The planning behind them
(partitions, environments, CPUs, resources, the executor check, devices ``auto``) is
unit-tested without Snakemake in tests/launch/test_plan.py; that a local run asks for no SLURM
resource, in tests/workflow/test_workflow.py's dry run.

With a cluster (marker ``slurm``; scripts/ci-slurm starts one of two nodes on this machine): a
tiny study runs through the profile, every timed cell as a SLURM job on each of two partitions,
and the tests prove what the profile promises from the cells' recorded node, job and times:
cells ran side by side on different nodes; each timed cell had its node to itself (no other
SLURM job on it meanwhile, no other cell's window on it); the two partitions are two
environments of one summary.csv and one report, as in a local run. Also: each summary names
the job Snakemake submitted, its partition and node, and a cell made to fail (a ``time_limit``)
is ``failed`` while the rest are ``ok``. The cluster is the one ``scontrol`` reaches; without
one these tests skip, and the two-node and two-partition tests skip on a cluster without two
nodes or two partitions, unless ``MNISTBENCH_REQUIRE_SLURM=1``: then they fail.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import time
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


def _require(reason: str, start: str = "scripts/slurm-cluster start") -> None:
    """Skip with ``reason`` and the command that ``start``s a cluster that has what is
    missing (fail with MNISTBENCH_REQUIRE_SLURM=1)."""
    reason += f" (start one with {start})"
    if os.environ.get(REQUIRE_VAR) == "1":
        pytest.fail(f"{REQUIRE_VAR}=1 but {reason}")
    pytest.skip(reason)


def _records(*args: str) -> list[dict[str, str]]:
    """``scontrol show ARGS --oneliner`` as one dict per record (job or node)."""
    out = _slurm("scontrol", "show", *args, "--oneliner").stdout
    return [dict(re.findall(r"(\w+)=(\S*)", line)) for line in out.splitlines() if "=" in line]


@pytest.fixture(scope="module")
def cluster() -> dict:
    """The cluster scontrol reaches: its partitions (default first, at most two), the nodes of
    each, and every node's CPUs and host. Skips without one (fails with
    MNISTBENCH_REQUIRE_SLURM=1)."""
    if shutil.which("scontrol") is None or shutil.which("sbatch") is None:
        _require("no scontrol/sbatch on PATH")
    try:
        ping = _slurm("scontrol", "ping")
    except subprocess.TimeoutExpired:
        ping = None
    if ping is None or "is UP" not in ping.stdout:
        _require("no SLURM controller answers `scontrol ping`")
    names = _slurm("sinfo", "--noheader", "--format=%P").stdout.split()
    partitions = [p.rstrip("*") for p in sorted(names, key=lambda n: not n.endswith("*"))[:2]]
    members: dict[str, set[str]] = {p: set() for p in partitions}
    for line in _slurm("sinfo", "--noheader", "--Node", "--format=%N %P").stdout.splitlines():
        node, partition = line.split()
        members.setdefault(partition.rstrip("*"), set()).add(node)
    nodes = {r["NodeName"]: {"cpus": int(r["CPUTot"]), "host": r.get("NodeHostName", "")}
             for r in _records("node")}
    return {"partitions": partitions, "members": members, "nodes": nodes}


def _cluster_config(tiny_mnist: Path, workdir: Path, partitions: list[str]) -> dict:
    """The tiny study of the cluster tests: cpu cells on every partition; the convergence
    cells (20 epochs, several seconds) made to fail by a time limit of 0.5 s, the sweep cells
    ok. The lock of timed cells is the default one, in the node's temporary folder, so that
    each node has its own (one lock file on the shared file system would keep the cells of
    all nodes apart)."""
    config = slurm_config(tiny_mnist, workdir, devices=["cpu"], lock_file="")
    config["slurm"] = {"partitions": {"cpu": partitions}, "mem_mb": 1000, "runtime": 10}
    config["experiments"]["convergence"].update(epochs=20, time_limit=0.5)
    return config


@pytest.fixture(scope="module")
def slurm_study(cluster, tmp_path_factory, tiny_mnist):
    """The tiny study through `snakemake --profile profiles/slurm` on the cluster, and the
    same study run locally (with a lock file of its own). Returns (workdir, snakemake output,
    local workdir)."""
    workdir = tmp_path_factory.mktemp("slurm_study")
    config = _cluster_config(tiny_mnist, workdir, cluster["partitions"])
    proc = profile_run(workdir, config)
    assert proc.returncode == 0, proc.stdout
    local = tmp_path_factory.mktemp("local_study")
    config = _cluster_config(tiny_mnist, local, cluster["partitions"])
    config.update(executor="local", env="local-ref", lock_file=str(local / "timed-cell.lock"))
    proc_local = snakemake(local, config, "--cores", "2")
    assert proc_local.returncode == 0, proc_local.stdout
    return workdir, proc.stdout, local


def _cells(workdir: Path) -> list[dict]:
    """Every cell's summary of a study."""
    runs = workdir / "results" / "runs"
    return [json.loads(p.read_text()) for p in sorted(runs.glob(f"*/*/*/{schema.SUMMARY_FILE}"))]


def _window(summary: dict) -> tuple[float, float]:
    """The cell's recorded window: from setting up (after its imports) to its summary."""
    return summary["timing"]["start_unix"], summary["timing"]["end_unix"]


def _name(summary: dict) -> str:
    params = summary["params"]
    return f"{params['env']}/{params['experiment']}/{params['cell']}"


def _cpus(listed: str) -> set[int]:
    """CPU numbers of a list such as "0-3,8"."""
    cpus: set[int] = set()
    for part in filter(None, listed.split(",")):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def _unix(stamp: str) -> float:
    """SLURM's local time stamp (whole seconds) as Unix time."""
    return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))


def _hosts(nodelist: str) -> set[str]:
    """The node names of a SLURM host list such as "node[1-2]"."""
    if not re.search(r"[\[,]", nodelist):
        return {nodelist}
    return set(_slurm("scontrol", "show", "hostnames", nodelist).stdout.split())


def _jobs() -> dict[str, dict]:
    """Every job SLURM still lists (any user's): its nodes and [start, end] (Unix time, whole
    seconds, as SLURM stamps them), by job id."""
    return {r["JobId"]: {"nodes": _hosts(r["NodeList"]), "start": _unix(r["StartTime"]),
                         "end": _unix(r["EndTime"]), "fields": r}
            for r in _records("job") if r.get("StartTime", "Unknown") != "Unknown"
            and r.get("EndTime", "Unknown") != "Unknown"}


def _timeline(cells: list[dict]) -> str:
    """The cells' windows by node, for an assertion's message."""
    t0 = min(_window(c)[0] for c in cells)
    return "; ".join(f"{c['env']['slurm_node']} {_name(c)} {_window(c)[0] - t0:.1f}-"
                     f"{_window(c)[1] - t0:.1f} s"
                     for c in sorted(cells, key=lambda c: (c["env"]["slurm_node"], _window(c))))


@pytest.mark.slurm
def test_every_timed_cell_ran_as_a_slurm_job_of_its_partition(cluster, slurm_study):
    """Each cell's summary names the SLURM job that Snakemake submitted for it, the partition
    its environment folder is named after, and a node of that partition."""
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
            assert info["slurm_node"] in cluster["members"][envs[env]], (env, name)
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
def test_cells_ran_side_by_side_on_different_nodes(cluster, slurm_study):
    """Promise 1: the study spreads its cells over the nodes and runs them at once. The cells
    ran on at least two nodes; the SLURM jobs of two cells (the jobs the cells recorded, with
    SLURM's start and end) ran at the same time on different nodes, each cell's recorded
    window inside its job; no cell waited for the lock of timed cells (each node has its own);
    and nodes that share a host (several slurmd on one machine, scripts/slurm-cluster) gave
    their cells disjoint CPUs (the cells' recorded sched_getaffinity)."""
    used = {n for p in cluster["partitions"] for n in cluster["members"][p]}
    if len(used) < 2:
        _require(f"the partitions {cluster['partitions']} hold one node ({sorted(used)}); "
                 "running cells side by side needs two",
                 "MNISTBENCH_SLURM_NODES=2 scripts/slurm-cluster start")
    workdir, _, _ = slurm_study
    cells = _cells(workdir)
    nodes = {c["env"]["slurm_node"] for c in cells}
    assert len(nodes) >= 2, f"every cell ran on {nodes}: {_timeline(cells)}"
    jobs = _jobs()
    spans = {}  # cell -> (node, its job's start and end)
    for summary in cells:
        job = jobs.get(summary["env"]["slurm_job_id"])
        if job is None:  # already purged (MinJobAge)
            continue
        start, end = _window(summary)
        assert job["nodes"] == {summary["env"]["slurm_node"]}, (job, _name(summary))
        assert job["start"] <= start and end <= job["end"] + 1, (job, _name(summary))
        spans[_name(summary)] = (summary["env"]["slurm_node"], job["start"], job["end"])
    side_by_side = [(a, b) for (a, (node_a, start_a, end_a)), (b, (node_b, start_b, end_b))
                    in itertools.combinations(spans.items(), 2)
                    if node_a != node_b and max(start_a, start_b) < min(end_a, end_b)]
    assert side_by_side, f"no two cells' jobs on different nodes overlapped: {spans}"
    for log in (workdir / "results" / "logs" / "runs").rglob("*.log"):
        assert "waiting for the machine's lock" not in log.read_text(), log
    by_host: dict[str, dict[str, set[int]]] = {}
    for summary in cells:
        env = summary["env"]
        cpus = by_host.setdefault(env["hostname"], {}).setdefault(env["slurm_node"], set())
        cpus |= _cpus(env["cpu_affinity"])
    for host, node_cpus in by_host.items():
        for a, b in itertools.combinations(sorted(node_cpus), 2):
            assert not node_cpus[a] & node_cpus[b], (host, a, b, node_cpus)


@pytest.mark.slurm
def test_each_timed_cell_had_its_node_to_itself(cluster, slurm_study):
    """Promise 2: no other SLURM job, of this study or any other, ran on a cell's node while
    the cell's job ran (every job SLURM still lists, by its node, start and end), and no two
    cells' windows on one node overlapped. Each cell's job was exclusive (OverSubscribe=NO)
    and held every CPU of its node, which are the CPUs the cell could run on."""
    workdir, _, _ = slurm_study
    cells = _cells(workdir)
    jobs = _jobs()
    listed = 0
    for summary in cells:
        env = summary["env"]
        job = jobs.get(env["slurm_job_id"])
        if job is None:  # already purged (MinJobAge)
            continue
        listed += 1
        fields = job["fields"]
        assert fields["JobState"] == "COMPLETED", fields
        assert fields["OverSubscribe"] == "NO", fields
        node_cpus = cluster["nodes"][env["slurm_node"]]["cpus"]
        assert int(fields["NumCPUs"]) == node_cpus == len(_cpus(env["cpu_affinity"])), (
            fields["NumCPUs"], node_cpus, env["cpu_affinity"], _name(summary))
        for other_id, other in jobs.items():
            if other_id != env["slurm_job_id"] and other["nodes"] & job["nodes"]:
                assert other["end"] <= job["start"] or job["end"] <= other["start"], (
                    f"job {other_id} ran on {env['slurm_node']} beside the cell {_name(summary)} "
                    f"(job {env['slurm_job_id']})")
    assert listed > 0, "scontrol lists none of the study's jobs"
    for node in {c["env"]["slurm_node"] for c in cells}:
        assert_no_overlap([c for c in cells if c["env"]["slurm_node"] == node])


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
def test_two_partitions_are_two_environments_of_one_report(cluster, slurm_study):
    """Promise 3: the cells of two partitions are two environments of one summary.csv, each
    row with its partition and a node of it, and one report names both; the columns, the
    cells' statuses and the report's files are those of the same study run locally."""
    if len(cluster["partitions"]) < 2:
        _require(f"the cluster has one partition ({cluster['partitions']}); two node types "
                 "need two", "MNISTBENCH_SLURM_PARTITIONS='main alt' scripts/slurm-cluster start")
    workdir, output, local = slurm_study
    on_slurm = aggregate.load_tables(workdir / "results").summary
    here = aggregate.load_tables(local / "results").summary
    assert list(on_slurm.columns) == list(here.columns)
    envs = {f"slurm-{p}": p for p in cluster["partitions"]}
    assert sorted(set(on_slurm["env"])) == sorted(envs)
    local_status = dict(zip(here["experiment"] + "/" + here["cell"], here["status"],
                            strict=True))
    assert len(on_slurm) == len(here) * len(envs)
    for row in on_slurm.itertuples():
        assert row.status == local_status[f"{row.experiment}/{row.cell}"], row
        assert row.slurm_partition == envs[row.env], row
        assert row.slurm_node in cluster["members"][row.slurm_partition], row
    for name in ("summary.csv", "epochs.csv", "resources.csv", "columns.csv",
                 "cost_model.json", "report/index.html"):
        assert (workdir / "results" / name).is_file() and (local / "results" / name).is_file()
    for results in (workdir / "results", local / "results"):
        assert any((results / "report" / "figures").glob("*.png")), results
    html = (workdir / "results" / "report" / "index.html").read_text(encoding="utf-8")
    assert all(env in html for env in envs), envs
    assert "--profile profiles/slurm" in html  # how to reproduce it
    for rule in ("aggregate", "report", "cost_model"):  # on the submitting host, not as jobs
        assert len(re.findall(rf"^localrule {rule}:$", output, re.MULTILINE)) == 1, rule
