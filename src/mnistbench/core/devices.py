"""The one place that names devices, precisions and loaders, says which combinations are
supported, finds the devices a machine has, and drives the device a cell runs on.

Devices (allowed values of ``--device``, :data:`DEVICES`): ``cpu``, and every
``torch.accelerator`` backend the benchmark drives:

- ``cuda``: NVIDIA GPUs through CUDA, and AMD GPUs through ROCm/HIP, which torch exposes as
  its ``cuda`` device type (``torch.version.hip`` is set); a cell records which
  (``env.gpu_backend``: ``cuda`` or ``rocm``) and the report labels it so
  (:func:`device_label`);
- ``xpu``: Intel GPUs (torch's XPU build);
- ``mps``: Apple silicon GPUs (Metal Performance Shaders).

TPUs (torch_xla) are out of scope: XLA traces the step into a lazily compiled graph, so
per-phase marks inside the step do not exist there.

Precisions (allowed values of ``--precision``):

- ``fp32``: plain float32 everywhere; on CUDA, TF32 tensor-core math is switched *off*.
- ``tf32``: float32 storage, TF32 tensor-core matmul and convolution; CUDA only (the one
  backend with torch TF32 switches).
- ``bf16``: ``torch.autocast`` to bfloat16; every device.
- ``fp16``: ``torch.autocast`` to float16 with a ``GradScaler``; accelerators only.

Whether a cell runs is decided twice. :data:`SUPPORTED` says which precisions the benchmark has
a policy for on each device (how the precision is applied there), without torch: the study's
matrix is built from it, and a combination outside it is a usage error of ``train`` (exit 2).
The device at hand then answers a capability query (:meth:`Backend.precision_problem`, e.g.
``torch.xpu.is_bf16_supported()``); a precision it cannot run makes the cell ``unavailable``
with the query's answer as the reason. The CUDA path asks only queries that hold on every
CUDA GPU torch supports, so its cells are exactly those of before.

:class:`Backend` is the device-generic layer the trainer and the timers use (availability,
synchronisation, timing events, peak memory, random state, capability queries), one
implementation over the ``torch.cuda``-style module of each backend (``torch.cuda``,
``torch.xpu``, ``torch.mps``); :func:`backend` picks it. Tests drive the trainer through a
fake module of the same shape.

``devices: auto`` asks :func:`visible_devices`, which finds the devices without importing torch
(about 3 s): NVIDIA through the driver's /proc entries or ``nvidia-smi``, AMD through
``/dev/kfd`` and the KFD topology or ``rocm-smi``/``amd-smi``, discrete Intel GPUs through the
DRM render nodes in /sys or ``xpu-smi``, Apple silicon by platform.
"""

from __future__ import annotations

import contextlib
import enum
import os
import platform
import shutil
import subprocess
from pathlib import Path

DEVICES = ("cpu", "cuda", "xpu", "mps")
#: The devices that are torch.accelerator backends (every device but cpu).
ACCELERATORS = DEVICES[1:]
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
#: The tuned formulation with the whole training step (batch gather, forward, loss, backward,
#: fused Adam) captured as one CUDA graph and replayed once per step (mnistbench.measure.capture).
GRAPH_IMPLEMENTATION = "tuned-graph"
#: Implementations of the model and optimizer (``--implementation``): the blog's code as
#: written, this project's equivalent formulation, and that formulation's whole step captured.
IMPLEMENTATIONS = ("tuned", "stock", GRAPH_IMPLEMENTATION)


class Loader(enum.StrEnum):
    """How a cell feeds the model (``--loader``; mnistbench.measure.loaders): the loaders'
    one spelling. Members are strings, so a recorded ``"resident"`` equals ``Loader.RESIDENT``."""

    #: The blog's pipeline: torchvision's Dataset and transforms, batched by a DataLoader.
    DATALOADER = "dataloader"
    #: The whole normalised split as one tensor on the training device.
    RESIDENT = "resident"


#: The allowed values of ``--loader`` as plain strings (argparse's choices, the results' checks).
LOADERS: tuple[str, ...] = tuple(loader.value for loader in Loader)


#: device -> precisions the benchmark has a policy for there (see the module docstring; the
#: device's capability queries decide at run time).
SUPPORTED: dict[str, tuple[str, ...]] = {
    "cpu": ("fp32", "bf16"),
    "cuda": ("fp32", "tf32", "bf16", "fp16"),
    "xpu": ("fp32", "bf16", "fp16"),
    "mps": ("fp32", "bf16", "fp16"),
}

#: How the phases of a cell are timed (summary timing.timing_method).
TIMING_METHODS: dict[str, str] = {
    "host-clock": "time.perf_counter at each mark (cpu: the work is synchronous)",
    "cuda-events": "CUDA events on the stream, read after one synchronisation per epoch",
    "device-events": "the backend's timing events (torch.xpu.Event, torch.mps.Event) on its "
                     "stream, read after one synchronisation per epoch",
    "sync+host-clock": "synchronise the device, then time.perf_counter, at each mark "
                       "(a backend without timing events)",
}

#: gpu_backend (env) -> how the report names it.
BACKEND_LABELS: dict[str, str] = {
    "cpu": "CPU", "cuda": "CUDA", "rocm": "ROCm/HIP", "xpu": "Intel XPU", "mps": "Apple MPS"}


class UnsupportedCombination(ValueError):
    """A device/precision/loader combination this benchmark does not run."""


def check_combination(device: str, precision: str, loader: str) -> None:
    """Raise :class:`UnsupportedCombination`, naming the allowed values, if the cell is invalid."""
    if device not in DEVICES:
        raise UnsupportedCombination(
            f"unknown device {device!r}; allowed: {', '.join(DEVICES)}")
    if loader not in LOADERS:
        raise UnsupportedCombination(
            f"unknown loader {loader!r}; allowed: {', '.join(LOADERS)}")
    if precision not in PRECISIONS:
        raise UnsupportedCombination(
            f"unknown precision {precision!r}; allowed: {', '.join(PRECISIONS)}")
    if precision not in SUPPORTED[device]:
        raise UnsupportedCombination(
            f"precision {precision!r} is not supported on {device}; "
            f"allowed on {device}: {', '.join(SUPPORTED[device])}")


def is_supported(device: str, precision: str) -> bool:
    """Whether ``precision`` runs on ``device`` (used to build the study's matrix)."""
    return precision in SUPPORTED.get(device, ())


def device_label(device: str, gpu_backend: str = "") -> str:
    """How the report names a cell's device: ``ROCm/HIP`` for a cuda cell on an AMD GPU
    (``gpu_backend`` rocm), else the backend's name (``CUDA``, ``Intel XPU``, ...)."""
    if device == "cuda" and gpu_backend == "rocm":
        return BACKEND_LABELS["rocm"]
    return BACKEND_LABELS.get(device, device)


# --------------------------------------------------------------------------- torch-free discovery

def _hidden(*names: str) -> bool:
    """Whether one of the visibility variables ``names`` hides every GPU ("" or -1)."""
    for name in names:
        value = os.environ.get(name)
        if value is not None and value.strip() in ("", "-1"):
            return True
    return False


def cuda_hidden() -> bool:
    """Whether $CUDA_VISIBLE_DEVICES hides every GPU ("" or -1), as CUDA itself reads it."""
    return _hidden("CUDA_VISIBLE_DEVICES")


def _tool_lists(tool: str, args: list[str], needle: str) -> bool:
    """Whether ``tool ARGS`` (when on PATH) exits 0 and prints ``needle``."""
    path = shutil.which(tool)
    if path is None:
        return False
    try:
        out = subprocess.run([path, *args], capture_output=True, text=True, timeout=20,
                             check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and needle in out.stdout


def nvidia_gpu_visible(root: Path | str = os.sep) -> bool:
    """Whether this machine shows an NVIDIA GPU, found without importing torch (~3 s): the
    driver's /proc entries, else `nvidia-smi -L`; False when CUDA_VISIBLE_DEVICES hides it.
    ``root``: the file-system root (tests pass a fake tree)."""
    if cuda_hidden():
        return False
    gpus = Path(root, "proc", "driver", "nvidia", "gpus")
    if gpus.is_dir() and any(gpus.iterdir()):
        return True
    return _tool_lists("nvidia-smi", ["-L"], "GPU")


def rocm_gpu_visible(root: Path | str = os.sep) -> bool:
    """Whether this machine shows an AMD GPU that torch's ROCm build can use, without torch:
    ``/dev/kfd`` and a KFD topology node with SIMD units (a GPU; CPU nodes have none), else
    `rocm-smi` or `amd-smi list`; False when HIP_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES or
    CUDA_VISIBLE_DEVICES hides every GPU."""
    if _hidden("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        return False
    if not Path(root, "dev", "kfd").exists():
        return False
    nodes = Path(root, "sys", "class", "kfd", "kfd", "topology", "nodes")
    with contextlib.suppress(OSError):
        for properties in sorted(nodes.glob("*/properties")):
            for line in properties.read_text(encoding="ascii", errors="replace").splitlines():
                key, _, value = line.partition(" ")
                if key == "simd_count" and value.strip().isdigit() and int(value) > 0:
                    return True
    return (_tool_lists("rocm-smi", ["--showproductname"], "GPU")
            or _tool_lists("amd-smi", ["list"], "GPU"))


#: PCI address of Intel's integrated GPUs (always device 2 on bus 0).
INTEGRATED_INTEL_GPU = "00:02.0"


def intel_gpu_visible(root: Path | str = os.sep) -> bool:
    """Whether this machine shows a discrete Intel GPU (torch's XPU device), without torch: a
    DRM render node whose PCI vendor is Intel (0x8086) and that is not the integrated GPU at
    PCI 00:02.0, else `xpu-smi discovery`. Integrated GPUs are left to an explicit
    ``devices: [xpu]``: most of them are not XPU devices torch supports."""
    drm = Path(root, "sys", "class", "drm")
    with contextlib.suppress(OSError):
        for node in sorted(drm.glob("renderD*")):
            device = node / "device"
            try:
                vendor = (device / "vendor").read_text(encoding="ascii").strip().lower()
            except OSError:
                continue
            if vendor == "0x8086" and not device.resolve().name.endswith(INTEGRATED_INTEL_GPU):
                return True
    return _tool_lists("xpu-smi", ["discovery"], "Device Name")


def apple_mps_visible() -> bool:
    """Whether this is Apple silicon under macOS, the only home of the MPS device."""
    return platform.system() == "Darwin" and platform.machine() == "arm64"


def visible_devices(root: Path | str = os.sep) -> list[str]:
    """The devices ``devices: auto`` means, found without importing torch: ``cpu``, plus
    ``cuda`` (an NVIDIA GPU, or an AMD GPU for torch's ROCm build), ``xpu`` (a discrete Intel
    GPU) and ``mps`` (Apple silicon) where this machine has them."""
    found = ["cpu"]
    if nvidia_gpu_visible(root) or rocm_gpu_visible(root):
        found.append("cuda")
    if intel_gpu_visible(root):
        found.append("xpu")
    if apple_mps_visible():
        found.append("mps")
    return found
