# Stage 3: merge every cell under results/runs (this environment's and any copied in from
# other machines) into tidy tables, plus the cost model the report reads.


rule aggregate:
    input:
        summaries=merged_summaries(),
    output:
        summary="results/summary.csv",
        epochs="results/epochs.csv",
        resources="results/resources.csv",
        columns="results/columns.csv",
    log:
        "results/logs/aggregate.log",
    localrule: True  # on a cluster: here, not as a job
    conda:
        "../envs/mnistbench.yaml"
    params:
        runs=lambda wildcards: RUNS,
        out_dir=lambda wildcards, output: os.path.dirname(output.summary),
    shell:
        "mnistbench aggregate {params.runs} --out-dir {params.out_dir} > {log} 2>&1"


rule cost_model:
    output:
        model="results/cost_model.json",
    log:
        "results/logs/cost_model.log",
    localrule: True
    params:
        model=config["cost"],
    run:
        write_cost_model(output.model, params.model, log[0])
