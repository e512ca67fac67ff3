"""The study as data, without torch or Snakemake: what a cell is, its id, the matrix of cells a
validated config describes, each cell's ``mnistbench train`` arguments, and the environment
name its results are filed under.

This is the one home of the cell-id format (:func:`cell_id`) and of the environment-name rule
(:func:`environment_name`, :func:`partition_env_name`, :func:`safe_name`). The workflow's
rules, the test fakes, the SLURM tests, the GPU check and the Docker entrypoint
(``mnistbench env-name``) all ask here.

Environment variables read (names in :mod:`mnistbench.envvars`): ``MNISTBENCH_ENV`` (an
explicit environment name), ``MNISTBENCH_CONTAINER`` (the image, set in our images),
``APPTAINER_CONTAINER`` / ``SINGULARITY_CONTAINER`` (set by Apptainer).
"""

from __future__ import annotations

import os
import re
import socket
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from .devices import is_supported
from .envvars import CONTAINER_VAR, ENV_NAME_VAR

#: The experiments of a study, in the order their cells are listed within a repeat.
EXPERIMENTS = ("convergence", "sweep")

#: Longest name :func:`safe_name` returns, in characters.
MAX_NAME_LEN = 100

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
#: A host name Docker made up: the first 12 hex digits of the container's id, not a machine.
_CONTAINER_ID_HOST = re.compile(r"[0-9a-f]{12}")


class StudyError(ValueError):
    """A config value the study cannot use; the message names the key and the fix."""


# ---------------------------------------------------------------------------------------------
# Names
def safe_name(text: object, default: str = "unknown") -> str:
    """``text`` as a file-system-safe name: only ``[A-Za-z0-9._-]``, accents folded to ASCII,
    every other run of characters (spaces, slashes, ``:``) replaced by one ``-``, no leading or
    trailing ``.``/``-``/``_`` (so never ``.``, ``..`` or a hidden name), at most
    :data:`MAX_NAME_LEN` characters; ``default`` when nothing is left."""
    folded = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode("ascii")
    name = _UNSAFE.sub("-", folded)
    name = re.sub(r"-{2,}", "-", name).strip("._-")[:MAX_NAME_LEN].strip("._-")
    return name or default


def process_runtime() -> str:
    """How this process runs: ``apptainer``, ``docker`` (any OCI container started from an image
    that sets ``MNISTBENCH_CONTAINER``) or ``local``."""
    if os.environ.get("APPTAINER_CONTAINER") or os.environ.get("SINGULARITY_CONTAINER"):
        return "apptainer"
    if os.environ.get(CONTAINER_VAR):
        return "docker"
    return "local"


def host_name() -> str:
    """This machine's short host name, safe; ``container`` inside one of our images when the
    host name is the 12 hex digits Docker makes up (run it with ``--hostname``)."""
    host = safe_name(socket.gethostname().split(".")[0], default="host")
    if process_runtime() == "docker" and _CONTAINER_ID_HOST.fullmatch(host):
        return "container"
    return host


def environment_name(configured: str = "", runtime: str | None = None) -> str:
    """The environment a cell's results are filed under (``results/runs/{env}``): ``configured``
    (config ``env``) when given, else ``$MNISTBENCH_ENV``, else the host name and the runtime,
    e.g. ``myhost-local`` or ``myhost-docker-mnistbench-cpu`` (image ``mnistbench:cpu``,
    registry path dropped); always through :func:`safe_name`. ``runtime`` (``local``,
    ``docker``, ``apptainer``) names the cells' runtime instead of this process's: the
    workflow's docker runner passes ``docker`` (``myhost-docker``; one image per device).
    Raises :class:`StudyError` for a configured name with no usable character."""
    wanted = str(configured or "").strip()
    if wanted:
        name = safe_name(wanted, default="")
        if not name:
            raise StudyError(
                f"invalid config key env: {wanted!r} has none of the characters A-Z a-z 0-9 . _ -"
                " that a folder name under results/runs may use. Give a name such as "
                "'lab-gpu-docker', or leave env empty for $MNISTBENCH_ENV or the host name."
            )
        return name
    explicit = os.environ.get(ENV_NAME_VAR, "").strip()
    if explicit:
        return safe_name(explicit)
    runtime = runtime or process_runtime()
    if runtime == "local":
        return f"{host_name()}-local"
    image = os.environ.get(CONTAINER_VAR, "").strip().rsplit("/", 1)[-1]
    parts = [host_name(), runtime] + ([safe_name(image)] if image else [])
    return safe_name("-".join(parts))


def partition_env_name(partition: str, name: str = "", prefix: str = "") -> str:
    """The environment of a SLURM partition's cells (a node type): ``name`` (config
    slurm.node_types.<partition>.name) when given, else ``prefix`` (config env, or ``slurm``)
    and the partition, e.g. ``slurm-gpu-a100`` (``default``: the default partition)."""
    wanted = str(name or "").strip()
    if wanted:
        safe = safe_name(wanted, default="")
        if not safe:
            raise StudyError(
                f"invalid config key slurm.node_types.{partition}.name: {wanted!r} has none "
                "of the characters A-Z a-z 0-9 . _ - that a folder under results/runs may "
                "use. Give a name such as 'lab-a100', or leave it out for slurm-<partition>."
            )
        return safe
    head = safe_name(prefix, default="") or "slurm"
    return safe_name(f"{head}-{partition or 'default'}")


def cell_id(device: str, precision: str, loader: str, batch_size: int, repeat: int) -> str:
    """The folder name of a cell, e.g. ``cuda-fp32-resident-b128-r0``."""
    return f"{device}-{precision}-{loader}-b{batch_size}-r{repeat}"


# ---------------------------------------------------------------------------------------------
# Cells and the matrix
@dataclass(frozen=True)
class Cell:
    """One timed cell of the study: where it is filed and every setting it trains with."""

    env: str
    partition: str | None  # SLURM partition ("" = the default one); None off SLURM
    experiment: str  # one of EXPERIMENTS
    repeat: int  # 0-based
    seed: int  # config seed + repeat
    device: str
    precision: str
    loader: str
    batch_size: int
    epochs: int
    lr: float
    warmup_steps: int
    max_steps: int  # 0: full epochs
    train_limit: int  # 0: every sample
    test_limit: int  # 0: every sample
    time_limit: float  # s, 0: none

    @property
    def id(self) -> str:
        """The cell's folder name (:func:`cell_id`)."""
        return cell_id(self.device, self.precision, self.loader, self.batch_size, self.repeat)

    @property
    def key(self) -> tuple[str, str, str]:
        """(env, experiment, id): where the cell is filed, unique in a study."""
        return (self.env, self.experiment, self.id)

    def folder(self, runs: str) -> str:
        """The cell's folder under ``runs`` (``results/runs``)."""
        return f"{runs}/{self.env}/{self.experiment}/{self.id}"

    def train_args(self) -> list[str]:
        """The ``mnistbench train`` flags of this cell's settings and bookkeeping (the
        machine-wide ones, data, output, threads and loader settings, are the caller's)."""
        return [
            "--device", self.device, "--precision", self.precision,
            "--batch-size", str(self.batch_size), "--loader", self.loader,
            "--epochs", str(self.epochs), "--lr", repr(float(self.lr)),
            "--seed", str(self.seed), "--warmup-steps", str(self.warmup_steps),
            "--max-steps", str(self.max_steps), "--train-limit", str(self.train_limit),
            "--test-limit", str(self.test_limit), "--time-limit", repr(float(self.time_limit)),
            "--env", self.env, "--experiment", self.experiment, "--cell", self.id,
            "--repeat", str(self.repeat),
        ]


def build_matrix(experiments: Mapping[str, Mapping], devices: Sequence[str], seed: int,
                 envs_of: Callable[[str], Iterable[tuple[str, str | None]]]) -> list[Cell]:
    """Every cell of a validated config's ``experiments``, for ``devices``, each once per
    environment ``envs_of(device)`` gives ((env, partition) pairs), in run order.

    Repeat-major: every configuration gets its repeat 0 before any gets a repeat 1, so a study
    stopped early is still balanced and slow drift of the machine spreads over all cells. A
    precision a device does not support (tf32 or fp16 on cpu) is not a cell of the study."""
    enabled = [name for name in EXPERIMENTS if experiments[name]["enabled"]]
    repeats = max((experiments[name]["repeats"] for name in enabled), default=0)
    cells = []
    for repeat in range(repeats):
        for experiment in enabled:
            spec = experiments[experiment]
            if repeat >= spec["repeats"]:
                continue
            if experiment == "convergence":
                precisions, batch_sizes = [spec["precision"]], [spec["batch_size"]]
            else:
                precisions, batch_sizes = spec["precisions"], spec["batch_sizes"]
            for device in devices:
                for precision in precisions:
                    if not is_supported(device, precision):
                        continue
                    for loader in spec["loaders"]:
                        for batch_size in batch_sizes:
                            for env, partition in envs_of(device):
                                cells.append(Cell(
                                    env=env, partition=partition, experiment=experiment,
                                    repeat=repeat, seed=seed + repeat, device=device,
                                    precision=precision, loader=loader,
                                    batch_size=batch_size, epochs=spec["epochs"],
                                    lr=spec["lr"], warmup_steps=spec["warmup_steps"],
                                    max_steps=spec["max_steps"],
                                    train_limit=spec["train_limit"],
                                    test_limit=spec["test_limit"],
                                    time_limit=spec["time_limit"]))
    return cells
