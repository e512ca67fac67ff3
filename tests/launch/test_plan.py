"""Unit tests of mnistbench.launch.plan, the workflow's planning as plain functions (no
``snakemake`` subprocess): config errors, the allocator check, the environment name, the lock
file check, the software prefix, the jobs' flags, the reproduce command, the fork server's
conditions; SLURM partitions, environments, CPUs (a fake ``sinfo``), resources and the
executor check; the docker runner's images, Dockerfiles, build inputs, engine check and
launcher; the study's devices, matrix and the summaries the aggregate merges. The rule files'
own checks (parse-time imports, planning errors as WorkflowError) are in
tests/launch/test_plan_rules.py.

The wiring of these functions into the rules is tested through real dry runs and runs in
tests/workflow/test_workflow.py, test_slurm.py, test_workflow_docker.py and
tests/launch/test_machinelock.py."""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from mnistbench.core import cpuruntime, provenance, schema, study
from mnistbench.launch import container, machinelock, plan
from mnistbench.launch.plan import PlanError

REPO = Path(__file__).resolve().parents[2]
CONFIG_SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
RULE_FILES = [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]
ENV = "wf-test"
TINY = {"train_limit": 256, "test_limit": 128, "warmup_steps": 1}
#: A cluster of three node types (as tests/workflow/test_slurm.py's dry runs).
NODE_TYPES = {
    "epyc": {"cpus": 2},
    "icelake": {"cpus": 4, "name": "lab-icelake", "constraint": "avx512"},
    "h100": {"cpus": 8, "gpu_model": "h100", "extra": "--qos=short"},
}


def raw_config(**overrides) -> dict:
    """A tiny study config (tests/workflow/test_workflow.py's tiny_config, without files)."""
    config = {
        "env": ENV,
        "default_mirrors": False,
        "devices": ["cpu"],
        "experiments": {
            "convergence": {"loaders": ["resident"], "repeats": 1, "epochs": 1, **TINY},
            "sweep": {"batch_sizes": [32], "precisions": ["fp32"], "loaders": ["resident"],
                      "repeats": 1, "max_steps": 2, **TINY},
            "tips": {"enabled": False},
            "scale": {"enabled": False},  # on in the tests of the scale experiment
            "headline": {"enabled": False},
            "threads": {"enabled": False},
        },
    }
    config.update(overrides)
    return config


def validated(**overrides) -> dict:
    """raw_config(**overrides) validated by Snakemake against the config schema, every key
    left out set to its default (as the workflow sees it); a new dict each call."""
    return copy.deepcopy(_validated(json.dumps(overrides, sort_keys=True)))


@functools.cache
def _validated(overrides: str) -> dict:
    config = raw_config(**json.loads(overrides))
    validate(config, str(CONFIG_SCHEMA))
    return config


def slurm_config(**overrides) -> dict:
    """A validated SLURM study (env empty: folders named slurm-<partition>)."""
    slurm = {"partitions": {"cpu": ["epyc", "icelake"], "cuda": "h100"},
             "node_types": copy.deepcopy(NODE_TYPES)}
    slurm.update(overrides.pop("slurm", {}))
    overrides.setdefault("env", "")
    return validated(executor="slurm", slurm=slurm, **overrides)


def wildcards_of(cell: study.Cell) -> SimpleNamespace:
    """The bench job's wildcards of ``cell``."""
    return SimpleNamespace(env=cell.env, experiment=cell.experiment, cell=cell.id)


def schema_error(config: dict) -> str:
    """The one paragraph the workflow prints for an invalid ``config``."""
    with pytest.raises(WorkflowError) as caught:
        validate(config, str(CONFIG_SCHEMA))
    return plan.config_error(caught.value.__context__, caught.value)


# --------------------------------------------------------------------------- config errors
@pytest.mark.parametrize(
    ("change", "key", "allowed"),
    [
        ({"experiments": {"sweep": {"precisions": ["fp32", "fp64"]}}},
         "experiments.sweep.precisions[1]", "['fp32', 'tf32', 'bf16', 'fp16']"),
        ({"experiments": {"convergence": {"batch_size": -5}}},
         "experiments.convergence.batch_size", "minimum of 1"),
        ({"devices": ["cpu", "tpu"]}, "devices", "cpu, cuda, xpu, mps"),
        ({"cost": {"price_per_kwh": -1}}, "cost.price_per_kwh", "minimum of 0"),
        ({"experiment": {}}, "(top level)", "'experiment' was unexpected"),
        ({"docker": {"images": {"cuda": {"tag": "Not A Tag"}}}}, "docker.images.cuda.tag",
         "does not match"),
        ({"executor": "slurm", "slurm": {"partitions": {"cpu": ["epyc nodes"]}}},
         "slurm.partitions.cpu", "is not valid under any of the given schemas"),
    ],
)
def test_an_invalid_config_is_one_paragraph_naming_the_key(change, key, allowed):
    """A bad config value gives one message naming the key, what is allowed and where to fix
    it (the real run that prints it: tests/workflow/test_workflow.py)."""
    config = raw_config()
    for name, value in change.items():
        if name == "experiments":
            for experiment, values in value.items():
                config["experiments"][experiment].update(values)
        else:
            config[name] = value
    message = schema_error(config)
    assert message.startswith(f"invalid config key {key}:"), message
    assert allowed in message
    assert "config.schema.yaml" in message and "--configfile" in message
    assert "\n" not in message


def test_a_config_error_without_a_schema_error_names_the_cause():
    assert plan.config_error(None, "boom") == "invalid config: boom"


def test_the_allocator_must_be_installed_for_a_local_study_only(monkeypatch):
    """A local study whose allocator is not installed stops naming config key allocator; a
    study run in containers or on a cluster is not checked here."""
    def missing(requested):
        raise cpuruntime.AllocatorError(f"{requested} is not installed")

    monkeypatch.setattr(cpuruntime, "resolve", missing)
    with pytest.raises(PlanError, match=r"^config key allocator: jemalloc is not installed"):
        plan.check_allocator(validated(allocator="jemalloc"))
    plan.check_allocator(validated(allocator="jemalloc", runner="docker"))
    plan.check_allocator(validated(allocator="jemalloc", executor="slurm"))


# --------------------------------------------------------------------------- this machine
def test_a_configured_environment_name_is_used_as_it_is_or_refused(monkeypatch):
    """config env is a folder name used as it is, never renamed (issue 41: '日本語-a' and
    '中文-a' both became 'a', two values one folder): one that is not a plain name ('lab
    box/1', '../x', 'a--b', '-a') is refused by the schema naming the key; runner docker
    without a name is <host>-docker."""
    monkeypatch.delenv("MNISTBENCH_ENV", raising=False)
    assert plan.environment_name(validated(env="lab-box.1_x")) == "lab-box.1_x"
    assert plan.environment_name(validated(env="", runner="docker")) == \
        study.environment_name("", runtime="docker")
    assert study.environment_name("", runtime="docker").endswith("-docker")
    for value in ("lab box/1", "日本語-a", "中文-a", "../x", "a--b", "-a", "a.", "///"):
        config = raw_config()
        config["env"] = value
        message = schema_error(config)
        assert message.startswith("invalid config key env:"), (value, message)
        assert "used as it is, never renamed" in message and "--configfile" in message


def test_the_lock_file_is_checked_and_never_created(tmp_path):
    """An ordinary path is returned and left uncreated; a path under a regular file names
    config key lock_file and the path; a missing flock says how to install it."""
    path = tmp_path / "sub" / "cells.lock"
    assert plan.timing_lock_file(str(path)) == str(path)
    assert not path.parent.exists()
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    with pytest.raises(PlanError) as caught:
        plan.timing_lock_file(str(blocker / "cells.lock"))
    assert str(caught.value).startswith("config key lock_file:")
    assert str(blocker) in str(caught.value)
    with pytest.raises(PlanError, match=r"`flock` command \(util-linux\) is missing"):
        plan.timing_lock_file(str(path), which=lambda name: None)


def test_a_planted_symlink_in_the_temporary_folder_is_refused(tmp_path, monkeypatch):
    """lock_file empty: the default lock in $TMPDIR is a planted symlink; it is refused naming
    config key lock_file, and its target is never created."""
    victim = tmp_path / "victim"
    shared = tmp_path / "tmp"
    shared.mkdir()
    (shared / machinelock.DEFAULT_NAME).symlink_to(victim)
    monkeypatch.setenv("TMPDIR", str(shared))
    monkeypatch.setattr(tempfile, "tempdir", None)
    with pytest.raises(PlanError) as caught:
        plan.timing_lock_file("")
    assert "config key lock_file" in str(caught.value)
    assert "symbolic link" in str(caught.value)
    assert not victim.exists()


def test_workflow_digest_is_the_bench_rules_digest():
    text = (REPO / provenance.BENCH_RULES).read_text(encoding="utf-8")
    assert plan.workflow_digest(REPO) == provenance.workflow_digest(text)


def shell_of(prefix: str, command: str, env: dict | None = None) -> str:
    """stdout of ``command`` after ``prefix`` as Snakemake formats it (doubled braces)."""
    line = f"set -euo pipefail; {prefix.format()} {command}"
    proc = subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=env,
                          timeout=30, check=True)
    return proc.stdout


def test_software_prefix_finds_mnistbench_next_to_snakemake_else_on_path(tmp_path):
    """The console script next to the Python running Snakemake goes first on PATH (but inside
    an Apptainer container); one on PATH is used as it is; without either there is none."""
    bindir = tmp_path / "venv bin"
    bindir.mkdir()
    (bindir / "mnistbench").write_text("#!/bin/sh\necho venv mnistbench\n")
    (bindir / "mnistbench").chmod(0o755)
    python = str(bindir / "python")
    prefix = plan.software_prefix(REPO, conda=False, executable=python)
    env = dict(os.environ, PATH="/usr/bin:/bin")
    env.pop("APPTAINER_CONTAINER", None)
    assert shell_of(prefix, "mnistbench", env) == "venv mnistbench\n"
    inside = shell_of(prefix, 'echo "$PATH"', dict(env, APPTAINER_CONTAINER="/img.sif"))
    assert inside == "/usr/bin:/bin\n"
    elsewhere = str(tmp_path / "python")
    assert plan.software_prefix(REPO, conda=False, executable=elsewhere,
                                which=lambda name: "/opt/bin/mnistbench") == ""
    assert plan.software_prefix(REPO, conda=False, executable=elsewhere,
                                which=lambda name: None) is None
    message = plan.missing_software(elsewhere)
    assert elsewhere in message and "scripts/setup" in message and "--sdm conda" in message


def test_software_prefix_under_conda_runs_the_checkouts_package():
    """--sdm conda: PYTHONPATH starts with the checkout's src/, kept after it, and mnistbench
    is `python -m mnistbench.console`."""
    prefix = plan.software_prefix(REPO, conda=True)
    env = dict(os.environ, PYTHONPATH="/elsewhere")
    out = shell_of(prefix, 'echo "$PYTHONPATH"; type mnistbench', env)
    assert out.startswith(f"{REPO / 'src'}:/elsewhere\n")
    assert "python -m mnistbench.console" in out


def test_flags_of_pin_memory_and_mirrors():
    assert plan.pin_memory_flag(True) == "--pin-memory"
    assert plan.pin_memory_flag(False) == "--no-pin-memory"
    assert plan.mirror_flags(["/a b", "https://m/"], True) == "--mirror '/a b' --mirror https://m/"
    assert plan.mirror_flags([], False) == "--no-default-mirrors"


def test_reproduce_command_names_the_extra_configfiles_and_overrides():
    assert plan.reproduce_command([], None, on_slurm=False) == "snakemake --cores all"
    assert plan.reproduce_command(["config/config.yaml", "config/quick.yaml"],
                                  {"seed": 3, "env": "a b"}, on_slurm=False) == (
        "snakemake --cores all --configfile config/quick.yaml --config seed=3 'env=a b'")
    assert plan.reproduce_command(["./config/config.yaml"], {"executor": "slurm"},
                                  on_slurm=True) == "snakemake --profile profiles/slurm"
    assert plan.reproduce_command([], {"executor": "slurm", "seed": 1}, on_slurm=True) == (
        "snakemake --profile profiles/slurm --config executor=slurm seed=1")


def test_the_fork_server_serves_local_cells_only():
    config = validated()
    assert plan.wants_fork_server(config, local_exec=True, conda=False)
    assert not plan.wants_fork_server(config, local_exec=False, conda=False)
    assert not plan.wants_fork_server(config, local_exec=True, conda=True)
    assert not plan.wants_fork_server(validated(runner="docker"), local_exec=True, conda=False)
    assert not plan.wants_fork_server(validated(fork_server=False), True, False)
    env = plan.cell_environment({"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "HOME": "/h"})
    assert env == {"HOME": "/h"}


# --------------------------------------------------------------------------- SLURM
def test_slurm_partitions_node_types_and_environments():
    """A device's partitions (a name or a list; none: the default partition), each filed
    under slurm-<partition> or its node type's name."""
    config = slurm_config()
    slurm = config["slurm"]
    assert plan.slurm_partitions(slurm, "cpu") == ["epyc", "icelake"]
    assert plan.slurm_partitions(slurm, "cuda") == ["h100"]
    assert plan.slurm_partitions(validated()["slurm"], "cpu") == [""]
    assert plan.slurm_node_type(slurm, "h100")["gpu_model"] == "h100"
    assert plan.slurm_node_type(slurm, "nowhere") == {}
    assert plan.slurm_cell_envs(config, "cpu") == [("slurm-epyc", "epyc"),
                                                   ("lab-icelake", "icelake")]
    assert plan.slurm_env_name(slurm_config(env="lab"), "") == "lab-default"
    assert plan.slurm_container(config) is None
    assert plan.slurm_container(slurm_config(slurm={"container": "img.sif"})) == "img.sif"
    assert plan.slurm_container(validated(slurm={"container": "img.sif"})) is None


def test_two_partitions_with_one_environment_name_are_a_config_error():
    config = slurm_config(slurm={"node_types": {"icelake": {"name": "slurm-epyc"}}})
    with pytest.raises(PlanError) as caught:
        plan.check_slurm_env_names(config, ["cpu"])
    assert "partitions 'epyc' and 'icelake' both name the environment 'slurm-epyc'" in \
        str(caught.value)
    plan.check_slurm_env_names(slurm_config(), ["cpu", "cuda"])


def test_a_node_type_name_without_a_usable_character_is_a_config_error():
    config = slurm_config(slurm={"node_types": {"epyc": {"name": "///"}}})
    with pytest.raises(PlanError, match=r"invalid config key slurm\.node_types\.epyc\.name"):
        plan.slurm_cell_envs(config, "cpu")


SINFO = "main* 16\nmain* 12\nbig 64\n"


def test_cpus_per_cell_come_from_sinfo_unless_configured():
    """Without slurm.node_types.<p>.cpus a cell asks for every CPU of the smallest node of its
    partition (sinfo), the default partition's when none is named; config threads > 0 wins,
    and a node type's cpus win over both."""
    assert plan.slurm_node_cpus("", sinfo=lambda: SINFO) == 12
    assert plan.slurm_node_cpus("big", sinfo=lambda: SINFO) == 64
    config = slurm_config(slurm={"partitions": {"cpu": ["", "big"]}, "node_types": {}})
    node_cpus = {"": 12, "big": 64}.get
    assert plan.slurm_cpus(config, "big", node_cpus) == 64
    config["threads"] = 3
    assert plan.slurm_cpus(config, "big", node_cpus) == 3
    assert plan.slurm_cpus(slurm_config(threads=3), "h100", node_cpus) == 8


def test_sinfo_that_fails_or_lists_no_node_names_the_key_to_set():
    with pytest.raises(PlanError, match=r"sinfo lists no node of partition gpu"):
        plan.slurm_node_cpus("gpu", sinfo=lambda: SINFO)

    def broken():
        raise FileNotFoundError("sinfo")

    with pytest.raises(PlanError) as caught:
        plan.slurm_node_cpus("big", sinfo=broken)
    assert "failed" in str(caught.value) and "Set slurm.node_types.big.cpus" in str(caught.value)


def test_run_sinfo_lists_partitions_and_cpus_of_every_node(tmp_path, monkeypatch):
    """The real runner, with a fake sinfo on PATH that checks its arguments."""
    fake = tmp_path / "sinfo"
    fake.write_text('#!/bin/sh\n[ "$*" = "--noheader --Node --format=%P %c" ] || exit 3\n'
                    f"cat <<'EOF'\n{SINFO}EOF\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert plan.run_sinfo() == SINFO
    assert plan.slurm_node_cpus("") == 12


def test_slurm_resources_of_every_cell():
    """Per cell: its partition, CPUs, a GPU for cuda cells (with its model), the node type's
    constraint and extra flags, memory, wall time, account and an exclusive node."""
    config = slurm_config(devices=["cpu", "cuda"],
                          slurm={"mem_mb": 3000, "runtime": 15, "account": "lab"})
    matrix = plan.Matrix.of_config(config, "unused", ["cpu", "cuda"], cores=2)
    assert {c.env for c in matrix.cells} == {"slurm-epyc", "lab-icelake", "slurm-h100"}
    resources = plan.slurm_resources(config, lambda w: matrix.cell(w.env, w.experiment, w.cell),
                                     node_cpus=lambda partition: pytest.fail("no sinfo"))
    expected = {
        "slurm-epyc": {"slurm_partition": "epyc", "cpus_per_task": 2, "gpu": 0,
                       "gpu_model": None, "constraint": None, "slurm_extra": "--exclusive"},
        "lab-icelake": {"slurm_partition": "icelake", "cpus_per_task": 4, "gpu": 0,
                        "gpu_model": None, "constraint": "avx512",
                        "slurm_extra": "--exclusive"},
        "slurm-h100": {"slurm_partition": "h100", "cpus_per_task": 8, "gpu": 1,
                       "gpu_model": "h100", "constraint": None,
                       "slurm_extra": "--exclusive --qos=short"},
    }
    for cell in matrix.cells:
        got = {key: value(wildcards_of(cell)) if callable(value) else value
               for key, value in resources.items()}
        assert got == {**expected[cell.env], "mem_mb": 3000, "runtime": 15,
                       "slurm_account": "lab"}, cell.key


def test_slurm_resources_on_the_default_partition_without_exclusive_nodes():
    config = slurm_config(slurm={"exclusive": False, "partitions": {"cpu": ""},
                                 "node_types": {}})
    matrix = plan.Matrix.of_config(config, "unused", ["cpu"], cores=2)
    resources = plan.slurm_resources(config, lambda w: matrix.cell(w.env, w.experiment, w.cell),
                                     node_cpus={"": 6}.get)
    assert "slurm_account" not in resources
    wildcards = wildcards_of(matrix.cells[0])
    assert matrix.cells[0].env == "slurm-default"
    assert resources["slurm_partition"](wildcards) is None  # the cluster's default
    assert resources["cpus_per_task"](wildcards) == 6
    assert resources["slurm_extra"](wildcards) is None


def test_a_local_study_asks_for_no_slurm_resources():
    """With the default executor there is no SLURM resource, whatever the slurm section says,
    and the cells keep this environment's name."""
    config = validated(slurm={"partitions": {"cpu": ["epyc", "icelake"]},
                              "node_types": NODE_TYPES})
    assert plan.slurm_resources(config, lambda w: pytest.fail("no cell")) == {}
    assert plan.study_envs(config, ENV, ["cpu", "cuda"]) == [ENV]
    assert plan.cell_envs(config, ENV, "cpu") == [(ENV, None)]


@pytest.mark.parametrize(
    ("running", "on_slurm", "message"),
    [("local", True, "config executor is slurm, but Snakemake runs with the local executor"),
     ("slurm", False, "Snakemake runs with the slurm executor, but config executor is local")])
def test_executor_and_config_that_disagree_are_refused(running, on_slurm, message):
    with pytest.raises(PlanError, match=re.escape(message)):
        plan.check_executor(running, on_slurm)


@pytest.mark.parametrize(("running", "on_slurm"), [("local", False), ("slurm", True),
                                                   ("dryrun", True), ("touch", False)])
def test_executor_and_config_that_agree_pass(running, on_slurm):
    plan.check_executor(running, on_slurm)


# --------------------------------------------------------------------------- docker runner
def test_the_docker_runner_refuses_devices_without_an_image():
    config = validated(runner="docker")
    with pytest.raises(PlanError) as caught:
        plan.check_docker_devices(config, ["cpu", "xpu"])
    assert "has images for cpu, cuda cells only, not for xpu" in str(caught.value)
    plan.check_docker_devices(config, ["cpu", "cuda"])
    plan.check_docker_devices(validated(), ["xpu", "mps"])  # runner local: no image needed


def test_image_dockerfile_is_absolute_and_a_missing_one_names_the_key():
    config = validated(runner="docker")
    assert plan.image_dockerfile(REPO, config, "cuda") == str(REPO / "docker/cuda.Dockerfile")
    config["docker"]["images"]["cuda"]["dockerfile"] = "docker/none.Dockerfile"
    with pytest.raises(PlanError, match=r"^config key docker\.images\.cuda\.dockerfile: "):
        plan.image_dockerfile(REPO, config, "cuda")


def test_image_sources_are_the_pins_the_entrypoint_and_the_package(tmp_path):
    """An image is rebuilt for its dependencies, entrypoint, context filter and package
    sources, never for compiled files, egg-info, the workflow or the config."""
    for name in ("pyproject.toml", ".dockerignore", "docker/entrypoint.sh", "envs/pip/base.txt",
                 "envs/pip/torch.txt", "src/mnistbench/core/study.py",
                 "src/mnistbench/report/templates/report.html.j2",
                 "src/mnistbench/__pycache__/x.cpython-311.pyc", "src/mnistbench/core/y.pyc",
                 "src/mnistbench.egg-info/PKG-INFO", "workflow/rules/bench.smk",
                 "config/config.yaml", "README.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert plan.image_sources(tmp_path) == [str(tmp_path / n) for n in (
        "pyproject.toml", ".dockerignore", "docker/entrypoint.sh", "envs/pip/base.txt",
        "envs/pip/torch.txt", "src/mnistbench/core/study.py",
        "src/mnistbench/report/templates/report.html.j2")]
    real = plan.image_sources(REPO)
    assert str(REPO / "src" / "mnistbench" / "launch" / "plan.py") in real
    assert not [p for p in real if "/workflow/" in p or "/config/" in p]


def test_a_docker_engine_that_does_not_answer_names_the_runner_and_the_fix(tmp_path,
                                                                           monkeypatch):
    """A missing docker command and a stopped daemon (a fake docker on PATH) stop the run
    naming config key runner, how to get an engine, and runner: local."""
    assert plan.docker_engine_version(lambda: "27.5.1") == "27.5.1"

    def missing():
        raise container.ContainerError("the `docker` command is not on PATH.")

    with pytest.raises(PlanError) as caught:
        plan.docker_engine_version(missing)
    assert str(caught.value) == ("config key runner is docker, but the `docker` command is "
                                 "not on PATH. Or set runner: local (the default).")
    fake = tmp_path / "docker"
    fake.write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon at "
                    "unix:///var/run/docker.sock.' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(PlanError) as caught:
        plan.docker_engine_version()
    message = str(caught.value)
    assert message.startswith("config key runner is docker, but")
    assert "Cannot connect to the Docker daemon" in message
    assert "systemctl start docker" in message and "runner: local" in message


def test_launchers_of_the_runners():
    """runner local: mnistbench; runner docker: `mnistbench docker run` with the record of
    the cell's device, the results folder, /dev/shm and the run options, then `--`; the
    schema allows exactly the runners there are."""
    config = validated(devices=["cuda"], docker={"shm_size": "1g",
                                                 "run_options": ["--cpuset-cpus", "0 1"]})
    cell = plan.Matrix.of_config(config, ENV, ["cuda"], cores=2).cells[0]
    assert plan.cell_launcher(config, cell, "results") == "mnistbench"
    config["runner"] = "docker"
    assert plan.cell_launcher(config, cell, "results") == (
        "mnistbench docker run --record results/images/cuda.json --results results "
        "--shm-size 1g --docker-option=--cpuset-cpus '--docker-option=0 1' --")
    assert plan.image_record("results", "cpu") == "results/images/cpu.json"
    runners = yaml.safe_load(CONFIG_SCHEMA.read_text())["properties"]["runner"]["enum"]
    assert set(runners) == set(plan.RUNNERS)


# --------------------------------------------------------------------------- the matrix
def test_study_devices_as_listed_or_what_auto_finds():
    """Listed devices as they are; auto: what the machine shows; under SLURM: cpu, plus cuda
    exactly when slurm.partitions.cuda names a partition (the host's own GPUs do not count)."""
    assert plan.study_devices(validated(devices=["cuda", "cpu"])) == ["cuda", "cpu"]
    auto = validated(devices="auto")
    assert plan.study_devices(auto, visible=lambda: ["cpu", "xpu"]) == ["cpu", "xpu"]
    assert plan.study_devices(slurm_config(devices="auto"),
                              visible=lambda: ["cpu"]) == ["cpu", "cuda"]
    no_gpus = slurm_config(devices="auto", slurm={"partitions": {"cpu": "epyc", "cuda": []}})
    assert plan.study_devices(no_gpus, visible=lambda: ["cpu", "cuda"]) == ["cpu"]


def test_devices_auto_without_a_visible_gpu_plans_no_cuda_cells(monkeypatch):
    """devices: auto with CUDA_VISIBLE_DEVICES="" and HIP_VISIBLE_DEVICES="" (the real
    discovery, mnistbench.core.devices) plans cpu cells and no cuda cells."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "")
    config = validated(devices="auto")
    found = plan.study_devices(config)
    assert "cpu" in found and "cuda" not in found
    matrix = plan.Matrix.of_config(config, ENV, found, cores=2)
    assert "cuda" not in {c.device for c in matrix.cells}


def test_the_matrix_plans_every_cell_once_in_run_order():
    """Two devices, two repeats, two batch sizes and two precisions: tf32 is left out on cpu,
    repeat r runs with seed + r, repeat 0 of everything comes first (highest priority), and
    each cell's summary lies in its folder."""
    config = validated(devices=["cpu", "cuda"], seed=7)
    config["experiments"]["convergence"]["repeats"] = 2
    config["experiments"]["sweep"].update(batch_sizes=[32, 256], precisions=["fp32", "tf32"])
    matrix = plan.Matrix.of_config(config, ENV, ["cpu", "cuda"], cores=2)
    assert {(c.experiment, c.id) for c in matrix.cells} == {
        ("convergence", "cpu-fp32-resident-b128-r0"), ("convergence", "cuda-fp32-resident-b128-r0"),
        ("convergence", "cpu-fp32-resident-b128-r1"), ("convergence", "cuda-fp32-resident-b128-r1"),
        ("sweep", "cpu-fp32-resident-b32-r0"), ("sweep", "cpu-fp32-resident-b256-r0"),
        ("sweep", "cuda-fp32-resident-b32-r0"), ("sweep", "cuda-fp32-resident-b256-r0"),
        ("sweep", "cuda-tf32-resident-b32-r0"), ("sweep", "cuda-tf32-resident-b256-r0"),
    }
    assert len(matrix) == 10
    assert [c.repeat for c in matrix.cells] == [0] * 8 + [1] * 2
    priorities = [matrix.priority(*c.key) for c in matrix.cells]
    assert priorities == list(range(10, 0, -1))
    args = matrix.cell(ENV, "convergence", "cpu-fp32-resident-b128-r1").train_args()
    assert args[args.index("--seed") + 1] == "8"  # repeat r runs with seed + r
    assert args[args.index("--repeat") + 1] == "1"
    assert matrix.summaries("results/runs")[0] == (
        f"results/runs/{ENV}/convergence/cpu-fp32-resident-b128-r0/{schema.SUMMARY_FILE}")


def test_xpu_and_mps_cells_have_their_precisions():
    """devices [xpu, mps]: fp32, bf16 and fp16 each, tf32 left out (a CUDA switch only)."""
    config = validated(devices=["xpu", "mps"])
    config["experiments"]["sweep"]["precisions"] = ["fp32", "tf32", "bf16", "fp16"]
    matrix = plan.Matrix.of_config(config, ENV, ["xpu", "mps"], cores=2)
    assert {c.id for c in matrix.cells if c.experiment == "sweep"} == {
        f"{d}-{p}-resident-b32-r0" for d in ("xpu", "mps") for p in ("fp32", "bf16", "fp16")}
    args = matrix.cell(ENV, "sweep", "xpu-bf16-resident-b32-r0").train_args()
    assert args[:4] == ["--device", "xpu", "--precision", "bf16"]


def test_a_cell_outside_the_matrix_names_the_config_keys():
    matrix = plan.Matrix.of_config(validated(), ENV, ["cpu"], cores=2)
    with pytest.raises(PlanError) as caught:
        matrix.cell(ENV, "sweep", "cpu-fp32-resident-b64-r0")
    message = str(caught.value)
    assert "cell cpu-fp32-resident-b64-r0 of experiment sweep" in message
    assert "(2 cells from the config)" in message and "experiments.*" in message


def test_scale_cells_carry_their_width_and_accelerators_time_the_wider_ones():
    """The scale experiment on cpu and cuda: widths 1, 2, 4 everywhere, 8 on the GPU too, at
    every precision the device runs; ids carry the width, flags pass it."""
    config = validated(devices=["cpu", "cuda"],
                       experiments={**raw_config()["experiments"],
                                    "scale": {"repeats": 1, "precisions": ["fp32", "fp16"]}})
    matrix = plan.Matrix.of_config(config, ENV, ["cpu", "cuda"], cores=2)
    scale = [c for c in matrix.cells if c.experiment == "scale"]
    assert [c.id for c in scale] == [
        *(f"cpu-fp32-resident-b128-x{w}-r0" for w in (1, 2, 4)),
        *(f"cuda-{p}-resident-b128-x{w}-r0" for p in ("fp32", "fp16") for w in (1, 2, 4, 8))]
    args = matrix.cell(ENV, "scale", "cuda-fp16-resident-b128-x8-r0").train_args()
    assert args[args.index("--width") + 1] == "8"
    assert args[args.index("--implementation") + 1] == "tuned"
    assert "--width" not in matrix.cells[0].train_args()  # the other cells' flags as they were


# --------------------------------------------------------------------------- the peak step
def test_the_peak_step_measures_each_environment_and_device_at_the_cells_precisions():
    """One limit per (env, device) with cells, in matrix order, at the precisions its cells
    train at (in the order of PRECISIONS), where its first cell runs."""
    config = validated(devices=["cpu", "cuda"])
    config["experiments"]["sweep"]["precisions"] = ["bf16", "tf32", "fp32"]
    matrix = plan.Matrix.of_config(config, ENV, ["cpu", "cuda"], cores=2)
    assert matrix.peaks() == [(ENV, "cpu"), (ENV, "cuda")]
    assert matrix.peak_precisions(ENV, "cpu") == ["fp32", "bf16"]  # tf32: no cpu cell
    assert matrix.peak_precisions(ENV, "cuda") == ["fp32", "tf32", "bf16"]
    assert matrix.peak_files("results/runs") == [
        f"results/runs/{ENV}/peak/cpu.json", f"results/runs/{ENV}/peak/cuda.json"]
    assert matrix.peak_cell(ENV, "cuda") == next(c for c in matrix.cells if c.device == "cuda")
    assert plan.peak_precision_flags(["fp32", "bf16"]) == "--precision fp32 --precision bf16"
    with pytest.raises(PlanError, match=r"no xpu cell in environment wf-test"):
        matrix.peak_cell(ENV, "xpu")


def test_a_peak_job_runs_where_its_device_cells_run():
    """runner docker: in the device's image, as its cells; SLURM: one limit per partition's
    environment, on that partition, with a GPU for cuda."""
    config = validated(devices=["cuda"], runner="docker")
    matrix = plan.Matrix.of_config(config, ENV, ["cuda"], cores=2)
    launcher = plan.cell_launcher(config, matrix.peak_cell(ENV, "cuda"), "results")
    assert launcher.startswith("mnistbench docker run --record results/images/cuda.json")
    slurm = slurm_config(devices=["cpu", "cuda"])
    envs = plan.study_envs(slurm, ENV, ["cpu", "cuda"])
    matrix = plan.Matrix.of_config(slurm, ENV, ["cpu", "cuda"], cores=2)
    assert sorted(matrix.peaks()) == sorted(
        [("slurm-epyc", "cpu"), ("lab-icelake", "cpu"), ("slurm-h100", "cuda")])
    assert sorted({env for env, _ in matrix.peaks()}) == envs

    def peak_of(wildcards):
        return matrix.peak_cell(wildcards.env, wildcards.device)

    resources = plan.slurm_resources(slurm, peak_of, node_cpus=lambda partition: 64)
    h100 = SimpleNamespace(env="slurm-h100", device="cuda")
    icelake = SimpleNamespace(env="lab-icelake", device="cpu")
    assert (resources["slurm_partition"](h100), resources["gpu"](h100),
            resources["gpu_model"](h100)) == ("h100", 1, "h100")
    assert (resources["slurm_partition"](icelake), resources["gpu"](icelake),
            resources["cpus_per_task"](icelake), resources["constraint"](icelake)) == (
        "icelake", 0, 4, "avx512")


def test_other_peaks_are_those_of_other_environments(tmp_path):
    runs = tmp_path / "runs"
    for env in (ENV, "other-box", ".staging", "a b"):
        (runs / env / "peak").mkdir(parents=True)
        (runs / env / "peak" / "cpu.json").write_text("{}")
    (runs / "other-box" / "peak" / "notes.json").write_text("{}")
    assert plan.other_peaks(runs, [ENV]) == [str(runs / "other-box" / "peak" / "cpu.json")]
    assert plan.other_peaks(tmp_path / "none", [ENV]) == []


def make_summary(runs: Path, env: str) -> Path:
    path = runs / env / "sweep" / "cpu-fp32-resident-b32-r0" / schema.SUMMARY_FILE
    path.parent.mkdir(parents=True)
    path.write_text("{}")
    return path


def test_other_summaries_are_those_of_other_environments(tmp_path):
    """The aggregate merges other machines' cells copied into results/runs, never this
    study's own (its matrix lists them) nor a hidden folder's."""
    runs = tmp_path / "runs"
    make_summary(runs, ENV)
    make_summary(runs, ".staging")
    other = make_summary(runs, "other-box-docker")
    assert plan.other_summaries(runs, [ENV]) == [str(other)]
    assert plan.other_summaries(tmp_path / "none", [ENV]) == []


@pytest.mark.parametrize("folder", ["lab{gpu}", "a b"])
def test_a_copied_environment_folder_with_unsafe_characters_names_the_fix(tmp_path, folder):
    runs = tmp_path / "runs"
    make_summary(runs, folder)
    with pytest.raises(PlanError) as caught:
        plan.other_summaries(runs, [ENV])
    message = str(caught.value)
    assert message.startswith(f"{runs / folder}: an environment folder")
    assert "Rename it" in message and repr(study.safe_name(folder)) in message
