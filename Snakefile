# mnistbench: how much faster, and at what cost, does a GPU train a CNN than a CPU?
# `snakemake --cores all` runs the whole study: fetch MNIST, time every cell, aggregate,
# report. See docs/workflow.md.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/slurm.smk"
include: "workflow/rules/docker.smk"
include: "workflow/rules/cells.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/images.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        cell_summaries(),
        "results/summary.csv",
        "results/report/index.html",
