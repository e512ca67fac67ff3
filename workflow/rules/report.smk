# Stage 4: the self-contained HTML report and its charts as PNG files, both registered for
# `snakemake --report report.zip`.


rule report:
    input:
        summary="results/summary.csv",
        epochs="results/epochs.csv",
        resources="results/resources.csv",
        cost_model="results/cost_model.json",
    output:
        html=report(
            "results/report/index.html",
            caption="../report/index.rst",
            category="Report",
        ),
        figures=report(
            directory("results/report/figures"),
            patterns=["{name}.png"],
            caption="../report/figures.rst",
            category="Figures",
        ),
    log:
        "results/logs/report.log",
    localrule: True  # on a cluster: here, not as a job
    conda:
        "../../envs/conda.yaml"
    params:
        results=lambda wildcards, input: os.path.dirname(input.summary),
        command=reproduce_command(),
    shell:
        "mnistbench report --results {params.results} --cost-model {input.cost_model}"
        " --out {output.html} --figures-dir {output.figures} --command {params.command:q}"
        " > {log} 2>&1"
