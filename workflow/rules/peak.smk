# Stage 2a: the device's measured limit. Once per environment and device of the study (from
# the matrix: every (env, device) that has cells), `mnistbench peak` times a dense matmul and
# the network's second convolution at each precision the cells of that device train at, with
# the cells' threads, into results/runs/{env}/peak/{device}.json; the aggregate sets every ok
# cell against it (summary.csv limit_*; docs/methodology.md).
#
# It is timed work, kept apart from the timed cells as they are from each other: one unit of
# the resource timed_cell, every core (threads), and, in its one command `mnistbench
# run-peak` (mnistbench.launch.timedjob), the machine-wide lock and the thread variables
# unset, as `mnistbench run-cell` does for a cell. It runs before the cells (a higher
# priority than any), where they run: the cells' runner (plan.cell_launcher of the device's
# first cell), their SLURM partition and resources.
#
# A limit that cannot be measured never stops the study: exit 10 (device absent) and 12
# (the measurement failed) have written a record saying so; any other exit but a signal
# (e.g. a crash while importing torch) leaves one written by `mnistbench peak
# --record-failure` (no torch needed), so the job succeeds and the cells run. A job killed by
# a signal fails, and the next run measures again. Delete a record to measure again.


rule peak:
    input:
        image=peak_image,
    output:
        record="results/runs/{env}/peak/{device}.json",
    log:
        "results/logs/runs/{env}/peak/{device}.log",
    wildcard_constraints:
        env="|".join(re.escape(env) for env in STUDY_ENVS),
        device="|".join(DEVICES),
    priority: len(MATRIX) + 1  # before every cell (cells.smk: cell_priority)
    conda:
        "../../envs/conda.yaml"
    container:
        SLURM_CONTAINER
    threads: MACHINE_CORES
    resources:
        **plan.slurm_resources(config, peak_cell, node_cpus=slurm_node_cpus),
        timed_cell=1,
    params:
        launcher=peak_launcher,
        lock=TIMING_LOCK,
        precisions=peak_precision_flags,
        threads=config["threads"],
    shell:
        "mnistbench run-peak --lock {params.lock:q} --log {log:q} --launcher {params.launcher:q}"
        " --device {wildcards.device} {params.precisions} --threads {params.threads}"
        " --out {output.record:q}"
