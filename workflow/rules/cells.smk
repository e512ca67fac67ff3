# The study's timed cells: the devices of the study, its environments, the matrix (built by
# mnistbench.core.study), the cell lookups the bench rule uses, the resource that keeps cells apart
# and the runners that start them. Functions only (the rule is in bench.smk).


def study_devices():
    """Devices of the matrix: config `devices` as listed, or for `auto` what this machine has.
    A device listed but absent still gets cells: the trainer records them as unavailable.
    """
    # Under SLURM, auto means what the cluster has: slurm.partitions.
    if config["devices"] == "auto" and ON_SLURM:
        return ["cpu", "cuda"] if SLURM["partitions"]["cuda"] else ["cpu"]
    # Without torch (its import costs ~3 s at DAG time): NVIDIA or AMD (cuda), Intel (xpu),
    # Apple (mps); mnistbench.core.devices.visible_devices.
    if config["devices"] == "auto":
        return devices.visible_devices()
    return list(config["devices"])


DEVICES_OF_STUDY = study_devices()
if config["runner"] == "docker":
    check_docker_devices(DEVICES_OF_STUDY)


def cell_envs(device):
    """[(env, partition)] where the cells of ``device`` run: this environment locally; under
    SLURM one environment per partition of the device (a node type)."""
    return slurm_cell_envs(device) if ON_SLURM else [(ENV, None)]


if ON_SLURM:
    check_slurm_env_names(DEVICES_OF_STUDY)
STUDY_ENVS = sorted({env for d in DEVICES_OF_STUDY for env, _ in cell_envs(d)})


# The matrix (mnistbench.core.study.build_matrix): one Cell per timed cell, in run order
# (repeat-major, see cell_priority), each once per environment of its device.
MATRIX = study.build_matrix(
    config["experiments"],
    DEVICES_OF_STUDY,
    config["seed"],
    envs_of=cell_envs,
    cores=MACHINE_CORES,
)
CELLS = {c.key: c for c in MATRIX}
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


def cell_priority(wildcards):
    """Earlier cells of the matrix run first: higher priority (Snakemake runs the highest)."""
    return len(CELLS) - RANK[(wildcards.env, wildcards.experiment, wildcards.cell)]


def cell_summaries():
    """summary.json of every cell of this study's matrix (its environments: STUDY_ENVS)."""
    return [f"{c.folder(RUNS)}/{schema.SUMMARY_FILE}" for c in MATRIX]


def merged_summaries():
    """Every cell the aggregate merges: this environment's matrix, plus the summary.json of
    other environments already in results/runs (copied in from other machines), so copying
    a folder in and rerunning merges it."""
    others = sorted(
        path
        for path in Path(RUNS).glob(f"*/*/*/{schema.SUMMARY_FILE}")
        if path.parts[-4] not in STUDY_ENVS and not path.parts[-4].startswith(".")
    )
    for path in others:
        folder = Path(*path.parts[:-3])
        if study.safe_name(folder.name, default="") != folder.name:
            raise WorkflowError(
                f"{folder}: an environment folder under {RUNS} may use only the characters "
                "A-Z a-z 0-9 . _ - (it becomes a path pattern of the workflow, where { and } "
                f"are wildcards). Rename it, e.g. to {study.safe_name(folder.name)!r}; "
                "the environment's name inside its summaries is unaffected."
            )
    return cell_summaries() + [str(path) for path in others]


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


# Runners: how the command of one timed cell starts. Each returns the command that stands for
# `mnistbench` in the bench rule (flags follow); it runs inside the bench rule's flock.
def local_launcher(wildcards):
    return "mnistbench"


RUNNERS = {"local": local_launcher, "docker": docker_launcher}


def cell_launcher(wildcards):
    """The command that starts `mnistbench` for one timed cell, per config `runner` (the
    schema allows exactly the keys of RUNNERS)."""
    return RUNNERS[config["runner"]](wildcards)
