# What needs Snakemake itself: the validated config, where things go, this environment's name,
# the lock of timed cells, the shell prefix, the reproduce command and the execution hooks. The
# study as data (cells, ids, environment names) is mnistbench.core.study; the matrix is built in
# bench.smk, SLURM in slurm.smk, the docker runner in docker.smk. Everything here runs once,
# when Snakemake builds the DAG, and must stay fast (no torch import): a 500-cell study builds
# in well under 10 s (benchmarks/bench_dag.py).

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.settings.types import DeploymentMethod
from snakemake.utils import validate

from mnistbench.core import cpuruntime, devices, provenance, schema, study
from mnistbench.core.atomic import write_json, write_text
from mnistbench.core.devices import DEVICES
from mnistbench.data import files
from mnistbench.launch import forkserver, machinelock
from mnistbench.results import cost

CONFIG_SCHEMA = "../schemas/config.schema.yaml"


def config_error(exc):
    """One paragraph naming the bad config key, the value, what is allowed and the fix."""
    error = exc.__context__
    if not hasattr(error, "absolute_path"):
        return f"invalid config: {exc}"
    key = ""
    for part in error.absolute_path:
        key += f"[{part}]" if isinstance(part, int) else f".{part}"
    key = key.lstrip(".") or "(top level)"
    expected = (
        error.schema.get("description", "") if isinstance(error.schema, dict) else ""
    )
    if error.validator == "anyOf":  # devices: "auto" or a list
        expected += f" Allowed devices: {', '.join(DEVICES)}"
    expected = f" Expected: {expected.strip().rstrip('.')}." if expected else ""
    return (
        f"invalid config key {key}: {error.message}.{expected} Fix it in config/config.yaml, "
        "the file given with --configfile or the --config override; "
        "workflow/schemas/config.schema.yaml describes every key."
    )


try:
    validate(config, schema=CONFIG_SCHEMA)  # the cost model too: cost_model.schema.yaml
except WorkflowError as exc:
    raise WorkflowError(config_error(exc)) from None
if config["executor"] == "local" and config["runner"] == "local":
    try:  # a library allocator must be installed here (on a cluster: on its nodes)
        cpuruntime.resolve(config["allocator"])
    except cpuruntime.AllocatorError as exc:
        raise WorkflowError(f"config key allocator: {exc}") from None


# ---------------------------------------------------------------------------------------
# Where things go. Downloads under resources/, everything derived under results/.
RESULTS = "results"
RUNS = f"{RESULTS}/runs"
EXPERIMENTS = study.EXPERIMENTS
DATA_DIR = os.path.normpath(config["data_dir"])
DATA_FILES = [os.path.join(DATA_DIR, name) for name in files.FILES]
MACHINE_CORES = os.cpu_count() or 1


def environment_name():
    """config `env`, else $MNISTBENCH_ENV, else host name + runtime (mnistbench.core.study); with
    runner docker the cells' runtime, <host>-docker, not this process's."""
    runtime = "docker" if config["runner"] == "docker" else None
    try:
        return study.environment_name(config["env"], runtime=runtime)
    except study.StudyError as exc:
        raise WorkflowError(str(exc)) from None


ENV = environment_name()


# ---------------------------------------------------------------------------------------
# The machine-wide lock of timed cells (see bench.smk for how cells are kept apart).
def timing_lock_file():
    """The machine-wide lock file of timed cells (config lock_file, else one in the temporary
    folder), checked without creating anything, so a dry run leaves no trace: the bench job
    creates it safely (`mnistbench lock-file`, mnistbench.launch.machinelock) just before its cell.
    """
    path = machinelock.resolve(config["lock_file"])
    if shutil.which("flock") is None:
        raise WorkflowError(
            "the `flock` command (util-linux) is missing; the workflow uses it so that no two "
            "timed cells run at once. Install util-linux (apt-get install util-linux)."
        )
    try:
        machinelock.check(path)
    except machinelock.LockFileError as exc:
        raise WorkflowError(f"config key lock_file: {exc}") from None
    return str(path)


TIMING_LOCK = timing_lock_file()
# The digest of the bench rule's lines, which shape every timed cell: each cell records it
# (env.workflow_digest) and `mnistbench publish` compares it with the checkout's.
WORKFLOW_DIGEST = provenance.workflow_digest(
    Path(workflow.basedir, provenance.BENCH_RULES).read_text(encoding="utf-8")
)


def software_prefix():
    """Shell lines that make `mnistbench` the command of this project in every rule."""
    if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
        # The conda env (envs/conda.yaml) holds the dependencies; the package is this checkout.
        src = shlex.quote(str(Path(workflow.basedir, "src").resolve()))
        return (
            # (Snakemake formats the prefix like a shell command: literal braces are doubled.)
            f"export PYTHONPATH={src}${{{{PYTHONPATH:+:$PYTHONPATH}}}}; "
            'mnistbench() {{ python -m mnistbench.console "$@"; }}; '
        )
    # The console script next to the Python running Snakemake (.venv/bin), else on PATH.
    # Not inside an Apptainer container (slurm.container): there the image's own mnistbench.
    bindir = Path(sys.executable).parent
    if (bindir / "mnistbench").exists():
        return (
            # (Snakemake formats the prefix: literal braces are doubled.)
            '[ -n "${{APPTAINER_CONTAINER:-}}" ] || '
            f'export PATH={shlex.quote(str(bindir))}:"$PATH"; '
        )
    if shutil.which("mnistbench"):
        return ""
    raise WorkflowError(
        "the mnistbench command is not installed next to this Snakemake "
        f"({sys.executable}) nor on PATH. Run scripts/setup and start the workflow with "
        ".venv/bin/snakemake (or activate .venv)."
    )


shell.prefix(f"set -euo pipefail; {software_prefix()}")


def pin_memory_flag():
    return "--pin-memory" if config["pin_memory"] else "--no-pin-memory"


def mirror_flags():
    flags = [f"--mirror {shlex.quote(m)}" for m in config["mirrors"]]
    if not config["default_mirrors"]:
        flags.append("--no-default-mirrors")
    return " ".join(flags)


# ---------------------------------------------------------------------------------------
# Report helpers.
def reproduce_command():
    """The command that reproduces this study, shown in the report's methodology."""
    parts = ["snakemake", "--cores", "all"]
    if ON_SLURM:
        parts = ["snakemake", "--profile", "profiles/slurm"]
    for path in workflow.config_settings.configfiles or []:
        if os.path.normpath(str(path)) != os.path.normpath("config/config.yaml"):
            parts += ["--configfile", str(path)]
    overrides = workflow.config_settings.config or {}
    if ON_SLURM and overrides == {"executor": "slurm"}:  # the profile's own
        overrides = {}
    if overrides:
        parts.append("--config")
        parts += [f"{key}={value}" for key, value in overrides.items()]
    return shlex.join(parts)


def write_cost_model(path, model, log):
    """Write config `cost`, every key left out set to its default, as the JSON cost model
    `mnistbench report --cost-model` reads (the schema has validated it already)."""
    write_json(path, cost.resolve(model, source="config key cost"))
    write_text(log, f"wrote {path} from config key cost ({len(model)} keys given)\n")


# ---------------------------------------------------------------------------------------
# Hooks of one execution, run by the main Snakemake process only (never on a dry run, never
# inside a cluster job): each section of the workflow appends its functions here.
START_HOOKS = []  # called, in order, when the jobs are about to start
STOP_HOOKS = []  # called, in reverse order, when the execution ends (success or error)


# Fork server (config fork_server; mnistbench.launch.forkserver): the timed cells of a local
# execution start by forking a process that has already imported torch, ~0.1 s instead of
# 3-5 s per cell on a 2-core machine. Each cell is still its own process (env.launch records
# fork-server). Not for cluster jobs, containers or conda environments: they start their own
# interpreters. The server ends with this Snakemake process.
FORK_SERVER = {}


def start_fork_server():
    deployment = workflow.deployment_settings.deployment_method
    if not (
        config["fork_server"]
        and config["runner"] == "local"
        and workflow.local_exec
        and DeploymentMethod.CONDA not in deployment
    ):
        return
    log = Path(RESULTS, "logs", "forkserver.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    # The server loads torch under the environment of the cells (the bench rule unsets these),
    # with the study's allocator preloaded, as a cell's own process has it (cpuruntime): a
    # cell asking for another allocator differs in LD_PRELOAD and runs as a new process.
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    handle = forkserver.spawn(
        python=sys.executable, log=log, env=env, allocator=config["allocator"]
    )
    FORK_SERVER["handle"] = handle
    os.environ.update(handle.environment())  # inherited by every job of this execution


def stop_fork_server():
    handle = FORK_SERVER.pop("handle", None)
    if handle is not None:
        handle.stop()
        for name in handle.environment():
            os.environ.pop(name, None)


START_HOOKS.append(start_fork_server)
STOP_HOOKS.append(stop_fork_server)


onstart:
    for hook in START_HOOKS:
        hook()


onsuccess:
    for hook in reversed(STOP_HOOKS):
        hook()


onerror:
    for hook in reversed(STOP_HOOKS):
        hook()
