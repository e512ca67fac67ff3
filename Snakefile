# mnistbench: how much faster, and at what cost, does a GPU train a CNN than a CPU?
# `snakemake --cores all` runs the whole study: fetch MNIST, time every cell, aggregate,
# report. See docs/workflow.md.
import sys
from importlib.util import find_spec
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.sourcecache import LocalSourceFile
from snakemake.utils import min_version

min_version("9.0")

# This workflow's own folder, where this Snakefile is: every path of the project (src/, the
# bench rule's digest, the Dockerfiles) resolves through it, never through the working
# directory nor workflow.basedir, which is the deploying Snakefile's folder when this workflow
# runs as a module (`module mnistbench: snakefile: ...`, docs/workflow.md).
# A module from a URL (snakedeploy's github(...)) has no folder: the rules need the checkout's
# files (src/, workflow/rules/bench.smk), so it must be a local clone.
if not isinstance(workflow.current_basedir, LocalSourceFile):
    raise WorkflowError(
        "mnistbench runs as a module from a local clone only: `git clone` the repository and "
        "give the module's snakefile as the Snakefile of the clone, by its path "
        "(docs/workflow.md)."
    )
PROJECT = Path(workflow.current_basedir.get_path_or_uri(secret_free=True)).resolve()
# The rules import this checkout's package (standard library only while the DAG is built), so
# Snakemake alone runs the workflow: src/ goes first on sys.path unless mnistbench is
# importable from there already (an editable install, as in .venv).
PACKAGE_SRC = PROJECT / "src"
_found = find_spec("mnistbench")
if _found is None or Path(_found.origin or "").resolve().parent.parent != PACKAGE_SRC:
    sys.path.insert(0, str(PACKAGE_SRC))


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/slurm.smk"
include: "workflow/rules/docker.smk"
include: "workflow/rules/cells.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/images.smk"
include: "workflow/rules/peak.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        cell_summaries(),
        peak_records(),
        "results/summary.csv",
        "results/report/index.html",


# The answer on one machine and the CPU's scaling with threads alone (their cells and the
# measured limits; no tables, no report): `snakemake --cores all one_machine`, then
# `snakemake --cores all` for the rest of the study, the tables and the report.
rule one_machine:
    input:
        experiment_summaries("headline", "threads"),
        peak_records(),
