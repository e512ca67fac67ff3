# What the study is: the validated config, this environment's name, its devices, the matrix of
# timed cells and the helpers the rules use. Everything here runs once, when Snakemake builds
# the DAG, and must stay fast (no torch import): a 500-cell study builds in well under 10 s
# (benchmarks/bench_dag.py).

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.settings.types import DeploymentMethod
from snakemake.utils import validate

from mnistbench import cost, data, forkserver, schema, sysinfo
from mnistbench.atomic import write_json, write_text
from mnistbench.devices import DEVICES, is_supported

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
    validate(config, schema=CONFIG_SCHEMA)
    cost.validate(config["cost"], source="config key cost")  # the report's own check
except WorkflowError as exc:
    raise WorkflowError(config_error(exc)) from None
except cost.CostError as exc:
    raise WorkflowError(str(exc)) from None


# ---------------------------------------------------------------------------------------
# Where things go. Downloads under resources/, everything derived under results/.
RESULTS = "results"
RUNS = f"{RESULTS}/runs"
EXPERIMENTS = ("convergence", "sweep")
DATA_DIR = os.path.normpath(config["data_dir"])
DATA_FILES = [os.path.join(DATA_DIR, name) for name in data.FILES]
MACHINE_CORES = os.cpu_count() or 1


def environment_name():
    """config `env`, else $MNISTBENCH_ENV, else host name + runtime; always a safe name."""
    wanted = config["env"].strip()
    # runner docker: <host>-docker (the cells' runtime, not this process's).
    runtime = "docker" if config["runner"] == "docker" else None
    name = (
        sysinfo.safe_name(wanted, default="")
        if wanted
        else sysinfo.default_env_name(runtime=runtime)
    )
    if not name:
        raise WorkflowError(
            f"invalid config key env: {wanted!r} has none of the characters A-Z a-z 0-9 . _ -"
            " that a folder name under results/runs may use. Give a name such as "
            "'lab-gpu-docker', or leave env empty for $MNISTBENCH_ENV or the host name."
        )
    return name


ENV = environment_name()


include: "slurm.smk"


def nvidia_gpu_present():
    """Whether this machine shows an NVIDIA GPU, found without importing torch (~3 s): the
    driver's /proc entries, else `nvidia-smi -L`. CUDA_VISIBLE_DEVICES="" or -1 hides it.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    gpus = Path(os.sep, "proc", "driver", "nvidia", "gpus")
    if gpus.is_dir() and any(gpus.iterdir()):
        return True
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        out = subprocess.run(
            [smi, "-L"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def study_devices():
    """Devices of the matrix: config `devices` as listed, or for `auto` what this machine has.
    A device listed but absent still gets cells: the trainer records them as unavailable.
    """
    # Under SLURM, auto means what the cluster has: slurm.partitions.
    if config["devices"] == "auto" and ON_SLURM:
        return ["cpu", "cuda"] if SLURM["partitions"]["cuda"] else ["cpu"]
    if config["devices"] == "auto":
        return ["cpu", "cuda"] if nvidia_gpu_present() else ["cpu"]
    return list(config["devices"])


DEVICES_OF_STUDY = study_devices()


def cell_envs(device):
    """[(env, partition)] where the cells of ``device`` run: this environment locally; under
    SLURM one environment per partition of the device (a node type)."""
    return slurm_cell_envs(device) if ON_SLURM else [(ENV, None)]


if ON_SLURM:
    check_slurm_env_names(DEVICES_OF_STUDY)
STUDY_ENVS = sorted({env for d in DEVICES_OF_STUDY for env, _ in cell_envs(d)})


# ---------------------------------------------------------------------------------------
# The matrix: one dict per timed cell, built once. Order = run order (see cell_priority):
# repeat-major, so every configuration gets its repeat 0 before any gets a repeat 1 (a study
# stopped early is still balanced, and slow drift of the machine spreads over all cells).
def build_matrix():
    experiments = config["experiments"]
    repeats = max(experiments[name]["repeats"] for name in EXPERIMENTS)
    cells = []
    for repeat in range(repeats):
        for experiment in EXPERIMENTS:
            spec = experiments[experiment]
            if not spec["enabled"] or repeat >= spec["repeats"]:
                continue
            if experiment == "convergence":
                precisions, batch_sizes = [spec["precision"]], [spec["batch_size"]]
            else:
                precisions, batch_sizes = spec["precisions"], spec["batch_sizes"]
            for device in DEVICES_OF_STUDY:
                for precision in precisions:
                    if not is_supported(device, precision):
                        continue  # e.g. tf32/fp16 on cpu: not a cell of the study
                    for loader in spec["loaders"]:
                        for batch_size in batch_sizes:
                            cells.append(
                                {
                                    "experiment": experiment,
                                    "cell": f"{device}-{precision}-{loader}-b{batch_size}-r{repeat}",
                                    "repeat": repeat,
                                    "seed": config["seed"] + repeat,
                                    "device": device,
                                    "precision": precision,
                                    "loader": loader,
                                    "batch_size": batch_size,
                                    "epochs": spec["epochs"],
                                    "lr": spec["lr"],
                                    "warmup_steps": spec["warmup_steps"],
                                    "max_steps": spec["max_steps"],
                                    "train_limit": spec["train_limit"],
                                    "test_limit": spec["test_limit"],
                                    "time_limit": spec["time_limit"],
                                }
                            )
    return cells


# Each cell once per environment of its device (under SLURM: per partition, a node type).
MATRIX = [
    dict(c, env=env, partition=partition)
    for c in build_matrix()
    for env, partition in cell_envs(c["device"])
]
CELLS = {(c["env"], c["experiment"], c["cell"]): c for c in MATRIX}
RANK = {key: index for index, key in enumerate(CELLS)}


def cell(wildcards):
    """The matrix entry of the bench job's cell."""
    key = (wildcards.env, wildcards.experiment, wildcards.cell)
    if key not in CELLS:
        raise WorkflowError(
            f"cell {wildcards.cell} of experiment {wildcards.experiment} in environment "
            f"{wildcards.env} is not in this study's matrix ({len(CELLS)} cells from the "
            "config); ask for a cell the config defines, or change experiments.* (or "
            "slurm.partitions) in the config."
        )
    return CELLS[key]


def cell_param(name):
    """A params function giving one field of the bench job's matrix entry."""
    return lambda wildcards: cell(wildcards)[name]


def cell_priority(wildcards):
    """Earlier cells of the matrix run first: higher priority (Snakemake runs the highest)."""
    return len(CELLS) - RANK[(wildcards.env, wildcards.experiment, wildcards.cell)]


def cell_summaries():
    """summary.json of every cell of this study's matrix (its environments: STUDY_ENVS)."""
    return [
        f"{RUNS}/{c['env']}/{c['experiment']}/{c['cell']}/{schema.SUMMARY_FILE}"
        for c in MATRIX
    ]


def merged_summaries():
    """Every cell the aggregate merges: this environment's matrix, plus the summary.json of
    other environments already in results/runs (copied in from other machines), so copying
    a folder in and rerunning merges it."""
    others = sorted(
        str(path)
        for path in Path(RUNS).glob(f"*/*/*/{schema.SUMMARY_FILE}")
        if path.parts[-4] not in STUDY_ENVS and not path.parts[-4].startswith(".")
    )
    return cell_summaries() + others


# ---------------------------------------------------------------------------------------
# How a timed cell runs. Honest scheduling: two timed cells never overlap on one machine.
# 1. Every bench job takes one unit of the resource `timed_cell`, which this workflow limits
#    to 1 itself, whatever --cores or --resources say, so the scheduler never starts two.
# 2. The train command runs under `flock` on a machine-wide lock file, which also serialises
#    cells of two Snakemake invocations (other working directories, other users).
# Bench jobs also claim every core (threads), so no other job of the study runs beside one.
# Under SLURM the limit is lifted: cells run side by side on separate (exclusive) nodes, and
# the lock still keeps two cells of one node apart (docs/slurm.md).
TIMED_CELL_RESOURCE = "timed_cell"
if not ON_SLURM:
    workflow.register_resource(TIMED_CELL_RESOURCE, 1)
# Snakemake sets these to the job's threads; a timed cell runs with torch's own default
# instead (config threads), so the bench rule unsets them.
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def timing_lock_file():
    """The machine-wide lock file of timed cells; created readable by every user."""
    path = Path(
        config["lock_file"] or Path(tempfile.gettempdir(), "mnistbench-timed-cell.lock")
    )
    if shutil.which("flock") is None:
        raise WorkflowError(
            "the `flock` command (util-linux) is missing; the workflow uses it so that no two "
            "timed cells run at once. Install util-linux (apt-get install util-linux)."
        )
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o666)
        os.fchmod(fd, 0o666)  # other users' studies lock the same file (umask aside)
        os.close(fd)
    return str(path)


TIMING_LOCK = timing_lock_file()


def software_prefix():
    """Shell lines that make `mnistbench` the command of this project in every rule."""
    if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
        # The conda env (workflow/envs) holds the dependencies; the package is this checkout.
        src = shlex.quote(str(Path(workflow.basedir, "src").resolve()))
        return (
            # (Snakemake formats the prefix like a shell command: literal braces are doubled.)
            f"export PYTHONPATH={src}${{{{PYTHONPATH:+:$PYTHONPATH}}}}; "
            'mnistbench() {{ python -m mnistbench.cli "$@"; }}; '
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


# Runners: how the command of one timed cell starts. Each returns the command that stands for
# `mnistbench` in the bench rule (flags follow); it runs inside the bench rule's flock.
def local_launcher(wildcards):
    return "mnistbench"


# The docker runner (runner: docker): one image per device, built by rule docker_image
# (workflow/rules/docker.smk) into results/images/{device}.json, and every timed cell runs in
# its device's image through `mnistbench docker run` (mnistbench.container does the HOW).
# The images' build context: the Snakefile's folder.
PROJECT = Path(workflow.basedir).resolve()
IMAGE_RECORDS = f"{RESULTS}/images"


def image_record(device):
    """The record (image ID, tag, build inputs) of the image a device's cells run in."""
    return f"{IMAGE_RECORDS}/{device}.json"


def image_dockerfile(device):
    """The Dockerfile of a device's image (config docker.images.DEVICE.dockerfile), absolute."""
    return str(PROJECT / config["docker"]["images"][device]["dockerfile"])


def image_sources():
    """What an image is built from besides its Dockerfile; a change to any rebuilds it.

    The pinned dependencies (requirements/*.txt, pyproject.toml), the entrypoint, the build
    context's filter, and the package's sources: the image holds the package, so without them
    a code change would leave new cells running the old code (the local runner runs the new
    one). A rebuild after a code change takes seconds: the dependency layers come from
    Docker's cache. Not inputs: workflow/ and config/ (copied into the image, but a cell runs
    only `mnistbench train` in it, so editing the study never rebuilds an image) and README.md.
    """
    fixed = [PROJECT / "pyproject.toml", PROJECT / ".dockerignore"]
    fixed += [PROJECT / "docker" / "entrypoint.sh"]
    fixed += sorted((PROJECT / "requirements").glob("*.txt"))
    package = sorted(
        path
        for path in (PROJECT / "src").rglob("*")
        if path.is_file()
        and path.suffix != ".pyc"
        and not any(p == "__pycache__" or p.endswith(".egg-info") for p in path.parts)
    )
    return [str(path) for path in fixed + package]


def check_images_config():
    """Every Dockerfile of the study's devices exists, else one message naming the key."""
    for device in DEVICES_OF_STUDY:
        path = Path(image_dockerfile(device))
        if not path.is_file():
            raise WorkflowError(
                f"config key docker.images.{device}.dockerfile: {path} does not exist. "
                "Give a Dockerfile relative to the project folder (the default is "
                f"docker/{device}.Dockerfile), or set runner: local."
            )


def check_docker_engine():
    """Stop the run before any job starts when no Docker engine answers (runner: docker)."""
    from mnistbench import container

    try:
        version = container.check_engine()
    except container.ContainerError as exc:
        raise WorkflowError(
            f"config key runner is docker, but {exc} Or set runner: local (the default)."
        ) from None
    print(f"runner docker: Docker engine {version} answers", file=sys.stderr)


def docker_launcher(wildcards):
    """`mnistbench docker run ... --` in the image of the cell's device; the bench rule's
    `train` flags follow (its --data is mounted read-only, its --out lies in results/).
    """
    settings = config["docker"]
    options = [f"--docker-option={option}" for option in settings["run_options"]]
    record = image_record(cell(wildcards)["device"])
    return shlex.join(
        ["mnistbench", "docker", "run", "--record", record, "--results", RESULTS]
        + ["--shm-size", settings["shm_size"], *options, "--"]
    )


def cell_image(wildcards):
    """The bench job's image record when runner is docker, else nothing. ancient(): a rebuilt
    image (a code or dependency change) does not rerun finished cells, as a code change does
    not with runner: local; delete a cell's folder to rerun it in the new image."""
    if config["runner"] != "docker":
        return []
    return ancient(image_record(cell(wildcards)["device"]))


RUNNERS = {"local": local_launcher, "docker": docker_launcher}


def cell_launcher(wildcards):
    """The command that starts `mnistbench` for one timed cell, per config `runner` (the
    schema allows exactly the keys of RUNNERS)."""
    return RUNNERS[config["runner"]](wildcards)


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
    """Write config `cost` as the JSON cost model `mnistbench report --cost-model` reads."""
    write_json(path, model)
    write_text(log, f"wrote {path} from config key cost ({len(model)} keys)\n")


# ---------------------------------------------------------------------------------------
# Hooks of one execution, run by the main Snakemake process only (never on a dry run, never
# inside a cluster job): each section of the workflow appends its functions here.
START_HOOKS = []  # called, in order, when the jobs are about to start
STOP_HOOKS = []  # called, in reverse order, when the execution ends (success or error)


# Fork server (config fork_server; src/mnistbench/forkserver.py): the timed cells of a local
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
    # The server loads torch under the environment of the cells (the bench rule unsets these).
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    handle = forkserver.spawn(python=sys.executable, log=log, env=env)
    FORK_SERVER["handle"] = handle
    os.environ.update(handle.environment())  # inherited by every job of this execution


def stop_fork_server():
    handle = FORK_SERVER.pop("handle", None)
    if handle is not None:
        handle.stop()
        for name in handle.environment():
            os.environ.pop(name, None)


START_HOOKS.append(check_executor)  # slurm.smk: before anything starts
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
