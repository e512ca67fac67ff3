# SLURM (config executor: slurm, which profiles/slurm sets; docs/slurm.md). Each timed cell is
# a SLURM job of snakemake-executor-plugin-slurm on a node of its partition. Every partition is
# a node type: its cells get their own {env} (results/runs/{env}/...), so the aggregate and the
# report compare node types side by side. Included by the Snakefile before the matrix is built;
# everything here runs when Snakemake builds the DAG, in the main process and again inside
# every SLURM job, so it depends on the config only (never on the host it runs on).
import functools

ON_SLURM = config["executor"] == "slurm"
SLURM = config["slurm"]
# The image a cell runs in with --software-deployment-method apptainer (docs/slurm.md;
# untested here); None: no container (the rule's conda env, or this .venv).
SLURM_CONTAINER = (SLURM["container"] or None) if ON_SLURM else None


def slurm_partitions(device):
    """The partitions the cells of ``device`` run on (config slurm.partitions.<device>, a name
    or a list); [""] (the cluster's default partition) when none is named."""
    value = SLURM["partitions"].get(device, [])
    partitions = [value] if isinstance(value, str) else list(value)
    return partitions or [""]


def slurm_node_type(partition):
    """config slurm.node_types.<partition> (every key optional)."""
    return SLURM["node_types"].get(partition, {})


def slurm_env_name(partition):
    """{env} of the cells of ``partition``: slurm.node_types.<partition>.name, else config env
    (or "slurm") and the partition, e.g. slurm-gpu-a100 (mnistbench.core.study)."""
    try:
        return study.partition_env_name(
            partition, slurm_node_type(partition).get("name", ""), config["env"]
        )
    except study.StudyError as exc:
        raise WorkflowError(str(exc)) from None


def slurm_cell_envs(device):
    """[(env, partition)] of the cells of ``device`` under SLURM, one per partition."""
    return [(slurm_env_name(p), p) for p in slurm_partitions(device)]


def check_slurm_env_names(devices):
    """Two partitions must not share an {env}: their cells would be the same files."""
    seen = {}
    for device in devices:
        for env, partition in slurm_cell_envs(device):
            if seen.setdefault(env, partition) != partition:
                raise WorkflowError(
                    f"invalid config key slurm: partitions {seen[env]!r} and {partition!r} "
                    f"both name the environment {env!r}; give them different "
                    "slurm.node_types.<partition>.name values."
                )


@functools.lru_cache(maxsize=None)
def slurm_node_cpus(partition):
    """CPUs of the smallest node of ``partition`` ("" = the default partition), from sinfo."""
    where = f"partition {partition}" if partition else "the default partition"
    try:
        out = subprocess.run(
            ["sinfo", "--noheader", "--Node", "--format=%P %c"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise WorkflowError(
            f"config slurm: the CPUs per cell of {where} come from `sinfo` "
            f"(slurm.node_types.<partition>.cpus is 0 and config threads is 0), which "
            f"failed: {exc}. Set slurm.node_types.{partition or '<partition>'}.cpus."
        ) from None
    cpus = []
    for line in out.splitlines():
        name, _, count = line.strip().partition(" ")
        default = name.endswith("*")
        if (
            name.rstrip("*") == partition or (default and not partition)
        ) and count.isdigit():
            cpus.append(int(count))
    if not cpus:
        raise WorkflowError(
            f"config slurm: sinfo lists no node of {where}; name an existing partition in "
            "slurm.partitions, or set slurm.node_types.<partition>.cpus."
        )
    return min(cpus)


def slurm_cpus(partition):
    """CPUs a cell of ``partition`` asks for, and times with: slurm.node_types.<p>.cpus, else
    config threads when > 0, else every CPU of a node of the partition."""
    return (
        slurm_node_type(partition).get("cpus", 0)
        or config["threads"]
        or slurm_node_cpus(partition)
    )


def cell_partition(wildcards):
    """The partition of the bench job's cell ("" = the cluster's default)."""
    return cell(wildcards).partition


def slurm_gpu_model(wildcards):
    """--gpus=MODEL:1 for a cuda cell where slurm.node_types.<partition>.gpu_model is set."""
    if cell(wildcards).device != "cuda":
        return None
    return slurm_node_type(cell_partition(wildcards)).get("gpu_model") or None


def slurm_extra(wildcards):
    """Further sbatch flags: --exclusive (slurm.exclusive) and slurm.node_types.<p>.extra."""
    flags = ["--exclusive"] if SLURM["exclusive"] else []
    flags.append(slurm_node_type(cell_partition(wildcards)).get("extra", "").strip())
    return " ".join(flag for flag in flags if flag) or None


def slurm_resources():
    """The bench rule's resources for snakemake-executor-plugin-slurm (none off SLURM, so a
    local run is unchanged). Per cell: its partition, a GPU for cuda cells, the CPUs it
    times with, memory, wall time, and an exclusive node unless slurm.exclusive is false.
    """
    if not ON_SLURM:
        return {}
    resources = {
        "slurm_partition": lambda wildcards: cell_partition(wildcards) or None,
        "cpus_per_task": lambda wildcards: slurm_cpus(cell_partition(wildcards)),
        "gpu": lambda wildcards: int(cell(wildcards).device == "cuda"),
        "gpu_model": slurm_gpu_model,
        "constraint": lambda wildcards: (
            slurm_node_type(cell_partition(wildcards)).get("constraint") or None
        ),
        "mem_mb": SLURM["mem_mb"],
        "runtime": SLURM["runtime"],
        "slurm_extra": slurm_extra,
    }
    if SLURM["account"]:
        resources["slurm_account"] = SLURM["account"]
    return resources


def check_executor():
    """Start hook: config executor must match the executor Snakemake runs with, else cells
    would run in one place and be filed (and timed) as if they ran in the other."""
    running = getattr(workflow.executor_plugin, "name", "") or ""
    if (running == "slurm") == ON_SLURM or running in ("dryrun", "touch"):
        return
    if ON_SLURM:
        raise WorkflowError(
            f"config executor is slurm, but Snakemake runs with the {running} executor: the "
            "cells would run here and be filed under their SLURM partitions. Run "
            "`snakemake --profile profiles/slurm` (or --executor slurm), or set executor: local."
        )
    raise WorkflowError(
        "Snakemake runs with the slurm executor, but config executor is local: timed cells "
        "would be serialised as on one machine and filed under this host's name. Use "
        "`snakemake --profile profiles/slurm`, which sets --config executor=slurm; when you "
        "pass --config yourself, add executor=slurm to it (a command-line --config replaces "
        "the profile's)."
    )


START_HOOKS.insert(
    0, check_executor
)  # first: before the fork server or anything starts
