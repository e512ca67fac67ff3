# Stage 3: merge every cell under results/runs (this environment's and any copied in from
# other machines) into tidy tables, each ok cell set against its environment's measured limit
# of its device (results/runs/{env}/peak/{device}.json, peak.smk), plus the cost model the
# report reads.
#
# The last good tables stay until new ones are complete. Snakemake removes a job's outputs
# before it runs and after it fails, so the aggregate writes into the staging folder
# results/.aggregate (temp(): consumed by the next job), and install_tables, which starts only
# once the aggregate succeeded with all four tables, renames each over its results/*.csv. A
# failed aggregate (e.g. a corrupt summary.json copied in from another machine) leaves the
# previous tables, and the report made from them, as they were. install_tables also reads
# the aggregate's log: a failed aggregate rewrites it, so the next run retries the aggregate;
# without it Snakemake would take the old tables as up to date (it records a failed job's
# inputs as seen, and reruns no job for missing intermediate files when the final ones exist).


rule aggregate:
    input:
        summaries=merged_summaries(),
        peaks=merged_peaks(),  # peak.smk: the measured limits the limit_* columns come from
    output:
        summary=temp("results/.aggregate/summary.csv"),
        epochs=temp("results/.aggregate/epochs.csv"),
        resources=temp("results/.aggregate/resources.csv"),
        columns=temp("results/.aggregate/columns.csv"),
    log:
        "results/logs/aggregate.log",
    localrule: True  # on a cluster: here, not as a job
    conda:
        "../../envs/conda.yaml"
    params:
        runs=lambda wildcards: RUNS,
        out_dir=lambda wildcards, output: os.path.dirname(output.summary),
    shell:
        "mnistbench aggregate {params.runs} --out-dir {params.out_dir} > {log} 2>&1"


rule install_tables:
    input:
        summary=rules.aggregate.output.summary,
        epochs=rules.aggregate.output.epochs,
        resources=rules.aggregate.output.resources,
        columns=rules.aggregate.output.columns,
        aggregate_log=rules.aggregate.log[0],
    output:
        summary="results/summary.csv",
        epochs="results/epochs.csv",
        resources="results/resources.csv",
        columns="results/columns.csv",
    log:
        "results/logs/install_tables.log",
    localrule: True
    conda:
        "../../envs/conda.yaml"
    shell:
        # All four staged tables there, then each renamed over its table (mv within one file
        # system: rename(2), atomic), so readers see the old table or the new one.
        """
        for staged in {input.summary:q} {input.epochs:q} {input.resources:q} {input.columns:q}; do
            test -f "$staged"
        done
        (
            mv -v -f -T {input.summary:q} {output.summary:q}
            mv -v -f -T {input.epochs:q} {output.epochs:q}
            mv -v -f -T {input.resources:q} {output.resources:q}
            mv -v -f -T {input.columns:q} {output.columns:q}
        ) >{log:q} 2>&1
        """


rule cost_model:
    output:
        model="results/cost_model.json",
    log:
        "results/logs/cost_model.log",
    localrule: True
    conda:
        "../../envs/conda.yaml"
    params:
        # config `cost` as JSON; `mnistbench cost-model` fills every default (the schema has
        # validated it), so this Snakemake process never imports numpy or jsonschema.
        model=json.dumps(config["cost"], sort_keys=True),
    shell:
        "mnistbench cost-model --config-json {params.model:q} --source 'config key cost'"
        " --out {output.model} > {log} 2>&1"
