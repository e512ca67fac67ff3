"""The study as data, without torch or Snakemake: what a cell is, its id, the matrix of cells a
validated config describes, each cell's ``mnistbench train`` arguments, and the environment
name its results are filed under.

This is the one home of the cell-id format (:func:`cell_id`) and of the environment-name rule
(:func:`environment_name`, :func:`partition_env_name`, :func:`safe_name`). The workflow's
rules, the test fakes, the SLURM tests, the GPU check and the Docker entrypoint
(``mnistbench env-name``) all ask here.

Environment variables read (names in :mod:`mnistbench.core.envvars`): ``MNISTBENCH_ENV`` (an
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

from mnistbench.core.devices import GRAPH_IMPLEMENTATION, Loader, is_supported
from mnistbench.core.envvars import CONTAINER_VAR, ENV_NAME_VAR

#: The experiments of a study, in the order their cells are listed within a repeat: the
#: headline's short cells and the threads curve first, so that their repeats spread over the
#: whole study (a drift of the machine hits every code, device and thread count alike).
EXPERIMENTS = ("headline", "threads", "convergence", "sweep", "tips", "scale", "capture")
#: The experiment of the answer measured like for like: both codes on every device of the
#: environment, short cells with enough repeats for an interval (:func:`headline_settings`).
HEADLINE_EXPERIMENT = "headline"
#: The experiment of the CPU's scaling with threads: both codes at 1, 2, 4, ... threads up to
#: every core (:func:`thread_counts`); CPU cells only.
THREADS_EXPERIMENT = "threads"

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
    registry path dropped); always through :func:`safe_name`, except ``$MNISTBENCH_ENV``,
    which must already be a safe name (a :class:`StudyError` otherwise). ``runtime`` (``local``,
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
        # Used as it is or refused, never renamed: '../' and '日本語' both became 'unknown',
        # two different values one folder.
        name = safe_name(explicit, default="")
        if name != explicit:
            raise StudyError(
                f"${ENV_NAME_VAR} is {explicit!r}, which is not a plain folder name under "
                f"results/runs (A-Z a-z 0-9 . _ -, at most {MAX_NAME_LEN} characters, not "
                "starting or ending with . _ -): "
                + (f"set it to {name!r}" if name else "set it to a name such as 'lab-gpu'")
                + f", or unset it for the host name ({host_name()}).")
        return name
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


def cell_id(device: str, precision: str, loader: str, batch_size: int | str, repeat: int,
            variant: str = "") -> str:
    """The folder name of a cell, e.g. ``cuda-fp32-resident-b128-r0``; a ``variant`` (a tip
    of the tips experiment, the network's width in the scale experiment) goes before the
    repeat: ``cpu-fp32-dataloader-b128-workers-4-r0``, ``cpu-fp32-resident-b128-x4-r0``; a
    batch size found by the cell itself is ``bmax``."""
    tag = f"-{safe_name(variant)}" if variant else ""
    return f"{device}-{precision}-{loader}-b{batch_size}{tag}-r{repeat}"


# ---------------------------------------------------------------------------------------------
# The tips experiment: the blog's advice and the project's own levers, measured
@dataclass(frozen=True)
class Tip:
    """One lever of the tips experiment: the train settings it changes from the baseline,
    the devices it applies to (None: every device) and why it does not apply elsewhere."""

    name: str  # recorded as params.tip
    source: str  # "blog" (the blog's advice), "project" (this project's levers) or "baseline"
    changes: Mapping[str, object]
    devices: tuple[str, ...] | None = None
    not_applicable: str = ""
    change: str = ""  # what it changes, in words, for the report


#: The baseline of the tips experiment: the blog's cell as its code runs it (dataloader, fp32,
#: batch 128, the literal model with nn.Dropout and torch.optim.Adam, PyTorch's defaults:
#: no workers, no pinned memory, cudnn.benchmark off, the C library's allocator).
TIP_BASELINE: dict[str, object] = {
    "loader": Loader.DATALOADER, "precision": "fp32", "batch_size": 128, "workers": 0,
    "pin_memory": False, "implementation": "stock", "cudnn_benchmark": False,
    "allocator": "glibc", "compile": "", "max_batch": False,
}
_GPU_ONLY = ("cuda",)
#: The levers, each changed alone from :data:`TIP_BASELINE`, then together.
TIPS: tuple[Tip, ...] = (
    Tip("baseline", "baseline", {}, change="the blog's code as written: a DataLoader with a "
        "per-sample transform, fp32, eager, batch 128, PyTorch's defaults"),
    Tip("pin_memory", "blog", {"pin_memory": True}, ("cuda", "xpu"),
        "pinned (page-locked) host memory only speeds up copies to a GPU",
        "DataLoader(pin_memory=True)"),
    Tip("workers=4", "blog", {"workers": 4}, change="4 DataLoader worker processes"),
    Tip("workers=cores", "blog", {"workers": "cores"},
        change="one DataLoader worker per logical core"),
    Tip("amp-fp16", "blog", {"precision": "fp16"}, ("cuda", "xpu", "mps"),
        "fp16 autocast training with a gradient scaler runs on accelerators only here",
        "automatic mixed precision, float16 with a gradient scaler"),
    Tip("amp-bf16", "blog", {"precision": "bf16"}, change="automatic mixed precision, bfloat16"),
    Tip("cudnn.benchmark", "blog", {"cudnn_benchmark": True}, _GPU_ONLY,
        "cuDNN is NVIDIA's GPU library: the CPU never calls it",
        "torch.backends.cudnn.benchmark = True (cuDNN autotuning)"),
    Tip("max-batch", "blog", {"max_batch": True},
        change="the largest batch size that fits, found by the cell (same samples, fewer steps)"),
    Tip("resident", "project", {"loader": Loader.RESIDENT},
        change="the whole dataset as one tensor on the device, no DataLoader"),
    Tip("compile", "project", {"compile": "default"}, change="torch.compile"),
    Tip("tuned", "project", {"implementation": "tuned"},
        change="this project's formulation of the same function (bit dropout, pool before "
        "ReLU, channels_last, fused Adam)"),
    Tip("allocator", "project", {"allocator": "auto"},
        change="the fastest memory allocator installed (jemalloc or tcmalloc) instead of glibc"),
    Tip("blog-all", "blog", {"pin_memory": True, "workers": 4, "precision": "amp",
                             "cudnn_benchmark": True, "max_batch": True},
        change="the blog's tips together: pinned memory, 4 workers, AMP, cudnn.benchmark, the "
        "largest batch (each where it applies)"),
    Tip("all", "project", {"loader": Loader.RESIDENT, "implementation": "tuned",
                           "allocator": "auto", "precision": "amp", "cudnn_benchmark": True},
        change="this project's levers together: resident data, tuned code, the allocator, AMP, "
        "cudnn.benchmark (each where it applies)"),
)
TIP_NAMES = tuple(tip.name for tip in TIPS)


def tip_by_name(name: str) -> Tip:
    """The :class:`Tip` called ``name``."""
    for tip in TIPS:
        if tip.name == name:
            return tip
    raise StudyError(f"unknown tip {name!r}; allowed: {', '.join(TIP_NAMES)}")


def not_applicable_reason(tip: Tip, device: str) -> str:
    """Why ``tip`` is not run on ``device`` ("" where it is)."""
    return "" if tip_applies(tip, device) else (tip.not_applicable or f"not run on {device}")


def tip_applies(tip: Tip, device: str) -> bool:
    """Whether ``tip`` changes anything on ``device`` (and its precision runs there)."""
    if tip.devices is not None and device not in tip.devices:
        return False
    precision = tip.changes.get("precision")
    return precision in (None, "amp") or is_supported(device, str(precision))


def tip_settings(tip: Tip, device: str, cores: int) -> dict[str, object]:
    """The train settings of ``tip`` on ``device``: the baseline with the tip's changes; in a
    combination, a change that does not apply to the device is left out (pinned memory and
    cudnn.benchmark on a CPU); ``amp`` is fp16 with a GradScaler where the device runs it (the
    blog's advice), else bf16; ``workers: cores`` is this machine's logical cores."""
    settings = dict(TIP_BASELINE)
    for key, value in tip.changes.items():
        if key == "pin_memory" and device not in ("cuda", "xpu"):
            continue
        if key == "cudnn_benchmark" and device != "cuda":
            continue
        if value == "amp":
            value = "fp16" if is_supported(device, "fp16") else "bf16"
        if value == "cores":
            value = cores
        settings[key] = value
    return settings


# ---------------------------------------------------------------------------------------------
# The convergence experiment: the blog's code as written against this project's best
#: The settings of the blog's code beyond the loader (stock model and optimizer, no workers, no
#: pinned memory, cudnn.benchmark off, the C library's allocator, eager): the tips baseline's.
BLOG_CODE: dict[str, object] = {
    key: TIP_BASELINE[key]
    for key in ("workers", "pin_memory", "implementation", "cudnn_benchmark", "allocator",
                "compile")}
#: Convergence loader -> (what code its cells run, their settings beyond the study-wide ones):
#: the DataLoader cell is the blog's code as written, the resident cell this project's best
#: (the tuned formulation, data held on the device, the study's allocator). A speed-up is
#: computed only between cells of the same kind.
CONVERGENCE_CODE: dict[str, tuple[str, dict[str, object]]] = {
    Loader.DATALOADER: ("blog", BLOG_CODE),
    Loader.RESIDENT: ("best", {"implementation": "tuned"}),
}
#: The kinds of code a headline figure comes from, as the report names them.
CODE_LABELS = {"blog": "the blog's code as written", "best": "this project's best code",
               "": "other settings"}


def code_kind(loader: object, implementation: object, allocator_loaded: object = "",
              workers: object = 0) -> str:
    """Which code a cell ran, from what it recorded: ``blog`` (the DataLoader, the stock
    formulation, the C library's allocator, no workers), ``best`` (data resident, the tuned
    formulation) or ``""`` (anything else), by :data:`CONVERGENCE_CODE`'s settings."""
    ran = {"implementation": implementation, "allocator": str(allocator_loaded or "glibc"),
           "workers": workers or 0}
    for kind_loader, (kind, settings) in CONVERGENCE_CODE.items():
        if loader == kind_loader and all(ran[k] == settings[k] for k in ran if k in settings):
            return kind
    return ""


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
    # The tips experiment's cells set these; None: the study-wide setting (config).
    tip: str = ""  # the lever (Tip.name) the cell measures
    workers: int | None = None
    pin_memory: bool | None = None
    implementation: str | None = None  # stock | tuned
    cudnn_benchmark: bool | None = None
    allocator: str | None = None
    compile: str | None = None
    max_batch: bool = False  # the cell finds the largest batch size that fits
    # The scale experiment's cells set this: the network's channel width multiplier.
    width: int = 1
    # The threads experiment's cells set this: torch's intra-op threads (None: config threads).
    threads: int | None = None

    @property
    def shows_width(self) -> bool:
        """Whether the cell's id and flags name its width: every scale cell (``x1`` too), and
        any cell of another width than the blog's network."""
        return self.experiment == "scale" or self.width != 1

    @property
    def variant(self) -> str:
        """What the id names beyond device, precision, loader and batch size: the tip of a
        tips cell, ``graph`` for a whole-step capture cell (the capture experiment), the width
        of a scale cell (``x4``), or nothing."""
        parts = [self.tip] if self.tip else []
        if self.implementation == GRAPH_IMPLEMENTATION:
            parts.append("graph")
        if self.shows_width:
            parts.append(f"x{self.width}")
        if self.threads is not None:
            parts.append(f"t{self.threads}")
        return "-".join(parts)

    @property
    def id(self) -> str:
        """The cell's folder name (:func:`cell_id`)."""
        batch = "max" if self.max_batch else self.batch_size
        return cell_id(self.device, self.precision, self.loader, batch, self.repeat,
                       self.variant)

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
            "--repeat", str(self.repeat), *self._tip_args(),
        ]

    def _tip_args(self) -> list[str]:
        """Flags of the settings a tips or scale cell sets itself (after the study-wide ones:
        the last value of an option wins)."""
        args = ["--tip", self.tip] if self.tip else []
        if self.workers is not None:
            args += ["--workers", str(self.workers)]
        if self.pin_memory is not None:
            args.append("--pin-memory" if self.pin_memory else "--no-pin-memory")
        if self.implementation is not None:
            args += ["--implementation", self.implementation]
        if self.cudnn_benchmark is not None:
            args.append("--cudnn-benchmark" if self.cudnn_benchmark else "--no-cudnn-benchmark")
        if self.allocator is not None:
            args += ["--allocator", self.allocator]
        if self.compile:
            args += ["--compile", self.compile]
        if self.max_batch:
            args.append("--max-batch")
        if self.shows_width:  # only there: the other cells' flags stay as they were
            args += ["--width", str(self.width)]
        if self.threads is not None:
            args += ["--threads", str(self.threads)]
        return args


def build_matrix(experiments: Mapping[str, Mapping], devices: Sequence[str], seed: int,
                 envs_of: Callable[[str], Iterable[tuple[str, str | None]]],
                 cores: int = 1) -> list[Cell]:
    """Every cell of a validated config's ``experiments``, for ``devices``, each once per
    environment ``envs_of(device)`` gives ((env, partition) pairs), in run order.

    Repeat-major: every configuration gets its repeat 0 before any gets a repeat 1, so a study
    stopped early is still balanced and slow drift of the machine spreads over all cells. A
    precision a device does not support (tf32 or fp16 on cpu) is not a cell of the study, nor
    is a tip that does not apply to a device (the report shows it as n/a with
    :attr:`Tip.not_applicable`). A scale cell runs each of ``widths`` on every device, and
    ``accelerator_widths`` besides on any other than the CPU. A headline cell runs each code
    on every device; a threads cell each code on the CPU at every thread count, the counts
    in turn (1 thread: blog, best; 2 threads: ...). ``cores``: the machine's logical cores
    (tip workers=cores, the threads experiment's counts)."""
    enabled = [name for name in EXPERIMENTS if name in experiments
               and experiments[name]["enabled"]]
    repeats = max((experiments[name]["repeats"] for name in enabled), default=0)
    cells = []
    for repeat in range(repeats):
        for experiment in enabled:
            spec = experiments[experiment]
            if repeat >= spec["repeats"]:
                continue
            common = {"experiment": experiment, "repeat": repeat, "seed": seed + repeat,
                      "epochs": spec["epochs"], "lr": spec["lr"],
                      "warmup_steps": spec["warmup_steps"], "max_steps": spec["max_steps"],
                      "train_limit": spec["train_limit"], "test_limit": spec["test_limit"],
                      "time_limit": spec["time_limit"]}
            for device in devices:
                for settings in _cell_settings(experiment, spec, device, cores):
                    for env, partition in envs_of(device):
                        cells.append(Cell(env=env, partition=partition, device=device,
                                          **common, **settings))
    return cells


def _cell_settings(experiment: str, spec: Mapping, device: str, cores: int) -> list[dict]:
    """The settings of every cell of ``experiment`` on ``device`` besides the common ones."""
    if experiment == "tips":
        out = []
        for name in ["baseline", *(n for n in spec["tips"] if n != "baseline")]:
            tip = tip_by_name(name)
            if tip_applies(tip, device):
                out.append({"tip": tip.name, **tip_settings(tip, device, cores)})
        return out
    if experiment == "convergence":
        return [{"precision": spec["precision"], "loader": loader,
                 "batch_size": spec["batch_size"], **CONVERGENCE_CODE[loader][1]}
                for loader in spec["loaders"] if is_supported(device, spec["precision"])]
    if experiment == HEADLINE_EXPERIMENT:
        return headline_settings(spec, device)
    if experiment == THREADS_EXPERIMENT:
        if device != "cpu":
            return []
        return [{**settings, "threads": threads}
                for threads in thread_counts(spec["thread_counts"], cores)
                for settings in headline_settings(spec, device)]
    if experiment == "capture":  # CUDA only: elsewhere nothing would be captured
        return [{"precision": precision, "loader": Loader.RESIDENT,
                 "batch_size": spec["batch_size"],
                 "implementation": implementation}
                for precision in spec["precisions"]
                if device == "cuda" and is_supported(device, precision)
                for implementation in ("tuned", GRAPH_IMPLEMENTATION)]
    if experiment == "scale":
        return [{"precision": precision, "loader": spec["loader"],
                 "batch_size": spec["batch_size"], "implementation": spec["implementation"],
                 "width": width}
                for precision in spec["precisions"] if is_supported(device, precision)
                for width in scale_widths(spec, device)]
    return [{"precision": precision, "loader": loader, "batch_size": batch_size}
            for precision in spec["precisions"] if is_supported(device, precision)
            for loader in spec["loaders"] for batch_size in spec["batch_sizes"]]


#: The loader of each kind of code (the inverse of :data:`CONVERGENCE_CODE`).
CODE_LOADERS = {kind: loader for loader, (kind, _) in CONVERGENCE_CODE.items()}


def headline_settings(spec: Mapping, device: str) -> list[dict]:
    """The cells of one repeat of the headline (or threads) experiment on ``device``: each of
    ``spec["codes"]`` (``blog``: the blog's code as written; ``best``: this project's best, as
    the convergence experiment runs them) at the spec's precision and batch size, in that
    order; none where the device lacks the precision."""
    if not is_supported(device, spec["precision"]):
        return []
    return [{"precision": spec["precision"], "loader": CODE_LOADERS[kind],
             "batch_size": spec["batch_size"], **CONVERGENCE_CODE[CODE_LOADERS[kind]][1]}
            for kind in spec["codes"]]


def thread_counts(configured: object, cores: int) -> list[int]:
    """The intra-op thread counts of the threads experiment, ascending: ``auto`` gives 1, 2,
    4, 8, ... below ``cores`` and ``cores`` itself (16 -> 1, 2, 4, 8, 16; 12 -> 1, 2, 4, 8,
    12; 1 -> 1); a list is taken as it is, each count at most ``cores`` (more threads than
    cores measures oversubscription, not scaling: a :class:`StudyError` naming the key)."""
    cores = max(1, int(cores))
    if configured == "auto":
        counts, n = [], 1
        while n < cores:
            counts.append(n)
            n *= 2
        return [*counts, cores]
    if not isinstance(configured, Iterable):
        raise StudyError(f"invalid config key experiments.threads.thread_counts: {configured!r}"
                         "; give auto or a list of thread counts.")
    counts = sorted({int(n) for n in configured})
    over = [n for n in counts if n > cores]
    if over:
        raise StudyError(
            f"invalid config key experiments.threads.thread_counts: {over} exceed this "
            f"machine's {cores} cores; list counts up to {cores}, or use auto (1, 2, 4, ... "
            "and every core).")
    return counts


def scale_widths(spec: Mapping, device: str) -> list[int]:
    """The widths the scale experiment (config ``spec``) runs on ``device``, ascending:
    ``widths``, and on an accelerator (any device but the CPU) ``accelerator_widths`` too."""
    widths = set(spec["widths"])
    if device != "cpu":
        widths |= set(spec["accelerator_widths"])
    return sorted(widths)
