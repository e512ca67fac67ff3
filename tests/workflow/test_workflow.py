"""Tests of the Snakemake workflow (Snakefile, workflow/rules/*.smk, the config schema), all
through the real ``snakemake`` command on tiny studies in temporary working directories:
lint and format checks, the cell matrix of a dry run, config validation, the workflow on
Snakemake alone (a venv holding only the pinned snakemake lints and plans the default and the
quick study), a tiny end-to-end study (absent device, honest scheduling, aggregate, report),
resuming after a lost or crashed cell, merging another environment's cells, and fetching
through the workflow. The planning itself is unit-tested without Snakemake in
tests/launch/test_plan.py."""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import psutil
import pytest
import yaml
from snakemake.utils import validate

from mnistbench import steps
from mnistbench.core import provenance, schema
from mnistbench.data import files
from mnistbench.data import mnist as data
from mnistbench.launch import plan
from mnistbench.results import aggregate, cost
from tests.fakes import make_study

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SNAKEMAKE = BIN / "snakemake"
SNAKEFILE = REPO / "Snakefile"
CONFIG_SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
ENV = "wf-test"
RUN_TIMEOUT_S = 600  # s, the most one snakemake run of these tests may take

# Tiny, fast cells: a few synthetic samples, a couple of steps.
TINY_EXPERIMENT = {"train_limit": 256, "test_limit": 128, "warmup_steps": 1}


def tiny_config(data_dir: Path, workdir: Path, **overrides) -> dict:
    """A study config on synthetic data with its own lock file; ``overrides`` replace keys."""
    config = {
        "env": ENV,
        "data_dir": str(data_dir),
        "default_mirrors": False,
        "devices": ["cpu"],
        "lock_file": str(workdir / "timed-cell.lock"),
        "experiments": {
            "convergence": {"loaders": ["resident"], "repeats": 1, "epochs": 1,
                            **TINY_EXPERIMENT},
            "sweep": {"batch_sizes": [32], "precisions": ["fp32"], "loaders": ["resident"],
                      "repeats": 1, "max_steps": 2, **TINY_EXPERIMENT},
            "tips": {"enabled": False},  # on in tests that time tips (test_tips_*)
            "scale": {"enabled": False},  # tests/workflow/test_workflow_scale.py plans it
            # On by default; their cells are the convergence experiment's codes, short.
            "headline": {"enabled": False},
            "threads": {"enabled": False},
        },
    }
    config.update(overrides)
    return config


def snakemake(workdir: Path, config: dict | None, *args: str, env: dict | None = None,
              timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run ``snakemake ARGS`` on the project's Snakefile in ``workdir`` with ``config``
    (written to workdir/config.yaml); stdout and stderr together in ``.stdout``."""
    command = [str(SNAKEMAKE), "--snakefile", str(SNAKEFILE), "--directory", str(workdir)]
    if config is not None:
        configfile = workdir / "config.yaml"
        configfile.write_text(yaml.safe_dump(config), encoding="utf-8")
        command += ["--configfile", str(configfile)]
    return subprocess.run([*command, *args], capture_output=False, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          env=env, check=False)


def bench_jobs(output: str) -> dict[tuple[str, str, str], str]:
    """The text of every bench job a snakemake run printed (its shell command with
    --printshellcmds), keyed by (env, experiment, cell)."""
    jobs = {}
    for block in re.split(r"^\[[^\]\n]+\]$", output, flags=re.MULTILINE):
        found = re.search(
            r"^(?:local)?rule bench:$.*?wildcards: env=([^,\s]+), experiment=([^,\s]+), "
            r"cell=([^,\s]+)", block, re.MULTILINE | re.DOTALL)
        if found:
            jobs[found.groups()] = block
    return jobs


def planned_cells(output: str) -> set[tuple[str, str, str]]:
    """(env, experiment, cell) of every bench job in a snakemake run's output."""
    return set(bench_jobs(output))


def jobs_of_rule(output: str, rule: str) -> int:
    """How many jobs of ``rule`` a snakemake run scheduled (0 when none)."""
    return len(re.findall(rf"^(?:local)?rule {rule}:$", output, re.MULTILINE))


def summaries(workdir: Path, env: str = ENV) -> dict[str, dict]:
    """Every summary.json of ``env`` under workdir/results/runs, by experiment/cell."""
    runs = workdir / "results" / "runs" / env
    return {f"{p.parent.parent.name}/{p.parent.name}": json.loads(p.read_text())
            for p in runs.glob(f"*/*/{schema.SUMMARY_FILE}")}


def assert_no_overlap(cells: list[dict]) -> None:
    """No two cells' [start_unix, end_unix] intervals intersect."""
    spans = sorted((c["timing"]["start_unix"], c["timing"]["end_unix"], c["params"]["cell"])
                   for c in cells)
    for (_, end, first), (start, _, second) in itertools.pairwise(spans):
        assert end <= start, f"timed cells {first} and {second} overlapped"


def max_concurrent_bench_jobs(output: str) -> int:
    """The most bench jobs Snakemake had running at once, from its job start/finish lines."""
    running: set[str] = set()
    most = 0
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if re.fullmatch(r"(?:local)?rule bench:", line.strip()):
            jobid = next(m.group(1) for m in (re.search(r"jobid: (\d+)", x) for x in lines[i:])
                         if m)
            running.add(jobid)
            most = max(most, len(running))
        finished = re.search(r"Finished jobid: (\d+) \(Rule: bench\)", line)
        if finished:
            running.discard(finished.group(1))
    return most


def cuda_usable() -> bool:
    """Whether torch sees a CUDA GPU here (decides what the cuda cells must record)."""
    import torch

    return torch.cuda.is_available()


# --------------------------------------------------------------------------- static checks
@pytest.mark.slow
def test_lint_reports_nothing():
    """`snakemake --lint` on the default config finds nothing to complain about."""
    proc = subprocess.run([str(SNAKEMAKE), "--lint"], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout
    assert "Lints for" not in proc.stdout


def test_snakefmt_check_passes():
    """`snakefmt --check .` leaves every Snakefile and .smk file unchanged."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")  # shfmt
    proc = subprocess.run([str(BIN / "snakefmt"), "--check", "."], cwd=REPO, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout


def test_schema_defaults_are_the_reports_cost_model_and_shipped_configs_validate():
    """An empty config's cost resolves to the report's built-in cost model; config.yaml and
    every other shipped config (quick.yaml, container.yaml) validate against the schema and
    their cost model passes the report's check."""
    empty: dict = {}
    validate(empty, str(CONFIG_SCHEMA))
    assert cost.resolve(empty["cost"]) == cost.DEFAULT_MODEL
    assert empty["experiments"]["sweep"]["precisions"] == ["fp32", "tf32", "bf16", "fp16"]
    shipped = sorted(path.name for path in (REPO / "config").glob("*.yaml"))
    assert {"config.yaml", "quick.yaml", "container.yaml"} <= set(shipped)
    for name in shipped:
        config = yaml.safe_load((REPO / "config" / name).read_text())
        validate(config, str(CONFIG_SCHEMA))
        cost.validate(config["cost"], source=name)


def test_conda_env_pins_match_the_requirements():
    """envs/conda.yaml pins exactly the runtime and torch pins of envs/pip."""
    def pins(path: Path) -> set[str]:
        lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
        return {line for line in lines if line and not line.startswith("-")}

    env = yaml.safe_load((REPO / "envs" / "conda.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    wanted = pins(REPO / "envs" / "pip" / "base.txt") | pins(REPO / "envs" / "pip" /
                                                            "torch.txt")
    assert set(pip) == wanted


def test_every_conda_directive_names_the_one_conda_env():
    """Every rule's conda: directive resolves, relative to its rule file, to envs/conda.yaml,
    and no other copy of the pins (requirements/, workflow/envs/) is left."""
    rules = sorted((REPO / "workflow" / "rules").glob("*.smk"))
    directives = []
    for rule_file in rules:
        found = re.findall(r"^\s+conda:\s*\n\s+\"([^\"]+)\"", rule_file.read_text(), re.M)
        directives += [(rule_file.parent / path).resolve() for path in found]
    assert directives, "no rule has a conda: directive"
    assert set(directives) == {(REPO / "envs" / "conda.yaml").resolve()}
    assert not (REPO / "requirements").exists() and not (REPO / "workflow" / "envs").exists()


def test_setup_ci_and_dockerfiles_read_the_pins_from_envs_pip():
    """scripts/setup (its stamp included), scripts/ci-docker and every Dockerfile take the
    pins from files of envs/pip that exist, and none from the old requirements/ folder."""
    users = [REPO / "scripts" / "setup", REPO / "scripts" / "ci-docker",
             *sorted((REPO / "docker").glob("*.Dockerfile"))]
    for path in users:
        text = path.read_text()
        named = set(re.findall(r"envs/pip/([\w*]+\.txt)", text))
        assert named, f"{path} names no envs/pip file"
        assert all((REPO / "envs" / "pip" / name).is_file() for name in named - {"*.txt"})
        assert not re.search(r"(?<![/\w])requirements/", text), path
    assert "want=$(cat envs/pip/*.txt pyproject.toml" in (REPO / "scripts" / "setup").read_text()
    assert len(list((REPO / "envs" / "pip").glob("*.txt"))) == 3


# --------------------------------------------------------------------------- dry runs
# The planning behind these (the matrix, devices, names, errors) is unit-tested without
# Snakemake in tests/launch/test_plan.py; the dry runs here check that the rules wire it up.
def job_resources(block: str) -> dict[str, str]:
    """The ``resources:`` line of one job printed by snakemake, as a dict of strings."""
    line = re.search(r"^\s*resources: (.*)$", block, re.MULTILINE)
    assert line, block
    return dict(item.split("=", 1) for item in line.group(1).split(", "))


@pytest.mark.slow
def test_dry_run_plans_one_job_per_cell_with_its_flags(tmp_path, tiny_mnist):
    """A dry run plans exactly the matrix's cells (tf32 left out on cpu) with their flags, each
    a local `mnistbench train` holding one unit of timed_cell and no SLURM resource (whatever
    the slurm section says), builds no image, and writes nothing: no results, no lock file."""
    config = tiny_config(tiny_mnist, tmp_path, devices=["cpu", "cuda"], seed=7, pin_memory=True)
    config["experiments"]["convergence"]["repeats"] = 2
    config["experiments"]["sweep"].update(batch_sizes=[32, 256], precisions=["fp32", "tf32"])
    config["slurm"] = {"partitions": {"cpu": ["epyc", "icelake"]},
                       "node_types": {"epyc": {"cpus": 2}}}
    proc = snakemake(tmp_path, config, "--dry-run", "--printshellcmds", "--cores", "2")
    assert proc.returncode == 0, proc.stdout
    cells = {(exp, cell) for env, exp, cell in planned_cells(proc.stdout) if env == ENV}
    assert cells == {
        ("convergence", "cpu-fp32-resident-b128-r0"), ("convergence", "cuda-fp32-resident-b128-r0"),
        ("convergence", "cpu-fp32-resident-b128-r1"), ("convergence", "cuda-fp32-resident-b128-r1"),
        ("sweep", "cpu-fp32-resident-b32-r0"), ("sweep", "cpu-fp32-resident-b256-r0"),
        ("sweep", "cuda-fp32-resident-b32-r0"), ("sweep", "cuda-fp32-resident-b256-r0"),
        ("sweep", "cuda-tf32-resident-b32-r0"), ("sweep", "cuda-tf32-resident-b256-r0"),
    }
    assert jobs_of_rule(proc.stdout, "bench") == 10
    assert {env for env, _, _ in planned_cells(proc.stdout)} == {ENV}
    jobs = {cell: text for (_, _, cell), text in bench_jobs(proc.stdout).items()}
    tf32 = jobs["cuda-tf32-resident-b256-r0"]
    for flags in ("--device cuda --precision tf32", "--batch-size 256 --loader resident",
                  "--seed 7", "--pin-memory", "--max-steps 2", "--epochs 1",
                  "--train-limit 256 --test-limit 128", f"--env {ENV}",
                  "--experiment sweep --cell cuda-tf32-resident-b256-r0", "--repeat 0"):
        assert flags in tf32, flags
    assert "--seed 8" in jobs["cpu-fp32-resident-b128-r1"]  # repeat r runs with seed + r
    assert "--repeat 1" in jobs["cpu-fp32-resident-b128-r1"]
    for block in jobs.values():
        resources = job_resources(block)
        assert resources.get("timed_cell") == "1"
        assert not {"slurm_partition", "cpus_per_task", "gpu", "slurm_extra"} & set(resources)
        assert "mnistbench run-cell --lock" in block and "docker run" not in block
        assert "--launcher mnistbench --workflow-digest" in block
    assert jobs_of_rule(proc.stdout, "docker_image") == 0
    assert not (tmp_path / "results").exists()  # a dry run writes nothing
    assert not Path(config["lock_file"]).exists()  # it checks the lock file, creates none


@pytest.mark.slow
def test_a_copied_environment_folder_with_unsafe_characters_is_named_with_the_fix(
        tmp_path, tiny_mnist):
    """An environment folder copied into results/runs whose name holds { } stops the workflow
    with one paragraph naming the folder and a safe name (no WildcardError, no traceback: a
    planning error reaches Snakemake as a WorkflowError)."""
    folder = "lab{gpu}"
    cell = tmp_path / "results" / "runs" / folder / "sweep" / "cpu-fp32-resident-b32-r0"
    cell.mkdir(parents=True)
    (cell / schema.SUMMARY_FILE).write_text("{}")
    proc = snakemake(tmp_path, tiny_config(tiny_mnist, tmp_path), "--dry-run", "--cores", "1")
    assert proc.returncode != 0
    assert f"results/runs/{folder}: an environment folder" in proc.stdout
    assert "Rename it" in proc.stdout
    assert "WildcardError" not in proc.stdout and "Traceback" not in proc.stdout


def test_snakemake_loads_the_quiet_scheduling_profile(tmp_path, tiny_mnist):
    """profiles/default, which Snakemake loads by itself: the greedy scheduler, so that no
    integer program is solved in a CBC subprocess every second while timed cells wait (the
    cells' other load rose to 5-7 % of a 2-core machine, docs/workflow.md), and Snakemake's own
    1 s job-rate timespan (a longer one makes every run wait that long at exit)."""
    profile = yaml.safe_load((REPO / "profiles" / "default" / "config.yaml").read_text())
    assert profile == {"scheduler": "greedy"}, profile
    proc = snakemake(tmp_path, tiny_config(tiny_mnist, tmp_path), "-n")
    assert proc.returncode == 0, proc.stdout
    assert "workflow specific profile" in proc.stdout and "profiles/default" in proc.stdout, \
        proc.stdout[:2000]


@pytest.mark.slow
def test_invalid_config_stops_before_anything_runs(tmp_path, tiny_mnist):
    """A bad config value fails at once with one message naming the key and what is allowed,
    and leaves no results behind (every kind of bad value: tests/launch/test_plan.py)."""
    config = tiny_config(tiny_mnist, tmp_path)
    config["experiments"]["sweep"]["precisions"] = ["fp32", "fp64"]
    proc = snakemake(tmp_path, config, "--cores", "1")
    assert proc.returncode != 0
    message = next(line for line in proc.stdout.splitlines() if "invalid config key" in line)
    assert "invalid config key experiments.sweep.precisions[1]:" in message
    assert "['fp32', 'tf32', 'bf16', 'fp16']" in message
    assert "config.schema.yaml" in message
    assert "Traceback" not in proc.stdout
    assert not (tmp_path / "results").exists()


# --------------------------------------------------------------------------- Snakemake alone
#: The pinned Snakemake (envs/pip/dev.txt), the only package of the snakemake_only venv.
SNAKEMAKE_PIN = next(line.split("#")[0].strip() for line in
                     (REPO / "envs" / "pip" / "dev.txt").read_text().splitlines()
                     if line.startswith("snakemake=="))
#: What uv says when it cannot reach the registry (then the tests skip).
UNREACHABLE = ("Failed to fetch", "error sending request", "dns error", "Network is unreachable",
               "Connection refused", "operation timed out", "tcp connect error",
               f"Because {SNAKEMAKE_PIN.split('==')[0]} was not found in the package registry")


@pytest.fixture(scope="session")
def snakemake_only(tmp_path_factory) -> Path:
    """bin/ of a venv holding only the pinned snakemake and what it depends on (no mnistbench,
    no numpy), made with uv (envs/pip/dev.txt: scripts/setup's installer, whose cache holds
    Snakemake's dependencies by then) from the registry once per session and shared by
    pytest-xdist's workers (a lock file). Skips, with uv's reason, where uv cannot reach the
    registry."""
    base = tmp_path_factory.getbasetemp()  # under pytest-xdist: popen-gwN of the session's
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "snakemake-only"
    root.mkdir(exist_ok=True)
    venv, done, skipped = root / "venv", root / "done", root / "skipped"
    uv = [sys.executable, "-m", "uv"]
    with (root / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists() and not skipped.exists():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([*uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
                           check=True, timeout=300, capture_output=True,
                           env=clean_environment())
            proc = subprocess.run(
                [*uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
                 SNAKEMAKE_PIN], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                timeout=900, env={**clean_environment(), "UV_HTTP_TIMEOUT": "30",
                                  **uv_certificates()},
                check=False)
            if proc.returncode != 0:
                if not any(sign in proc.stdout for sign in UNREACHABLE):
                    pytest.fail(f"uv pip install {SNAKEMAKE_PIN} failed:\n{proc.stdout[-3000:]}")
                tail = " ".join(proc.stdout.split())[-400:]
                skipped.write_text(f"uv cannot reach the registry for {SNAKEMAKE_PIN}: {tail}")
            else:  # its bytecode once, as scripts/setup does (PYTHONDONTWRITEBYTECODE=1 here)
                subprocess.run([str(venv / "bin" / "python"), "-m", "compileall", "-qq", "-j",
                                "0", str(venv / "lib")], timeout=600, check=False)
                done.write_text(SNAKEMAKE_PIN)
    if skipped.exists():
        pytest.skip(skipped.read_text())
    return venv / "bin"


def uv_certificates() -> dict[str, str]:
    """SSL_CERT_FILE for uv: pip's certificate bundle where PIP_CERT names one and
    SSL_CERT_FILE does not (as scripts/setup gives uv; uv's own roots lack a proxy's CA)."""
    cert = os.environ.get("PIP_CERT", "")
    return {"SSL_CERT_FILE": cert} if cert and not os.environ.get("SSL_CERT_FILE") else {}


def clean_environment(bindir: Path | None = None) -> dict[str, str]:
    """This environment without PYTHONPATH and without any PATH folder that holds a
    `mnistbench` command (.venv/bin among them); ``bindir`` first on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    folders = [f for f in env.get("PATH", "").split(os.pathsep)
               if f and not (Path(f) / "mnistbench").exists()]
    env["PATH"] = os.pathsep.join(([str(bindir)] if bindir else []) + folders)
    return env


def snakemake_alone(bindir: Path, workdir: Path, *args: str) -> subprocess.CompletedProcess:
    """``snakemake ARGS`` of the snakemake_only venv on this checkout's Snakefile in
    ``workdir``, with no PYTHONPATH and no mnistbench on PATH."""
    command = [str(bindir / "snakemake"), "--snakefile", str(SNAKEFILE), "--directory",
               str(workdir), *args]
    return subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=RUN_TIMEOUT_S, env=clean_environment(bindir),
                          check=False)


@pytest.mark.slow
def test_snakemake_alone_lints_and_builds_the_default_and_quick_dags(snakemake_only, tmp_path):
    """In a venv holding only the pinned snakemake (no mnistbench installed, no PYTHONPATH):
    `snakemake --lint` reports nothing, and `snakemake -n` of the default study and of the
    quick one plan their cells, the default one the same jobs as .venv's Snakemake."""
    python = snakemake_only / "python"
    missing = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print([m for m in ('mnistbench', "
         "'numpy', 'pandas', 'torch') if u.find_spec(m)])"], capture_output=True, text=True,
        env=clean_environment(snakemake_only), cwd=tmp_path, timeout=60, check=True)
    assert missing.stdout.strip() == "[]", "the venv is not Snakemake alone"
    lint = subprocess.run([str(snakemake_only / "snakemake"), "--lint"], cwd=REPO,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=RUN_TIMEOUT_S, env=clean_environment(snakemake_only),
                          check=False)
    assert lint.returncode == 0, lint.stdout
    assert "Lints for" not in lint.stdout and "Traceback" not in lint.stdout
    default = ["--configfile", str(REPO / "config" / "config.yaml")]
    studies = {"default": default, "quick": [*default, str(REPO / "config" / "quick.yaml")]}
    planned = {}
    for name, configfiles in studies.items():
        workdir = tmp_path / name
        workdir.mkdir()
        proc = snakemake_alone(snakemake_only, workdir, *configfiles, "--dry-run")
        assert proc.returncode == 0, proc.stdout
        planned[name] = planned_cells(proc.stdout)
        assert planned[name], proc.stdout
        for rule in ("aggregate", "cost_model", "report"):
            assert jobs_of_rule(proc.stdout, rule) == 1, (name, rule)
    assert planned["quick"] != planned["default"]
    here = snakemake(tmp_path / "default", None, *default, "--dry-run")
    assert here.returncode == 0, here.stdout
    assert planned_cells(here.stdout) == planned["default"]


@pytest.mark.slow
def test_snakemake_alone_stops_a_run_without_mnistbench_before_any_job(snakemake_only,
                                                                      tmp_path, tiny_mnist):
    """A real run of Snakemake alone, with no mnistbench command next to it or on PATH, stops
    before its first job with the fix (the dry run needs none), and writes no results."""
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(tiny_config(tiny_mnist, tmp_path)), encoding="utf-8")
    proc = snakemake_alone(snakemake_only, tmp_path, "--configfile", str(configfile),
                           "--cores", "1")
    assert proc.returncode != 0, proc.stdout
    assert "the mnistbench command is not installed next to this Snakemake" in proc.stdout
    assert "Finished jobid" not in proc.stdout and "Traceback" not in proc.stdout
    assert not (tmp_path / "results" / "runs").exists()


# --------------------------------------------------------------------------- real runs
@pytest.fixture(scope="module")
def study(tmp_path_factory, tiny_mnist):
    """A tiny study run to the report with --cores 2 and one core per bench job (so that only
    the workflow's own limit keeps timed cells apart): cpu cells, plus cuda cells that this
    machine may not be able to run. Returns (workdir, config, snakemake output)."""
    workdir = tmp_path_factory.mktemp("study")
    config = tiny_config(tiny_mnist, workdir, devices=["cpu", "cuda"])
    config["experiments"]["convergence"]["epochs"] = 2
    config["experiments"]["sweep"]["precisions"] = ["fp32", "fp16"]
    plant_limits(workdir, devices=("cpu", "cuda"))
    proc = snakemake(workdir, config, "--cores", "2", "--set-threads", "bench=1")
    assert proc.returncode == 0, proc.stdout
    return workdir, config, proc.stdout


@pytest.mark.slow
def test_study_runs_every_cell_to_the_aggregated_tables(study):
    """Every cell of the matrix has a summary; cuda cells record unavailable where this
    machine has no usable GPU; summary.csv holds one row per cell; the cost model is the
    config's."""
    workdir, _, _ = study
    cells = summaries(workdir)
    assert set(cells) == {
        "convergence/cpu-fp32-resident-b128-r0", "convergence/cuda-fp32-resident-b128-r0",
        "sweep/cpu-fp32-resident-b32-r0", "sweep/cuda-fp32-resident-b32-r0",
        "sweep/cuda-fp16-resident-b32-r0",
    }
    cuda_status = "ok" if cuda_usable() else "unavailable"
    for name, summary in cells.items():
        assert summary["status"] == ("ok" if name.split("/")[1].startswith("cpu")
                                     else cuda_status), name
        assert summary["params"]["env"] == ENV
        assert summary["params"]["experiment"] == name.split("/")[0]
        assert summary["env"]["launch"] == "fork-server", name  # config fork_server: true
        # Provenance: the digests of the code and of the bench rule that measured it.
        assert summary["env"]["code_digest"] == provenance.running_code_digest(), name
        assert summary["env"]["workflow_digest"] == provenance.workflow_digest(
            (REPO / provenance.BENCH_RULES).read_text()), name
    assert cells["convergence/cpu-fp32-resident-b128-r0"]["params"]["epochs"] == 2
    assert cells["sweep/cpu-fp32-resident-b32-r0"]["params"]["max_steps"] == 2
    tables = aggregate.load_tables(workdir / "results")
    assert sorted(tables.summary["cell"]) == sorted(name.split("/")[1] for name in cells)
    assert (workdir / "results" / "columns.csv").is_file()
    model = json.loads((workdir / "results" / "cost_model.json").read_text())
    assert model == cost.DEFAULT_MODEL
    logs = workdir / "results" / "logs"
    assert {p.stem for p in (logs / "runs" / ENV / "sweep").glob("*.log")} == {
        name.split("/")[1] for name in cells if name.startswith("sweep/")}
    assert (logs / "aggregate.log").is_file() and (logs / "cost_model.log").is_file()
    server_log = (logs / "forkserver.log").read_text()
    pids = re.findall(r"fork server (\d+): serving", server_log)
    assert len(pids) == 1 and "stopped" in server_log, server_log
    assert not psutil.pid_exists(int(pids[0]))  # ended with the Snakemake run
    # Every cell holds its data in memory: the server left torchvision (the DataLoader's) out.
    assert "imported mnistbench.measure.entry" in server_log, server_log
    assert "torchvision" not in server_log, server_log


@pytest.mark.slow
def test_timed_cells_never_overlap_under_two_cores(study):
    """With --cores 2 and one thread per bench job, Snakemake still ran one timed cell at a
    time, and no two cells' recorded [start_unix, end_unix] intervals overlap."""
    workdir, _, output = study
    assert max_concurrent_bench_jobs(output) == 1
    assert jobs_of_rule(output, "bench") == 5
    assert_no_overlap(list(summaries(workdir).values()))


@pytest.mark.slow
def test_cells_run_in_matrix_order(study):
    """Timed cells start in the matrix's order (repeat, experiment, device, precision)."""
    _, _, output = study
    assert [f"{exp}/{cell}" for _, exp, cell in bench_jobs(output)] == [
        "convergence/cpu-fp32-resident-b128-r0", "convergence/cuda-fp32-resident-b128-r0",
        "sweep/cpu-fp32-resident-b32-r0", "sweep/cuda-fp32-resident-b32-r0",
        "sweep/cuda-fp16-resident-b32-r0",
    ]


@pytest.mark.slow
def test_report_and_snakemake_report_zip(study):
    """The report rule wrote the HTML report and figures, and `snakemake --report` packs
    them with the workflow description into a zip."""
    workdir, config, _ = study
    html = workdir / "results" / "report" / "index.html"
    assert html.is_file() and html.stat().st_size > 0
    assert "<html" in html.read_text(encoding="utf-8").lower()
    proc = snakemake(workdir, config, "--report", "report.zip")
    assert proc.returncode == 0, proc.stdout
    with zipfile.ZipFile(workdir / "report.zip") as archive:
        names = archive.namelist()
    raw = [Path(name).name for name in names if name.startswith("report/data/raw/")]
    figures = {p.name for p in (workdir / "results" / "report" / "figures").glob("*.png")}
    assert figures, "the report rule wrote no figures"
    assert "report/report.html" in names
    assert sorted(raw) == sorted({"index.html", *figures})


@pytest.mark.slow
def test_rerun_redoes_only_a_missing_cell(study):
    """Deleting one cell's summary.json makes the next `snakemake` (default target) redo that
    cell alone (here without the fork server), then the tables and the report, leaving every
    other cell's files untouched."""
    workdir, config, _ = study
    runs = workdir / "results" / "runs" / ENV
    lost = runs / "sweep" / "cpu-fp32-resident-b32-r0" / schema.SUMMARY_FILE
    others = {p: p.stat().st_mtime_ns for p in runs.glob(f"*/*/{schema.SUMMARY_FILE}")
              if p != lost}
    lost.unlink()
    proc = snakemake(workdir, config, "--cores", "2", "--config", "fork_server=False")
    assert proc.returncode == 0, proc.stdout
    assert planned_cells(proc.stdout) == {(ENV, "sweep", "cpu-fp32-resident-b32-r0")}
    assert json.loads(lost.read_text())["env"]["launch"] == "exec"  # a new process per cell
    assert jobs_of_rule(proc.stdout, "aggregate") == jobs_of_rule(proc.stdout, "report") == 1
    assert lost.is_file()
    assert {p: p.stat().st_mtime_ns for p in others} == others
    proc = snakemake(workdir, config, "--cores", "2", "--config", "fork_server=False")
    assert proc.returncode == 0 and "Nothing to be done" in proc.stdout, proc.stdout


@pytest.mark.slow
def test_cells_copied_from_another_environment_merge(study):
    """Copying another machine's results/runs/{env} in and rerunning merges its cells into
    summary.csv without running any of them here."""
    workdir, config, _ = study
    runs = workdir / "results" / "runs"
    other = runs / "other-box-docker"
    shutil.copytree(runs / ENV, other)
    for path in other.glob(f"*/*/{schema.SUMMARY_FILE}"):
        summary = json.loads(path.read_text())
        summary["params"]["env"] = other.name
        path.write_text(json.dumps(summary))
        os.utime(path, (1_000_000_000, 1_000_000_000))  # older than the data files
    try:
        proc = snakemake(workdir, config, "--cores", "2", "results/summary.csv")
        assert proc.returncode == 0, proc.stdout
        assert jobs_of_rule(proc.stdout, "bench") == 0
        assert jobs_of_rule(proc.stdout, "aggregate") == 1
        envs = list(aggregate.load_tables(workdir / "results").summary["env"])
        assert envs.count(ENV) == envs.count(other.name) == 5
    finally:
        shutil.rmtree(other)


@pytest.mark.slow
def test_a_crashed_cell_fails_the_run_and_only_it_and_later_cells_rerun(tmp_path, tiny_mnist):
    """Killing a cell's trainer is a normal job failure; the next run redoes that cell and the
    ones not yet run, and keeps the cell that had finished."""
    config = tiny_config(tiny_mnist, tmp_path)
    config["experiments"]["convergence"]["enabled"] = False
    config["experiments"]["sweep"]["batch_sizes"] = [16, 32, 64]
    config["experiments"]["sweep"]["epochs"] = 4  # long enough to be killed while running (~1 s)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    plant_limits(tmp_path)
    command = [str(SNAKEMAKE), "--snakefile", str(SNAKEFILE), "--directory", str(tmp_path),
               "--configfile", str(tmp_path / "config.yaml"), "--cores", "2",
               "results/summary.csv"]
    victim = "cpu-fp32-resident-b32-r0"
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as first:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        trainer = None
        while trainer is None and time.monotonic() < deadline and first.poll() is None:
            for child in psutil.Process(first.pid).children(recursive=True):
                try:
                    cmdline = child.cmdline()
                except psutil.Error:
                    continue
                if "train" in cmdline and victim in cmdline:
                    trainer = child
            time.sleep(0.1)
        assert trainer is not None, "the victim cell never started"
        trainer.send_signal(signal.SIGKILL)
        output, _ = first.communicate(timeout=RUN_TIMEOUT_S)
    assert first.returncode != 0, output
    runs = tmp_path / "results" / "runs" / ENV / "sweep"
    done = runs / "cpu-fp32-resident-b16-r0" / schema.SUMMARY_FILE
    assert done.is_file()
    assert not (runs / victim / schema.SUMMARY_FILE).exists()
    kept = done.stat().st_mtime_ns
    proc = snakemake(tmp_path, None, "--configfile", str(tmp_path / "config.yaml"),
                     "--cores", "2", "results/summary.csv")
    assert proc.returncode == 0, proc.stdout
    assert {cell for _, _, cell in planned_cells(proc.stdout)} == {
        victim, "cpu-fp32-resident-b64-r0"}
    assert done.stat().st_mtime_ns == kept


@pytest.mark.slow
def test_two_concurrent_studies_share_the_machine_lock(tmp_path, tiny_mnist):
    """Two Snakemake invocations in different folders, started together, never time cells at
    the same time: the lock file serialises them."""
    lock = tmp_path / "shared.lock"
    procs = []
    for name in ("a", "b"):
        workdir = tmp_path / name
        workdir.mkdir()
        config = tiny_config(tiny_mnist, workdir, lock_file=str(lock))
        config["experiments"]["convergence"]["enabled"] = False
        (workdir / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
        plant_limits(workdir)
        command = [str(SNAKEMAKE), "--snakefile", str(SNAKEFILE), "--directory", str(workdir),
                   "--configfile", str(workdir / "config.yaml"), "--cores", "1",
                   "results/summary.csv"]
        procs.append(subprocess.Popen(command, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    for proc in procs:
        output, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
        assert proc.returncode == 0, output
    cells = [s for name in ("a", "b") for s in summaries(tmp_path / name).values()]
    assert len(cells) == 2
    assert_no_overlap(cells)


@pytest.mark.slow
def test_fetch_rule_fills_data_dir_from_an_offline_mirror(tmp_path, real_mnist_mirror):
    """With data_dir empty, the fetch rule fetches the four verified files from `mirrors`
    (public mirrors off) and logs under results/logs; other mirrors later fetch nothing."""
    dest = tmp_path / "resources" / "mnist"
    config = tiny_config(dest, tmp_path, mirrors=[str(real_mnist_mirror)])
    proc = snakemake(tmp_path, config, "--cores", "1", *(str(dest / n) for n in files.FILES))
    assert proc.returncode == 0, proc.stdout
    for name in files.FILES:
        assert data.md5_file(dest / name) == files.MD5[name]
    for name in files.FILES:  # one job, and one log, per file
        assert (tmp_path / "results" / "logs" / "fetch" / f"{name}.log").is_file()
    assert not (dest / ".fetch").exists()  # nothing left staged
    config["mirrors"] = ["https://mirror.invalid/mnist/"]  # where from is not a rerun trigger
    proc = snakemake(tmp_path, config, "--cores", "1", *(str(dest / n) for n in files.FILES))
    assert proc.returncode == 0 and "Nothing to be done" in proc.stdout, proc.stdout


# --------------------------------------------------------------------------- failures lose nothing
TABLES = ("summary.csv", "epochs.csv", "resources.csv", "columns.csv")


def fake_tiny_study(workdir: Path, env: str = ENV) -> None:
    """Write finished cells of tiny_config's matrix under workdir/results/runs/``env``, as the
    trainer writes them (tests/fakes.py), so the workflow has only the tables to make."""
    make_study(workdir / "results" / "runs", envs=(env,), devices=("cpu",),
               precisions=("fp32",), loaders=("resident",), batch_sizes=(32,), repeats=1)
    plant_limits(workdir, env=env)


def plant_limits(workdir: Path, devices: tuple[str, ...] = ("cpu",), env: str = ENV) -> None:
    """Write the limit records of ``devices`` (status failed, saying why) before a run, so that
    no peak job runs in a test about something else: each costs a torch import and about 3 s
    of timed matmuls (tests/workflow/test_workflow_scale.py runs real ones)."""
    for device in devices:
        steps.write_peak_status(plan.peak_file(str(workdir / "results" / "runs"), env, device),
                                device, "failed", "this test measures no limit")


def data_with_one_file_missing(dest: Path, real_mnist: Path, missing: str) -> dict[str, int]:
    """Copy the verified MNIST files but ``missing`` into ``dest``; return their mtimes (ns)."""
    dest.mkdir(parents=True)
    for name in files.FILES:
        if name != missing:
            shutil.copy2(real_mnist / name, dest / name)
    return {name: (dest / name).stat().st_mtime_ns for name in files.FILES if name != missing}


@pytest.mark.slow
def test_failed_fetch_keeps_the_verified_data_files(tmp_path, real_mnist):
    """A fetch that fails (one file missing, a broken mirror) leaves the three verified files
    in data_dir untouched and logs the error in the missing file's fetch log."""
    dest = tmp_path / "resources" / "mnist"
    missing = "t10k-labels-idx1-ubyte"
    kept = data_with_one_file_missing(dest, real_mnist, missing)
    mirror = tmp_path / "broken-mirror"
    mirror.mkdir()
    (mirror / f"{missing}.gz").write_bytes(b"\x1f\x8bthis is not gzip data")
    config = tiny_config(dest, tmp_path, mirrors=[str(mirror)])
    proc = snakemake(tmp_path, config, "--cores", "2", *(str(dest / n) for n in files.FILES))
    assert proc.returncode != 0, proc.stdout
    assert not (dest / missing).exists()
    assert {name: (dest / name).stat().st_mtime_ns for name in kept} == kept
    for name in kept:
        assert data.md5_file(dest / name) == files.MD5[name]
    assert jobs_of_rule(proc.stdout, "fetch") == 1
    log = (tmp_path / "results" / "logs" / "fetch" / f"{missing}.log").read_text()
    assert "not valid gzip data" in log, log


@pytest.mark.slow
def test_fetch_rule_fetches_only_the_missing_file(tmp_path, real_mnist, real_mnist_mirror):
    """With one MNIST file missing, one fetch job fetches it from the mirror and leaves the
    other three files untouched and no staging folder behind."""
    dest = tmp_path / "resources" / "mnist"
    missing = "train-labels-idx1-ubyte"
    kept = data_with_one_file_missing(dest, real_mnist, missing)
    config = tiny_config(dest, tmp_path, mirrors=[str(real_mnist_mirror)])
    proc = snakemake(tmp_path, config, "--cores", "2", *(str(dest / n) for n in files.FILES))
    assert proc.returncode == 0, proc.stdout
    assert jobs_of_rule(proc.stdout, "fetch") == 1
    assert data.md5_file(dest / missing) == files.MD5[missing]
    assert {name: (dest / name).stat().st_mtime_ns for name in kept} == kept
    assert sorted(p.name for p in dest.iterdir()) == sorted(files.FILES)


@pytest.mark.slow
def test_failed_aggregate_keeps_the_last_good_tables(tmp_path, tiny_mnist):
    """A truncated summary.json copied in from another machine fails the aggregate, the last
    good results/*.csv stay byte for byte, the next run retries it, and a repaired copy merges.
    """
    config = tiny_config(tiny_mnist, tmp_path)
    fake_tiny_study(tmp_path)
    results = tmp_path / "results"
    proc = snakemake(tmp_path, config, "--cores", "1", "results/summary.csv")
    assert proc.returncode == 0, proc.stdout
    assert jobs_of_rule(proc.stdout, "bench") == 0
    assert jobs_of_rule(proc.stdout, "peak") == 0
    # No cell to time: no fork server started (its import of torch would cost seconds).
    assert not (results / "logs" / "forkserver.log").exists()
    good = {name: (results / name).read_bytes() for name in TABLES}
    other = results / "runs" / "other-box"
    fake_tiny_study(tmp_path, env=other.name)
    broken = other / "sweep" / "cpu-fp32-resident-b32-r0" / schema.SUMMARY_FILE
    whole = broken.read_bytes()
    broken.write_bytes(whole[: len(whole) // 2])  # a copy cut short
    proc = snakemake(tmp_path, config, "--cores", "1", "results/summary.csv")
    assert proc.returncode != 0, proc.stdout
    assert jobs_of_rule(proc.stdout, "aggregate") == 1
    assert {name: (results / name).read_bytes() for name in TABLES} == good
    assert "cannot read" in (results / "logs" / "aggregate.log").read_text()
    proc = snakemake(tmp_path, config, "--dry-run", "--cores", "1", "results/summary.csv")
    assert jobs_of_rule(proc.stdout, "aggregate") == 1, proc.stdout  # retried, not forgotten
    broken.write_bytes(whole)
    proc = snakemake(tmp_path, config, "--cores", "1", "results/summary.csv")
    assert proc.returncode == 0, proc.stdout
    envs = list(aggregate.load_tables(results).summary["env"])
    assert envs.count(ENV) == envs.count(other.name) == 2
    proc = snakemake(tmp_path, config, "--dry-run", "--cores", "1", "results/summary.csv")
    assert "Nothing to be done" in proc.stdout, proc.stdout


@pytest.mark.slow
def test_tips_cells_run_with_their_own_settings_over_the_study_wide_ones(tmp_path, tiny_mnist):
    """A tiny tips experiment runs its baseline (the blog's cell: stock code, glibc, no
    workers) and each lever with its own settings, though the study-wide config says
    otherwise; every summary names its tip, and the report renders with a tips section."""
    config = tiny_config(tiny_mnist, tmp_path, workers=1, allocator="glibc-tuned")
    config["experiments"]["convergence"]["enabled"] = False
    config["experiments"]["sweep"]["enabled"] = False
    config["experiments"]["tips"] = {"tips": ["workers=4", "tuned", "allocator"], "repeats": 1,
                                     "max_steps": 2, **TINY_EXPERIMENT}
    plant_limits(tmp_path)
    proc = snakemake(tmp_path, config, "--cores", "2")
    assert proc.returncode == 0, proc.stdout
    cells = {s["params"]["tip"]: s for s in summaries(tmp_path).values()}
    assert set(cells) == {"baseline", "workers=4", "tuned", "allocator"}
    assert all(s["status"] == "ok" for s in cells.values()), {
        t: s["reason"] for t, s in cells.items()}
    base = cells["baseline"]
    assert (base["params"]["implementation"], base["params"]["allocator"],
            base["params"]["workers"], base["params"]["loader"]) == (
        "stock", "glibc", 0, "dataloader")
    assert base["env"]["allocator_loaded"] == "glibc"
    assert cells["workers=4"]["params"]["workers"] == 4
    assert cells["tuned"]["params"]["implementation"] == "tuned"
    assert cells["allocator"]["params"]["allocator"] == "auto"
    # The baseline is the blog's DataLoader: the fork server imported torchvision for it.
    server_log = (tmp_path / "results" / "logs" / "forkserver.log").read_text()
    assert "torchvision.datasets" in server_log, server_log
    html = (tmp_path / "results" / "report" / "index.html").read_text()
    assert "tips pay off" in html and "workers=4" in html
