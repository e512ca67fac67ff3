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

from mnistbench import cost, data, schema, sysinfo
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
    name = (
        sysinfo.safe_name(wanted, default="") if wanted else sysinfo.default_env_name()
    )
    if not name:
        raise WorkflowError(
            f"invalid config key env: {wanted!r} has none of the characters A-Z a-z 0-9 . _ -"
            " that a folder name under results/runs may use. Give a name such as "
            "'lab-gpu-docker', or leave env empty for $MNISTBENCH_ENV or the host name."
        )
    return name


ENV = environment_name()


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
    if config["devices"] == "auto":
        return ["cpu", "cuda"] if nvidia_gpu_present() else ["cpu"]
    return list(config["devices"])


DEVICES_OF_STUDY = study_devices()


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
                                }
                            )
    return cells


MATRIX = build_matrix()
CELLS = {(c["experiment"], c["cell"]): c for c in MATRIX}
RANK = {key: index for index, key in enumerate(CELLS)}


def cell(wildcards):
    """The matrix entry of the bench job's cell."""
    key = (wildcards.experiment, wildcards.cell)
    if key not in CELLS:
        raise WorkflowError(
            f"cell {wildcards.cell} of experiment {wildcards.experiment} is not in this "
            f"study's matrix ({len(CELLS)} cells from the config); ask for a cell the "
            "config defines, or change experiments.* in the config."
        )
    return CELLS[key]


def cell_param(name):
    """A params function giving one field of the bench job's matrix entry."""
    return lambda wildcards: cell(wildcards)[name]


def cell_priority(wildcards):
    """Earlier cells of the matrix run first: higher priority (Snakemake runs the highest)."""
    return len(CELLS) - RANK[(wildcards.experiment, wildcards.cell)]


def cell_summaries():
    """summary.json of every cell of this environment's matrix."""
    return [
        f"{RUNS}/{ENV}/{c['experiment']}/{c['cell']}/{schema.SUMMARY_FILE}"
        for c in MATRIX
    ]


def merged_summaries():
    """Every cell the aggregate merges: this environment's matrix, plus the summary.json of
    other environments already in results/runs (copied in from other machines), so copying
    a folder in and rerunning merges it."""
    others = sorted(
        str(path)
        for path in Path(RUNS).glob(f"*/*/*/{schema.SUMMARY_FILE}")
        if path.parts[-4] != ENV and not path.parts[-4].startswith(".")
    )
    return cell_summaries() + others


# ---------------------------------------------------------------------------------------
# How a timed cell runs. Honest scheduling: two timed cells never overlap on one machine.
# 1. Every bench job takes one unit of the resource `timed_cell`, which this workflow limits
#    to 1 itself, whatever --cores or --resources say, so the scheduler never starts two.
# 2. The train command runs under `flock` on a machine-wide lock file, which also serialises
#    cells of two Snakemake invocations (other working directories, other users).
# Bench jobs also claim every core (threads), so no other job of the study runs beside one.
TIMED_CELL_RESOURCE = "timed_cell"
workflow.register_resource(TIMED_CELL_RESOURCE, 1)


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
    bindir = Path(sys.executable).parent
    if (bindir / "mnistbench").exists():
        return f'export PATH={shlex.quote(str(bindir))}:"$PATH"; '
    if shutil.which("mnistbench"):
        return ""
    raise WorkflowError(
        "the mnistbench command is not installed next to this Snakemake "
        f"({sys.executable}) nor on PATH. Run scripts/setup and start the workflow with "
        ".venv/bin/snakemake (or activate .venv)."
    )


shell.prefix(f"set -euo pipefail; {software_prefix()}")


# Runners: how the command of one timed cell starts. Each returns the command that stands for
# `mnistbench` in the bench rule (flags follow). The docker runner is added here.
def local_launcher(wildcards):
    return "mnistbench"


RUNNERS = {"local": local_launcher}


def cell_launcher(wildcards):
    """The command that starts `mnistbench` for one timed cell, per config `runner`."""
    runner = config["runner"]
    if runner not in RUNNERS:
        raise WorkflowError(
            f"config key runner: {runner!r} is not yet configured in this workflow (allowed "
            f"now: {', '.join(RUNNERS)}). Set runner: local, or add the {runner} runner to "
            "RUNNERS in workflow/rules/common.smk."
        )
    return RUNNERS[runner](wildcards)


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
    for path in workflow.config_settings.configfiles or []:
        if os.path.normpath(str(path)) != os.path.normpath("config/config.yaml"):
            parts += ["--configfile", str(path)]
    overrides = workflow.config_settings.config or {}
    if overrides:
        parts.append("--config")
        parts += [f"{key}={value}" for key, value in overrides.items()]
    return shlex.join(parts)


def write_cost_model(path, model, log):
    """Write config `cost` as the JSON cost model `mnistbench report --cost-model` reads."""
    write_json(path, model)
    write_text(log, f"wrote {path} from config key cost ({len(model)} keys)\n")
