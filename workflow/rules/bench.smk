# Stage 2: the timed cells. One job per cell of the matrix (below), in matrix order
# (priority), never two at once (resource timed_cell = 1, plus the machine-wide lock of timed
# cells). The rule says WHAT and WHERE, in one command: `mnistbench run-cell`
# (mnistbench.launch.timedjob) creates or checks the lock file safely, waits for its lock
# (saying so in the log), runs the cell's `train` through its runner's launcher without the
# thread variables Snakemake sets, with this rule's digest, and maps its exit;
# `mnistbench train` does the timing and writes summary.json, epochs.csv and resources.csv
# atomically into the cell's folder.
#
# Exit codes: 0 ok; 10 unavailable (device absent), 11 oom, 12 failed. For 10-12 the summary
# is still written with that status, so the job succeeds and the study goes on; any other
# exit (a crash, a kill) is a normal failure and the next run redoes only that cell.


rule bench:
    input:
        data=ancient(DATA_FILES),
        image=cell_image,  # runner docker: the image record of the cell's device (docker.smk)
    output:
        summary="results/runs/{env}/{experiment}/{cell}/summary.json",
        epochs="results/runs/{env}/{experiment}/{cell}/epochs.csv",
        resources="results/runs/{env}/{experiment}/{cell}/resources.csv",
    log:
        "results/logs/runs/{env}/{experiment}/{cell}.log",
    wildcard_constraints:
        env="|".join(re.escape(env) for env in STUDY_ENVS),
        experiment="|".join(EXPERIMENTS),
        cell="[A-Za-z0-9._-]+",
    priority: cell_priority
    conda:
        "../../envs/conda.yaml"
    container:
        SLURM_CONTAINER  # slurm.smk: with --sdm apptainer, the cell in the image
    threads: MACHINE_CORES
    resources:
        **slurm_resources(),  # slurm.smk: partition, GPU, CPUs, exclusive node (SLURM only)
        timed_cell=1,
    params:
        launcher=cell_launcher,
        lock=TIMING_LOCK,
        out=lambda wildcards, output: os.path.dirname(output.summary),
        data=lambda wildcards, input: os.path.dirname(input.data[0]),
        # The cell's flags come after the study-wide ones: a tips cell's own settings win.
        cell=lambda wildcards: shlex.join(cell(wildcards).train_args()),
        threads=config["threads"],
        allocator=config["allocator"],
        workers=config["workers"],
        pin_memory=pin_memory_flag(),
        workflow_digest=WORKFLOW_DIGEST,
    shell:
        "mnistbench run-cell --lock {params.lock:q} --log {log:q} --launcher {params.launcher:q}"
        " --workflow-digest {params.workflow_digest} --out {params.out:q} --"
        " --threads {params.threads} --allocator {params.allocator} --workers {params.workers}"
        " {params.pin_memory} {params.cell} --data {params.data:q} --quiet"
