# SLURM (config executor: slurm, which profiles/slurm sets; docs/slurm.md). Each timed cell is
# a SLURM job of snakemake-executor-plugin-slurm on a node of its partition. Every partition is
# a node type: its cells get their own {env} (results/runs/{env}/...), so the aggregate and the
# report compare node types side by side. Included by the Snakefile before the matrix is built;
# everything here runs when Snakemake builds the DAG, in the main process and again inside
# every SLURM job, so it depends on the config only (never on the host it runs on). The logic
# is mnistbench.launch.plan's (slurm_*); here only what the bench rule and the hooks call.
import functools

ON_SLURM = config["executor"] == "slurm"
# The image a cell runs in with --software-deployment-method apptainer (docs/slurm.md;
# never run in this project); None: no container (the rule's conda env, or this .venv).
SLURM_CONTAINER = plan.slurm_container(config)


@functools.lru_cache(maxsize=None)
def slurm_node_cpus(partition):
    """CPUs of the smallest node of ``partition`` ("" = the default partition), from sinfo
    (once per partition and parse)."""
    return planned(plan.slurm_node_cpus, partition)


def slurm_resources():
    """The bench rule's resources for snakemake-executor-plugin-slurm (none off SLURM)."""
    return plan.slurm_resources(config, cell, node_cpus=slurm_node_cpus)


def check_executor():
    """Start hook: config executor must match the executor Snakemake runs with."""
    running = getattr(workflow.executor_plugin, "name", "") or ""
    planned(plan.check_executor, running, ON_SLURM)


START_HOOKS.insert(
    0, check_executor
)  # first: before the fork server or anything starts
