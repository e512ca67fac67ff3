# What needs Snakemake itself: the validated config, where things go, this environment's name,
# the lock of timed cells, the shell prefix, the reproduce command and the execution hooks. The
# planning itself is mnistbench.launch.plan (plain functions of the config, unit-tested in
# tests/launch/test_plan.py); the study as data (cells, ids, environment names) is
# mnistbench.core.study. Everything here runs once, when Snakemake builds the DAG, imports
# the standard library only (no numpy, no torch: Snakemake alone parses the workflow) and must
# stay fast: a 500-cell study builds in well under 10 s (benchmarks/bench_dag.py).

import atexit
import json
import os
import re
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger
from snakemake.settings.types import DeploymentMethod
from snakemake.utils import validate

from mnistbench.core import schema, study, untrusted
from mnistbench.core.atomic import write_json, write_text
from mnistbench.core.devices import DEVICES
from mnistbench.data import files
from mnistbench.launch import estimate as estimating
from mnistbench.launch import forkserver, plan

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
WORKFLOW_DIGEST = plan.workflow_digest(PROJECT)
CONDA = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
# The shell lines that make `mnistbench` this project's command in every rule; None: there is
# none here (a dry run and --lint need none; a run stops before its first job, check_software).
SOFTWARE_PREFIX = plan.software_prefix(PROJECT, conda=CONDA)
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


# The study's duration (mnistbench.launch.estimate; docs/workflow.md): the execution's plan
# (its pending cells in run order, its peak jobs) goes to results/logs/estimate/plan.json
# (`mnistbench estimate` reads it), and a watcher thread of this process follows the files the
# jobs write: an estimate from a default limit at once, the estimate from the measured limit
# once the peak jobs are done (it looks once a second: before any cell ends), a time-left line
# after each cell, a line a minute while a cell runs. Lines go through Snakemake's logger:
# the terminal, .snakemake/log/, a container's output, the log of a SLURM job running it.
# A dry run prints the estimate for its pending cells as its last line.
ESTIMATE = {}


def say(line):
    logger.info(line)


def pending_plan(dry_run=False):
    """The estimate's plan of this execution (its bench and peak jobs); on a dry run, whose
    jobs count as done once it has printed them, the cells and limits without their file.
    """
    if dry_run:
        cells = [
            c for c in MATRIX.cells if not Path(c.folder(RUNS), "summary.json").exists()
        ]
        peaks = [
            (env, device)
            for env, device in MATRIX.peaks()
            if not Path(plan.peak_file(RUNS, env, device)).exists()
        ]
        return estimating.Plan.of_cells(cells, peaks, RUNS, MACHINE_CORES, STUDY_ENVS)
    try:
        jobs = list(workflow.dag.needrun_jobs())
    except AttributeError:
        return None
    keys = {
        (job.wildcards.env, job.wildcards.experiment, job.wildcards.cell)
        for job in jobs
        if job.rule.name == "bench"
    }
    peaks = [
        (job.wildcards.env, job.wildcards.device)
        for job in jobs
        if job.rule.name == "peak"
    ]
    cells = [c for c in MATRIX.cells if c.key in keys]
    return estimating.Plan.of_cells(cells, peaks, RUNS, MACHINE_CORES, STUDY_ENVS)


def start_estimate():
    study_plan = pending_plan()
    if study_plan is None or not study_plan.cells:
        return
    estimating.write_plan(study_plan, Path(RESULTS, "logs", "estimate"))
    watcher = estimating.Watcher(study_plan, say=say)
    watcher.poll()  # the estimate now when no peak job is pending
    watcher.start()
    ESTIMATE["watcher"] = watcher


def stop_estimate():
    watcher = ESTIMATE.pop("watcher", None)
    if watcher is not None:
        watcher.stop()
        watcher.poll()  # the cells that finished since its last look


START_HOOKS.append(start_estimate)
STOP_HOOKS.append(stop_estimate)


def dry_run_estimate():
    if workflow.dryrun:
        study_plan = pending_plan(dry_run=True)
        if study_plan is not None and study_plan.cells:
            print(estimating.plan_summary(study_plan), flush=True)


if workflow.is_main_process:
    atexit.register(dry_run_estimate)


def run_start_hooks(log=None):
    for hook in START_HOOKS:
        hook()


def run_stop_hooks(log=None):
    for hook in reversed(STOP_HOOKS):
        hook()


onstart:
    run_start_hooks()


onsuccess:
    run_stop_hooks()


onerror:
    run_stop_hooks()


# As a module (`module mnistbench: ...` and `use rule * from mnistbench`, docs/workflow.md),
# Snakemake keeps only the deploying Snakefile's onstart/onsuccess/onerror (Workflow.onstart:
# modifier.is_main_snakefile()), so the hooks above would silently not run: no check of the
# software, no fork server, no estimate. They go in front of the deploying workflow's
# handlers (Snakemake's private _onstart, _onsuccess, _onerror: tests/workflow/test_module.py
# holds them); a handler the deploying Snakefile defines after `use rule` replaces them.
def chained(hooks, then):
    def handler(log):
        hooks()
        then(log)

    return handler


if not workflow.modifier.is_main_snakefile():
    workflow._onstart = chained(run_start_hooks, workflow._onstart)
    workflow._onsuccess = chained(run_stop_hooks, workflow._onsuccess)
    workflow._onerror = chained(run_stop_hooks, workflow._onerror)
