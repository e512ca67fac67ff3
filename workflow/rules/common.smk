# What needs Snakemake itself: the validated config, where things go, this environment's name,
# the lock of timed cells, the shell prefix, the reproduce command and the execution hooks. The
# planning itself is mnistbench.launch.plan (plain functions of the config, unit-tested in
# tests/launch/test_plan.py); the study as data (cells, ids, environment names) is
# mnistbench.core.study. Everything here runs once, when Snakemake builds the DAG, imports
# the standard library only (no numpy, no torch: Snakemake alone parses the workflow) and must
# stay fast: a 500-cell study builds in well under 10 s (benchmarks/bench_dag.py).

import json
import os
import re
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.settings.types import DeploymentMethod
from snakemake.utils import validate

from mnistbench.core import schema, study, untrusted
from mnistbench.core.atomic import write_json, write_text
from mnistbench.core.devices import DEVICES
from mnistbench.data import files
from mnistbench.launch import forkserver, plan
from mnistbench.launch.plan import THREAD_VARIABLES

CONFIG_SCHEMA = "../schemas/config.schema.yaml"


def planned(function, *args, **kwargs):
    """``function(*args, **kwargs)`` of mnistbench.launch.plan, its PlanError raised as
    Snakemake's WorkflowError: one paragraph with the fix, no traceback."""
    try:
        return function(*args, **kwargs)
    except plan.PlanError as exc:
        raise WorkflowError(str(exc)) from None


# Bounded before anything walks it: YAML aliases repeating aliases (a "billion laughs") would
# make the schema's validation run until killed; refused here in microseconds.
try:
    untrusted.check_tree(config, what="the config")
except untrusted.TooComplex as exc:
    raise WorkflowError(
        f"{exc}. Fix the file given with --configfile (or {plan.DEFAULT_CONFIGFILE})."
    ) from None
try:
    validate(config, schema=CONFIG_SCHEMA)  # the cost model too: cost_model.schema.yaml
except WorkflowError as exc:
    raise WorkflowError(plan.config_error(exc.__context__, exc)) from None
planned(plan.check_allocator, config)


# ---------------------------------------------------------------------------------------
# Where things go. Downloads under resources/, everything derived under results/.
RESULTS = "results"
RUNS = f"{RESULTS}/runs"
EXPERIMENTS = study.EXPERIMENTS
DATA_DIR = os.path.normpath(config["data_dir"])
DATA_FILES = [os.path.join(DATA_DIR, name) for name in files.FILES]
MACHINE_CORES = os.cpu_count() or 1
ENV = planned(plan.environment_name, config)
# The machine-wide lock of timed cells (see cells.smk for how cells are kept apart).
TIMING_LOCK = planned(plan.timing_lock_file, config["lock_file"])
# The digest of the bench rule's lines, which shape every timed cell: each cell records it
# (env.workflow_digest) and `mnistbench publish` compares it with the checkout's.
WORKFLOW_DIGEST = plan.workflow_digest(workflow.basedir)
CONDA = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
# The shell lines that make `mnistbench` this project's command in every rule; None: there is
# none here (a dry run and --lint need none; a run stops before its first job, check_software).
SOFTWARE_PREFIX = plan.software_prefix(workflow.basedir, conda=CONDA)
shell.prefix(f"set -euo pipefail; {SOFTWARE_PREFIX or ''}")


def pin_memory_flag():
    return plan.pin_memory_flag(config["pin_memory"])


def mirror_flags():
    return plan.mirror_flags(config["mirrors"], config["default_mirrors"])


def reproduce_command():
    """The command that reproduces this study, shown in the report's methodology."""
    settings = workflow.config_settings
    return plan.reproduce_command(settings.configfiles, settings.config, ON_SLURM)


# ---------------------------------------------------------------------------------------
# Hooks of one execution, run by the main Snakemake process only (never on a dry run, never
# inside a cluster job): each section of the workflow appends its functions here.
START_HOOKS = []  # called, in order, when the jobs are about to start
STOP_HOOKS = []  # called, in reverse order, when the execution ends (success or error)


def check_software():
    """Stop the run before any job starts when no `mnistbench` command is here."""
    if SOFTWARE_PREFIX is None:
        raise WorkflowError(plan.missing_software())


START_HOOKS.append(check_software)


# Fork server (config fork_server; mnistbench.launch.forkserver): the timed cells of a local
# execution start by forking a process that has already imported torch, ~0.1 s instead of
# 3-5 s per cell on a 2-core machine. Each cell is still its own process (env.launch records
# fork-server). Not for cluster jobs, containers or conda environments: they start their own
# interpreters. The server ends with this Snakemake process.
FORK_SERVER = {}


def pending_loaders():
    """The loaders of the bench jobs (the fork server's only clients) this execution will
    run; None where this Snakemake cannot say."""
    try:
        jobs = workflow.dag.needrun_jobs()
        return {cell(job.wildcards).loader for job in jobs if job.rule.name == "bench"}
    except AttributeError:
        return None


def start_fork_server():
    # Not for an execution without cells (the tables, the report, a fetch): the server's
    # import of torch would cost seconds for nothing. It imports torchvision only for cells
    # of the blog's DataLoader (forkserver.preload_modules).
    loaders = pending_loaders()
    if (
        not plan.wants_fork_server(config, workflow.local_exec, CONDA)
        or loaders == set()
    ):
        return
    log = Path(RESULTS, "logs", "forkserver.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    # The server loads torch under the environment of the cells (the bench rule unsets the
    # thread variables), with the study's allocator preloaded, as a cell's own process has it
    # (cpuruntime): a cell asking for another allocator differs in LD_PRELOAD and runs as a
    # new process.
    handle = forkserver.spawn(
        python=sys.executable,
        log=log,
        env=plan.cell_environment(os.environ),
        allocator=config["allocator"],
        loaders=loaders,
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
