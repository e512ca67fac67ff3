# The study's timed cells: the devices of the study, its environments, the matrix (built by
# mnistbench.core.study, held by mnistbench.launch.plan.Matrix), the cell lookups the bench
# rule uses, the resource that keeps cells apart, the runners that start them, and where the
# peak job of each environment and device runs. Functions only (the rules are in bench.smk
# and peak.smk).

# Devices of the matrix: config `devices` as listed, or for `auto` what this machine has,
# found without torch (its import costs ~3 s at DAG time), or under SLURM what the cluster's
# partitions have (mnistbench.launch.plan.study_devices).
DEVICES_OF_STUDY = plan.study_devices(config)
planned(plan.check_docker_devices, config, DEVICES_OF_STUDY)
if ON_SLURM:
    planned(plan.check_slurm_env_names, config, DEVICES_OF_STUDY)
STUDY_ENVS = planned(plan.study_envs, config, ENV, DEVICES_OF_STUDY)

# The matrix: one Cell per timed cell, in run order (repeat-major, see cell_priority), each
# once per environment of its device (this machine's; under SLURM one per partition).
MATRIX = planned(plan.Matrix.of_config, config, ENV, DEVICES_OF_STUDY, MACHINE_CORES)


def cell(wildcards):
    """The matrix entry of the bench job's cell."""
    return planned(MATRIX.cell, wildcards.env, wildcards.experiment, wildcards.cell)


def cell_priority(wildcards):
    """Earlier cells of the matrix run first: higher priority (Snakemake runs the highest)."""
    return MATRIX.priority(wildcards.env, wildcards.experiment, wildcards.cell)


def cell_summaries():
    """summary.json of every cell of this study's matrix (its environments: STUDY_ENVS)."""
    return MATRIX.summaries(RUNS)


def merged_summaries():
    """Every cell the aggregate merges: this environment's matrix, plus the summary.json of
    other environments already in results/runs (copied in from other machines), so copying
    a folder in and rerunning merges it."""
    return cell_summaries() + planned(plan.other_summaries, RUNS, STUDY_ENVS)


# ---------------------------------------------------------------------------------------
# How a timed cell runs. Honest scheduling: two timed cells never overlap on one machine.
# 1. Every bench job takes one unit of the resource `timed_cell`, which this workflow limits
#    to 1 itself, whatever --cores or --resources say, so the scheduler never starts two.
# 2. The train command runs under the lock (flock) of a machine-wide lock file, taken by
#    `mnistbench run-cell` (mnistbench.launch.timedjob), which also serialises cells of two
#    Snakemake invocations (other working directories, other users).
# Bench jobs also claim every core (threads), so no other job of the study runs beside one.
# Under SLURM the limit is lifted: cells run side by side on separate (exclusive) nodes, and
# the lock still keeps two cells of one node apart (docs/slurm.md).
TIMED_CELL_RESOURCE = "timed_cell"
if not ON_SLURM:
    workflow.register_resource(TIMED_CELL_RESOURCE, 1)


def cell_launcher(wildcards):
    """The command that starts `mnistbench` for one timed cell, per config `runner`
    (mnistbench.launch.plan.RUNNERS: local, docker); `mnistbench run-cell` runs it under the
    machine's lock of timed cells.
    """
    return plan.cell_launcher(config, cell(wildcards), RESULTS)


# ---------------------------------------------------------------------------------------
# The measured limit of each environment and device (the peak job, peak.smk), timed like a
# cell and run where the device's first cell runs (its runner, its SLURM partition).
def peak_cell(wildcards):
    """The first cell of the peak job's environment and device: the job runs where it runs."""
    return planned(MATRIX.peak_cell, wildcards.env, wildcards.device)


def peak_launcher(wildcards):
    """The command that starts `mnistbench` where the device's cells run (config runner)."""
    return plan.cell_launcher(config, peak_cell(wildcards), RESULTS)


def peak_precision_flags(wildcards):
    """--precision P for every precision the device's cells of the environment train at."""
    precisions = MATRIX.peak_precisions(wildcards.env, wildcards.device)
    return plan.peak_precision_flags(precisions)


def peak_image(wildcards):
    """runner docker: the image record of the device (ancient, as for the cells)."""
    if config["runner"] != "docker":
        return []
    return ancient(plan.image_record(RESULTS, wildcards.device))


def peak_records():
    """The measured limit of every environment and device of the study's matrix."""
    return MATRIX.peak_files(RUNS)


def merged_peaks():
    """Every measured limit the aggregate reads: this study's, plus those of environments
    copied in from other machines (their summaries are merged: merged_summaries)."""
    return peak_records() + plan.other_peaks(RUNS, STUDY_ENVS)


def experiment_summaries(*experiments):
    """summary.json of this study's cells of ``experiments`` only (the target of
    `snakemake one_machine`: the headline and threads experiments)."""
    return [
        summary
        for cell, summary in zip(MATRIX.cells, MATRIX.summaries(RUNS))
        if cell.experiment in experiments
    ]
