"""The workflow's planning: what the rule files (``workflow/rules/*.smk``) compute while
Snakemake builds the DAG, as plain functions of explicit arguments (the validated config, the
project folder, a ``sinfo`` runner), so that each is unit-tested without Snakemake
(tests/launch/test_plan.py) and the rule files keep only thin wrappers that pass ``config``,
``workflow.basedir`` and the job's wildcards, and what needs the workflow object itself (the
matrix's wiring, the resource limit, the execution hooks).

Standard library and :mod:`mnistbench.core` only (and :mod:`mnistbench.launch`'s torch-free
modules): Snakemake imports this module whenever it parses the workflow, in the main process
and again inside every cluster job, so planning a study never needs numpy or torch, and a
virtual environment that holds only Snakemake parses it (tests/workflow/test_workflow.py).

Errors are :class:`PlanError`: one paragraph naming the config key (or the missing tool) and
the fix; the rule files raise them as Snakemake's ``WorkflowError`` (no traceback).

Sections: the config and this machine (config errors, the allocator, the environment name, the
lock file, the software prefix, the flags of every job, the reproduce command); SLURM
(partitions, node types, environments and resources per cell); the docker runner (image
records, Dockerfiles, build inputs, the engine, the launcher); the matrix (the study's
devices, environments and cells, its measured limits (the peak step: one per environment and
device), and the summaries and limits the aggregate merges).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mnistbench.core import cpuruntime, devices, provenance, schema, study
from mnistbench.core.devices import DEVICES
from mnistbench.launch import machinelock

#: The config file Snakemake loads first (the Snakefile's ``configfile:``).
DEFAULT_CONFIGFILE = "config/config.yaml"
#: Snakemake sets these to a job's threads; a timed cell runs with torch's own default instead
#: (config threads), so the timed jobs remove them (mnistbench.launch.timedjob), and the fork
#: server starts without them.
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
#: Seconds ``sinfo`` may take to list a cluster's nodes.
SINFO_TIMEOUT_S = 30


class PlanError(ValueError):
    """The study cannot be planned as configured: one paragraph naming the config key (or
    the missing tool) and the fix."""


# ---------------------------------------------------------------------------------------------
# The config and this machine
def config_error(error: object, fallback: object = "") -> str:
    """One paragraph naming the bad config key, the value, what is allowed and the fix.

    ``error`` is the jsonschema ``ValidationError`` behind Snakemake's failed ``validate``
    (its ``__context__``; read by its attributes, jsonschema is not imported here); anything
    else gives ``invalid config: <fallback>``."""
    if not hasattr(error, "absolute_path"):
        return f"invalid config: {fallback}"
    key = ""
    for part in error.absolute_path:
        key += f"[{part}]" if isinstance(part, int) else f".{part}"
    key = key.lstrip(".") or "(top level)"
    spec = getattr(error, "schema", None)
    expected = spec.get("description", "") if isinstance(spec, dict) else ""
    if getattr(error, "validator", None) == "anyOf":  # devices: "auto" or a list
        expected += f" Allowed devices: {', '.join(DEVICES)}"
    expected = f" Expected: {expected.strip().rstrip('.')}." if expected else ""
    return (
        f"invalid config key {key}: {error.message}.{expected} Fix it in {DEFAULT_CONFIGFILE}, "
        "the file given with --configfile or the --config override; "
        "workflow/schemas/config.schema.yaml describes every key."
    )


def check_allocator(config: Mapping[str, Any]) -> None:
    """A local study's allocator (config allocator) must be installed on this machine (on a
    cluster, or in a container, it must be on the nodes or in the image instead)."""
    if config["executor"] != "local" or config["runner"] != "local":
        return
    try:
        cpuruntime.resolve(config["allocator"])
    except cpuruntime.AllocatorError as exc:
        raise PlanError(f"config key allocator: {exc}") from None


def environment_name(config: Mapping[str, Any]) -> str:
    """{env} of this machine's cells: config ``env``, else $MNISTBENCH_ENV, else the host name
    and runtime (:func:`mnistbench.core.study.environment_name`); with runner docker the cells'
    runtime, ``<host>-docker``, not this process's."""
    runtime = "docker" if config["runner"] == "docker" else None
    try:
        return study.environment_name(config["env"], runtime=runtime)
    except study.StudyError as exc:
        raise PlanError(str(exc)) from None


def timing_lock_file(configured: str, which: Callable[[str], str | None] = shutil.which) -> str:
    """The machine-wide lock file of timed cells (config lock_file, else one in the temporary
    folder), checked without creating anything, so a dry run leaves no trace: each timed job
    creates it safely (``mnistbench run-cell`` and ``run-peak``,
    :mod:`mnistbench.launch.timedjob`) just before its command. The ``flock`` command must be
    there (the docker_image rule holds the lock with it)."""
    path = machinelock.resolve(configured)
    if which("flock") is None:
        raise PlanError(
            "the `flock` command (util-linux) is missing; the workflow uses it so that no two "
            "timed cells run at once. Install util-linux (apt-get install util-linux)."
        )
    try:
        machinelock.check(path)
    except machinelock.LockFileError as exc:
        raise PlanError(f"config key lock_file: {exc}") from None
    return str(path)


def workflow_digest(project: str | os.PathLike[str]) -> str:
    """The digest of the project's bench rule file, which shapes every timed cell: each cell
    records it (``env.workflow_digest``) and ``mnistbench publish`` compares it with the
    checkout's (:func:`mnistbench.core.provenance.workflow_digest`)."""
    path = Path(project, provenance.BENCH_RULES)
    return provenance.workflow_digest(path.read_text(encoding="utf-8"))


def software_prefix(project: str | os.PathLike[str], conda: bool,
                    executable: str = sys.executable,
                    which: Callable[[str], str | None] = shutil.which) -> str | None:
    """Shell lines that make ``mnistbench`` the command of this project in every rule, or None
    when there is none here (:func:`missing_software` says what to do).

    With ``conda`` (``--sdm conda``) the rules' conda env (envs/conda.yaml) holds the
    dependencies and the package is the checkout's ``src/``. Else the console script next to
    the Python running Snakemake (``.venv/bin``), except inside an Apptainer container
    (slurm.container), where the image's own ``mnistbench`` runs; else the one on PATH.
    (Snakemake formats the prefix like a shell command: literal braces are doubled.)"""
    if conda:
        src = shlex.quote(str(Path(project, "src").resolve()))
        return (
            f"export PYTHONPATH={src}${{{{PYTHONPATH:+:$PYTHONPATH}}}}; "
            'mnistbench() {{ python -m mnistbench.console "$@"; }}; '
        )
    bindir = Path(executable).parent
    if (bindir / "mnistbench").exists():
        return (
            '[ -n "${{APPTAINER_CONTAINER:-}}" ] || '
            f'export PATH={shlex.quote(str(bindir))}:"$PATH"; '
        )
    if which("mnistbench"):
        return ""
    return None


def missing_software(executable: str = sys.executable) -> str:
    """Why the jobs cannot run when :func:`software_prefix` found no ``mnistbench``, and the
    fix. (A dry run or ``--lint`` needs no ``mnistbench``: Snakemake alone plans the study.)"""
    return (
        "the mnistbench command is not installed next to this Snakemake "
        f"({executable}) nor on PATH. Run scripts/setup and start the workflow with "
        ".venv/bin/snakemake (or activate .venv), or give the rules their software with "
        "--sdm conda (envs/conda.yaml)."
    )


def pin_memory_flag(pin_memory: bool) -> str:
    """The ``train`` flag of config pin_memory."""
    return "--pin-memory" if pin_memory else "--no-pin-memory"


def mirror_flags(mirrors: Sequence[str], default_mirrors: bool) -> str:
    """The ``fetch`` flags of config mirrors and default_mirrors, shell-quoted."""
    flags = [f"--mirror {shlex.quote(m)}" for m in mirrors]
    if not default_mirrors:
        flags.append("--no-default-mirrors")
    return " ".join(flags)


def reproduce_command(configfiles: Iterable[object], overrides: Mapping[str, object] | None,
                      on_slurm: bool) -> str:
    """The command that reproduces this study, shown in the report's methodology: the config
    files Snakemake was given (but the default one) and the ``--config`` overrides; under SLURM
    through the profile, whose own ``executor=slurm`` override is left out."""
    parts = ["snakemake", "--cores", "all"]
    if on_slurm:
        parts = ["snakemake", "--profile", "profiles/slurm"]
    for path in configfiles or []:
        if os.path.normpath(str(path)) != os.path.normpath(DEFAULT_CONFIGFILE):
            parts += ["--configfile", str(path)]
    overrides = dict(overrides or {})
    if on_slurm and overrides == {"executor": "slurm"}:  # the profile's own
        overrides = {}
    if overrides:
        parts.append("--config")
        parts += [f"{key}={value}" for key, value in overrides.items()]
    return shlex.join(parts)


def wants_fork_server(config: Mapping[str, Any], local_exec: bool, conda: bool) -> bool:
    """Whether the execution starts the fork server (config fork_server): local cells only;
    not for cluster jobs, containers (runner docker) or conda environments, which start their
    own interpreters."""
    return bool(config["fork_server"] and config["runner"] == "local" and local_exec
                and not conda)


def cell_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without :data:`THREAD_VARIABLES`: the environment of a timed cell or peak
    (:mod:`mnistbench.launch.timedjob`), which the fork server loads torch under."""
    return {k: v for k, v in environ.items() if k not in THREAD_VARIABLES}


# ---------------------------------------------------------------------------------------------
# SLURM (config executor: slurm; docs/slurm.md). Every partition is a node type whose cells get
# their own {env}. These depend on the config only, never on the host: they run on the submit
# host and again inside every SLURM job.
def slurm_container(config: Mapping[str, Any]) -> str | None:
    """The image a cell runs in with ``--sdm apptainer`` (config slurm.container), under SLURM
    only; None: no container (the rule's conda env, or this .venv)."""
    if config["executor"] != "slurm":
        return None
    return config["slurm"]["container"] or None


def slurm_partitions(slurm: Mapping[str, Any], device: str) -> list[str]:
    """The partitions the cells of ``device`` run on (config slurm.partitions.<device>, a name
    or a list); ``[""]`` (the cluster's default partition) when none is named."""
    value = slurm["partitions"].get(device, [])
    partitions = [value] if isinstance(value, str) else list(value)
    return partitions or [""]


def slurm_node_type(slurm: Mapping[str, Any], partition: str) -> Mapping[str, Any]:
    """config slurm.node_types.<partition> (every key optional)."""
    return slurm["node_types"].get(partition, {})


def slurm_env_name(config: Mapping[str, Any], partition: str) -> str:
    """{env} of the cells of ``partition``: slurm.node_types.<partition>.name, else config env
    (or "slurm") and the partition, e.g. slurm-gpu-a100
    (:func:`mnistbench.core.study.partition_env_name`)."""
    name = slurm_node_type(config["slurm"], partition).get("name", "")
    try:
        return study.partition_env_name(partition, name, config["env"])
    except study.StudyError as exc:
        raise PlanError(str(exc)) from None


def slurm_cell_envs(config: Mapping[str, Any], device: str) -> list[tuple[str, str]]:
    """[(env, partition)] of the cells of ``device`` under SLURM, one per partition."""
    return [(slurm_env_name(config, p), p) for p in slurm_partitions(config["slurm"], device)]


def check_slurm_env_names(config: Mapping[str, Any], devices_: Iterable[str]) -> None:
    """Two partitions must not share an {env}: their cells would be the same files."""
    seen: dict[str, str] = {}
    for device in devices_:
        for env, partition in slurm_cell_envs(config, device):
            if seen.setdefault(env, partition) != partition:
                raise PlanError(
                    f"invalid config key slurm: partitions {seen[env]!r} and {partition!r} "
                    f"both name the environment {env!r}; give them different "
                    "slurm.node_types.<partition>.name values."
                )


def run_sinfo() -> str:
    """``sinfo``'s list of every node with its partition and CPUs (``%P %c``), one a line;
    raises OSError or subprocess.SubprocessError when it cannot run or fails."""
    return subprocess.run(
        ["sinfo", "--noheader", "--Node", "--format=%P %c"],
        capture_output=True, text=True, timeout=SINFO_TIMEOUT_S, check=True,
    ).stdout


def slurm_node_cpus(partition: str, sinfo: Callable[[], str] = run_sinfo) -> int:
    """CPUs of the smallest node of ``partition`` ("" = the default partition, the one sinfo
    marks with ``*``), from ``sinfo()`` (:func:`run_sinfo`)."""
    where = f"partition {partition}" if partition else "the default partition"
    try:
        out = sinfo()
    except (OSError, subprocess.SubprocessError) as exc:
        raise PlanError(
            f"config slurm: the CPUs per cell of {where} come from `sinfo` "
            f"(slurm.node_types.<partition>.cpus is 0 and config threads is 0), which "
            f"failed: {exc}. Set slurm.node_types.{partition or '<partition>'}.cpus."
        ) from None
    cpus = []
    for line in out.splitlines():
        name, _, count = line.strip().partition(" ")
        default = name.endswith("*")
        if (name.rstrip("*") == partition or (default and not partition)) and count.isdigit():
            cpus.append(int(count))
    if not cpus:
        raise PlanError(
            f"config slurm: sinfo lists no node of {where}; name an existing partition in "
            "slurm.partitions, or set slurm.node_types.<partition>.cpus."
        )
    return min(cpus)


def slurm_cpus(config: Mapping[str, Any], partition: str,
               node_cpus: Callable[[str], int] = slurm_node_cpus) -> int:
    """CPUs a cell of ``partition`` asks for, and times with: slurm.node_types.<p>.cpus, else
    config threads when > 0, else every CPU of a node of the partition (``node_cpus``)."""
    return (slurm_node_type(config["slurm"], partition).get("cpus", 0)
            or config["threads"] or node_cpus(partition))


def slurm_gpu_model(slurm: Mapping[str, Any], cell: study.Cell) -> str | None:
    """--gpus=MODEL:1 for a cuda cell where slurm.node_types.<partition>.gpu_model is set."""
    if cell.device != "cuda":
        return None
    return slurm_node_type(slurm, cell.partition or "").get("gpu_model") or None


def slurm_extra(slurm: Mapping[str, Any], partition: str) -> str | None:
    """Further sbatch flags: --exclusive (slurm.exclusive) and slurm.node_types.<p>.extra."""
    flags = ["--exclusive"] if slurm["exclusive"] else []
    flags.append(slurm_node_type(slurm, partition).get("extra", "").strip())
    return " ".join(flag for flag in flags if flag) or None


def slurm_resources(config: Mapping[str, Any], cell_of: Callable[[Any], study.Cell],
                    node_cpus: Callable[[str], int] = slurm_node_cpus) -> dict[str, Any]:
    """The bench rule's resources for snakemake-executor-plugin-slurm (none off SLURM, so a
    local run is unchanged). Per cell (``cell_of(wildcards)``): its partition, a GPU for cuda
    cells, the CPUs it times with, memory, wall time, and an exclusive node unless
    slurm.exclusive is false."""
    if config["executor"] != "slurm":
        return {}
    slurm = config["slurm"]

    def partition(wildcards) -> str:
        return cell_of(wildcards).partition or ""

    resources: dict[str, Any] = {
        "slurm_partition": lambda wildcards: partition(wildcards) or None,
        "cpus_per_task": lambda wildcards: slurm_cpus(config, partition(wildcards), node_cpus),
        "gpu": lambda wildcards: int(cell_of(wildcards).device == "cuda"),
        "gpu_model": lambda wildcards: slurm_gpu_model(slurm, cell_of(wildcards)),
        "constraint": lambda wildcards: (
            slurm_node_type(slurm, partition(wildcards)).get("constraint") or None),
        "mem_mb": slurm["mem_mb"],
        "runtime": slurm["runtime"],
        "slurm_extra": lambda wildcards: slurm_extra(slurm, partition(wildcards)),
    }
    if slurm["account"]:
        resources["slurm_account"] = slurm["account"]
    return resources


def check_executor(running: str, on_slurm: bool) -> None:
    """config executor must match the executor Snakemake runs with (``running``, its plugin's
    name), else cells would run in one place and be filed (and timed) as if they ran in the
    other. A dry run and --touch run nothing."""
    if (running == "slurm") == on_slurm or running in ("dryrun", "touch"):
        return
    if on_slurm:
        raise PlanError(
            f"config executor is slurm, but Snakemake runs with the {running} executor: the "
            "cells would run here and be filed under their SLURM partitions. Run "
            "`snakemake --profile profiles/slurm` (or --executor slurm), or set executor: local."
        )
    raise PlanError(
        "Snakemake runs with the slurm executor, but config executor is local: timed cells "
        "would be serialised as on one machine and filed under this host's name. Use "
        "`snakemake --profile profiles/slurm`, which sets --config executor=slurm; when you "
        "pass --config yourself, add executor=slurm to it (a command-line --config replaces "
        "the profile's)."
    )


# ---------------------------------------------------------------------------------------------
# The docker runner (config runner: docker; docs/docker.md): one image per device of the study,
# each timed cell in its device's image. mnistbench.launch.container does the HOW.
def image_record(results: str, device: str) -> str:
    """The record (image ID, tag, build inputs) of the image a device's cells run in."""
    return f"{results}/images/{device}.json"


def check_docker_devices(config: Mapping[str, Any], devices_: Iterable[str]) -> None:
    """With runner docker, every device of the study needs an image (config docker.images
    names one per device it runs: not xpu, mps)."""
    if config["runner"] != "docker":
        return
    images = config["docker"]["images"]
    missing = [d for d in devices_ if d not in images]
    if missing:
        raise PlanError(
            f"config key runner is docker, but the docker runner has images for "
            f"{', '.join(images)} cells only, not for "
            f"{', '.join(missing)}. Leave {', '.join(missing)} out of config devices, or "
            "use runner: local (an Intel GPU's study can run inside docker/xpu.Dockerfile's "
            "image: docs/docker.md; Apple's MPS has no container)."
        )


def image_dockerfile(project: str | os.PathLike[str], config: Mapping[str, Any],
                     device: str) -> str:
    """The Dockerfile of a device's image (config docker.images.DEVICE.dockerfile, relative to
    the project), absolute; a missing one is a config error when the DAG is built (dry runs
    too), naming the key."""
    path = Path(project, config["docker"]["images"][device]["dockerfile"])
    if not path.is_file():
        raise PlanError(
            f"config key docker.images.{device}.dockerfile: {path} does not exist. "
            "Give a Dockerfile relative to the project folder (the default is "
            f"docker/{device}.Dockerfile), or set runner: local."
        )
    return str(path)


def image_sources(project: str | os.PathLike[str]) -> list[str]:
    """What an image is built from besides its Dockerfile; a change to any rebuilds it.

    The pinned dependencies (envs/pip/*.txt, pyproject.toml), the entrypoint, the build
    context's filter, and the package's sources: the image holds the package, so without them
    a code change would leave new cells running the old code (the local runner runs the new
    one). A rebuild after a code change takes seconds: the dependency layers come from
    Docker's cache. Not inputs: workflow/ and config/ (copied into the image, but a cell runs
    only ``mnistbench train`` in it, so editing the study never rebuilds an image), README.md,
    compiled files (``*.pyc``, ``__pycache__``) and ``*.egg-info``."""
    project = Path(project)
    fixed = [project / "pyproject.toml", project / ".dockerignore"]
    fixed += [project / "docker" / "entrypoint.sh"]
    fixed += sorted((project / "envs" / "pip").glob("*.txt"))
    package = sorted(
        path
        for path in (project / "src").rglob("*")
        if path.is_file()
        and path.suffix != ".pyc"
        and not any(p == "__pycache__" or p.endswith(".egg-info") for p in path.parts)
    )
    return [str(path) for path in fixed + package]


def docker_engine_version(check: Callable[[], str] | None = None) -> str:
    """The version of the Docker engine that answers (``check``: default
    :func:`mnistbench.launch.container.check_engine`), or a :class:`PlanError` with the fix."""
    from mnistbench.launch import container  # the start hook's, never a dry run's

    try:
        return (check or container.check_engine)()
    except container.ContainerError as exc:
        raise PlanError(
            f"config key runner is docker, but {exc} Or set runner: local (the default)."
        ) from None


def local_launcher(config: Mapping[str, Any], cell: study.Cell, results: str) -> str:
    """runner local: this environment's ``mnistbench``."""
    return "mnistbench"


def docker_launcher(config: Mapping[str, Any], cell: study.Cell, results: str) -> str:
    """runner docker: ``mnistbench docker run ... --`` in the image of the cell's device; the
    bench rule's ``train`` flags follow (its --data is mounted read-only, its --out lies in
    ``results``)."""
    settings = config["docker"]
    options = [f"--docker-option={option}" for option in settings["run_options"]]
    record = image_record(results, cell.device)
    return shlex.join(["mnistbench", "docker", "run", "--record", record, "--results", results,
                       "--shm-size", settings["shm_size"], *options, "--"])


#: Runners: how the command of one timed cell starts, per config runner (the schema allows
#: exactly these keys). Each returns the launcher of the bench and peak rules' timed jobs
#: (``mnistbench run-cell --launcher``: the ``train`` flags follow), run under their lock.
RUNNERS: dict[str, Callable[[Mapping[str, Any], study.Cell, str], str]] = {
    "local": local_launcher,
    "docker": docker_launcher,
}


def cell_launcher(config: Mapping[str, Any], cell: study.Cell, results: str) -> str:
    """The command that starts ``mnistbench`` for ``cell``, per config runner."""
    return RUNNERS[config["runner"]](config, cell, results)


# ---------------------------------------------------------------------------------------------
# The matrix
def study_devices(config: Mapping[str, Any],
                  visible: Callable[[], list[str]] = devices.visible_devices) -> list[str]:
    """Devices of the matrix: config ``devices`` as listed, or for ``auto`` what this machine
    has (``visible()``, without torch: :func:`mnistbench.core.devices.visible_devices`), and
    under SLURM what the cluster has: cpu, plus cuda when slurm.partitions.cuda names one. A
    device listed but absent still gets cells: the trainer records them as unavailable."""
    if config["devices"] != "auto":
        return list(config["devices"])
    if config["executor"] == "slurm":
        return ["cpu", "cuda"] if config["slurm"]["partitions"].get("cuda") else ["cpu"]
    return list(visible())


def cell_envs(config: Mapping[str, Any], env: str, device: str) -> list[tuple[str, str | None]]:
    """[(env, partition)] where the cells of ``device`` run: ``env`` (this machine's) locally;
    under SLURM one environment per partition of the device (a node type)."""
    if config["executor"] == "slurm":
        return list(slurm_cell_envs(config, device))
    return [(env, None)]


def study_envs(config: Mapping[str, Any], env: str, devices_: Iterable[str]) -> list[str]:
    """Every {env} this study's cells are filed under, sorted."""
    return sorted({e for d in devices_ for e, _ in cell_envs(config, env, d)})


class Matrix:
    """The study's timed cells (:func:`mnistbench.core.study.build_matrix`) in run order
    (repeat-major), each once per environment of its device, looked up by where it is filed."""

    def __init__(self, cells: Iterable[study.Cell]):
        self.cells = list(cells)
        self.by_key = {c.key: c for c in self.cells}
        self.rank = {key: index for index, key in enumerate(self.by_key)}

    @classmethod
    def of_config(cls, config: Mapping[str, Any], env: str, devices_: Sequence[str],
                  cores: int) -> Matrix:
        """The matrix of a validated config's experiments for ``devices_``, with ``env`` this
        machine's environment (:func:`cell_envs`) and ``cores`` its logical cores."""
        try:
            return cls(study.build_matrix(
                config["experiments"], devices_, config["seed"],
                envs_of=lambda device: cell_envs(config, env, device), cores=cores,
            ))
        except study.StudyError as exc:  # e.g. more threads than this machine's cores
            raise PlanError(str(exc)) from None

    def __len__(self) -> int:
        return len(self.by_key)

    def cell(self, env: str, experiment: str, cell: str) -> study.Cell:
        """The cell filed under results/runs/{env}/{experiment}/{cell}."""
        key = (env, experiment, cell)
        if key not in self.by_key:
            raise PlanError(
                f"cell {cell} of experiment {experiment} in environment {env} is not in this "
                f"study's matrix ({len(self.by_key)} cells from the config); ask for a cell "
                "the config defines, or change experiments.* (or slurm.partitions) in the "
                "config."
            )
        return self.by_key[key]

    def priority(self, env: str, experiment: str, cell: str) -> int:
        """Earlier cells of the matrix run first: a higher priority (Snakemake runs the
        highest first)."""
        return len(self.by_key) - self.rank[(env, experiment, cell)]

    def summaries(self, runs: str) -> list[str]:
        """summary.json of every cell, under ``runs`` (results/runs)."""
        return [f"{c.folder(runs)}/{schema.SUMMARY_FILE}" for c in self.cells]

    # The measured limits (the peak step): one per environment and device of the matrix.
    def peaks(self) -> list[tuple[str, str]]:
        """(env, device) of every environment and device that has cells, in matrix order:
        the peak step measures each once."""
        return list(dict.fromkeys((c.env, c.device) for c in self.cells))

    def peak_cell(self, env: str, device: str) -> study.Cell:
        """The first cell of ``device`` in ``env``: the peak job runs where it runs (its
        runner's launcher, its SLURM partition and resources)."""
        for cell in self.cells:
            if (cell.env, cell.device) == (env, device):
                return cell
        raise PlanError(
            f"the study has no {device} cell in environment {env} (its measured limit, "
            f"{env}/{schema.PEAK_DIR}/{schema.peak_file(device)}, is measured only where "
            "cells of the device run); ask for the limit of a device and environment the "
            "config's devices and experiments.* give cells.")

    def peak_precisions(self, env: str, device: str) -> list[str]:
        """The precisions the cells of ``device`` in ``env`` train at, in the order of
        :data:`mnistbench.core.devices.PRECISIONS`: those its peak job measures."""
        used = {c.precision for c in self.cells if (c.env, c.device) == (env, device)}
        return [p for p in devices.PRECISIONS if p in used]

    def peak_files(self, runs: str) -> list[str]:
        """The measured limit of every environment and device of the matrix, under ``runs``
        (results/runs/{env}/peak/{device}.json)."""
        return [peak_file(runs, env, device) for env, device in self.peaks()]


def peak_file(runs: str, env: str, device: str) -> str:
    """Where the measured limit of ``device`` in ``env`` lies under ``runs``."""
    return f"{runs}/{env}/{schema.PEAK_DIR}/{schema.peak_file(device)}"


def peak_precision_flags(precisions: Iterable[str]) -> str:
    """The ``mnistbench peak`` flags of ``precisions``: ``--precision P`` each."""
    return " ".join(f"--precision {shlex.quote(p)}" for p in precisions)


def other_peaks(runs: str | os.PathLike[str], envs: Iterable[str]) -> list[str]:
    """The measured limits (``{env}/peak/{device}.json``) of every environment folder under
    ``runs`` that is not one of this study's ``envs`` (copied in with their cells; hidden
    folders and names that are not safe skipped: other_summaries names those), sorted, so
    that copying one in reruns the aggregate."""
    envs = set(envs)
    names = {schema.peak_file(d) for d in DEVICES}
    return sorted(
        str(path) for path in Path(runs).glob(f"*/{schema.PEAK_DIR}/*.json")
        if path.parts[-3] not in envs and study.safe_name(path.parts[-3], "") == path.parts[-3]
        and path.name in names)


def other_summaries(runs: str | os.PathLike[str], envs: Iterable[str]) -> list[str]:
    """The summary.json of every environment folder under ``runs`` that is not one of this
    study's ``envs`` (copied in from other machines; hidden folders skipped), sorted. A folder
    name that is not safe (it becomes a path pattern, where { and } are wildcards) is a
    :class:`PlanError` naming it and a safe name."""
    envs = set(envs)
    others = sorted(
        path
        for path in Path(runs).glob(f"*/*/*/{schema.SUMMARY_FILE}")
        if path.parts[-4] not in envs and not path.parts[-4].startswith(".")
    )
    for path in others:
        folder = Path(*path.parts[:-3])
        if study.safe_name(folder.name, default="") != folder.name:
            raise PlanError(
                f"{folder}: an environment folder under {runs} may use only the characters "
                "A-Z a-z 0-9 . _ - (it becomes a path pattern of the workflow, where { and } "
                f"are wildcards). Rename it, e.g. to {study.safe_name(folder.name)!r}; "
                "the environment's name inside its summaries is unaffected."
            )
    return [str(path) for path in others]
