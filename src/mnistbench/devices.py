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
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .envvars import GPU_NOTE_VAR

DEVICES = ("cpu", "cuda", "xpu", "mps")
#: The devices that are torch.accelerator backends (every device but cpu).
ACCELERATORS = DEVICES[1:]
LOADERS = ("dataloader", "resident")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


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


def available_devices() -> list[str]:
    """Devices torch can use here: always ``cpu``, plus each accelerator it sees."""
    return ["cpu"] + [name for name in ACCELERATORS if backend(name).is_available()]


# --------------------------------------------------------------------------- the device layer

class DeviceUnavailable(RuntimeError):
    """The requested device does not exist on this machine, or cannot run the cell's
    precision (its capability query says no)."""


class Backend:
    """How the trainer and the timers drive one device: availability, the torch device,
    synchronisation, timing events, peak memory, random state and capability queries.

    ``module`` is the backend's ``torch.cuda``-style module (``torch.cuda``, ``torch.xpu``,
    ``torch.mps``; None for the CPU): ``is_available()``, ``synchronize()``, ``Event``
    (optional), ``get_rng_state``/``set_rng_state``, ``max_memory_allocated`` and
    ``reset_peak_memory_stats`` (optional), ``is_bf16_supported`` (optional),
    ``get_device_properties`` (optional). ``tensor_device`` is the torch device type its
    tensors live on (the backend's name; a test's fake module puts them on ``cpu``)."""

    def __init__(self, name: str, module: Any = None, tensor_device: str | None = None) -> None:
        self.name = name
        self.module = module
        self.tensor_device = tensor_device or name

    @property
    def is_accelerator(self) -> bool:
        """Whether this is an accelerator (not the CPU)."""
        return self.module is not None

    def is_available(self) -> bool:
        """Whether torch can use the device here (always, for the CPU)."""
        if self.module is None:
            return True
        try:
            return bool(self.module.is_available())
        except Exception:  # a broken driver is an absent device
            return False

    def unavailable_reason(self) -> str:
        """Why :meth:`is_available` is False, for the cell's reason."""
        return f"no {device_label(self.name)} device is visible to torch"

    def torch_device(self):
        """The ``torch.device`` a cell's tensors go to."""
        import torch

        if self.tensor_device == "cpu":
            return torch.device("cpu")
        return torch.device(self.tensor_device, 0)

    def synchronize(self) -> None:
        """Wait until the device has finished its queued work (nothing to wait for on CPU)."""
        if self.module is not None:
            self.module.synchronize()

    def event_class(self):
        """The backend's timing event class (``Event(enable_timing=True)``), or None."""
        return None if self.module is None else getattr(self.module, "Event", None)

    @property
    def timing_method(self) -> str:
        """How phases are timed on this device (a key of :data:`TIMING_METHODS`)."""
        if self.module is None:
            return "host-clock"
        if self.name == "cuda":
            return "cuda-events"
        return "device-events" if self.event_class() is not None else "sync+host-clock"

    def _memory_api(self):
        """``torch.accelerator`` when it drives this device, else the backend's module."""
        import torch

        accelerator = getattr(torch, "accelerator", None)
        with contextlib.suppress(Exception):
            current = accelerator.current_accelerator() if accelerator else None
            if current is not None and current.type == self.tensor_device and hasattr(
                    accelerator, "max_memory_allocated"):
                return accelerator
        return self.module

    def reset_peak_memory(self, device) -> None:
        """Start a new peak of allocated memory (where the backend keeps one)."""
        if self.module is None:
            return
        reset = getattr(self._memory_api(), "reset_peak_memory_stats", None)
        if reset is not None:
            with contextlib.suppress(Exception):
                reset(device)

    def peak_memory_mb(self, device) -> float | None:
        """Peak memory torch allocated on the device since :meth:`reset_peak_memory`, MiB
        (``torch.accelerator.max_memory_allocated`` where available); None on the CPU and
        where the backend keeps no peak."""
        if self.module is None:
            return None
        peak = getattr(self._memory_api(), "max_memory_allocated", None)
        if peak is None:
            return None
        try:
            return float(peak(device)) / 2**20
        except Exception:  # e.g. a backend whose allocator keeps no statistics
            return None

    def get_rng_state(self):
        """The device's random state (None where it has none of its own)."""
        get = None if self.module is None else getattr(self.module, "get_rng_state", None)
        return None if get is None else get()

    def set_rng_state(self, state) -> None:
        """Put back what :meth:`get_rng_state` returned."""
        if state is not None:
            self.module.set_rng_state(state)

    def precision_problem(self, precision: str) -> str | None:
        """Why this device cannot run ``precision``, from its capability queries; None when it
        can. The CPU runs fp32 and bf16 always (bf16 natively or emulated, :meth:`bf16_path`)."""
        if self.module is None:
            return None
        if precision == "bf16":
            query = getattr(self.module, "is_bf16_supported", None)
            if query is not None and not query():
                return (f"this {device_label(self.name)} device cannot run bf16 "
                        f"(torch.{self.name}.is_bf16_supported() is False)")
        if precision == "fp16":
            props = getattr(self.module, "get_device_properties", None)
            with contextlib.suppress(Exception):
                if props is not None and getattr(props(0), "has_fp16", True) is False:
                    return (f"this {device_label(self.name)} device cannot run fp16 "
                            f"(torch.{self.name}.get_device_properties(0).has_fp16 is False)")
        return None

    def bf16_path(self) -> str:
        """How bf16 runs here: ``native`` (bf16 hardware arithmetic), ``emulated`` (bf16
        numerics on fp32 units: the CPU path of :mod:`mnistbench.model` without AVX512-BF16 or
        AMX, or a GPU before bf16 tensor cores), or ``unknown`` (no query says)."""
        if self.module is None:
            from .model import NATIVE_CPU_BF16

            return "native" if NATIVE_CPU_BF16 else "emulated"
        query = getattr(self.module, "is_bf16_supported", None)
        if query is None:
            return "unknown"
        try:
            native = query(including_emulation=False)
        except TypeError:  # torch.xpu's query has no emulation switch
            native = query()
        return "native" if native else "emulated"


class CudaBackend(Backend):
    """``torch.cuda``: NVIDIA CUDA, or AMD ROCm/HIP in torch's ROCm build."""

    def unavailable_reason(self) -> str:
        import torch

        if torch.version.hip:
            reason = "no ROCm GPU is visible to torch (ROCm/HIP build)"
        else:
            reason = "no CUDA GPU is visible to torch"
            if torch.version.cuda is None:
                reason += " (this torch build has no CUDA support)"
            elif rocm_gpu_visible():
                reason += (" (this torch build is for NVIDIA CUDA; an AMD GPU needs torch's "
                           "ROCm build: docker/rocm.Dockerfile)")
        return reason


class XpuBackend(Backend):
    """``torch.xpu``: Intel GPUs."""

    def unavailable_reason(self) -> str:
        import torch

        reason = "no Intel XPU device is visible to torch"
        if not getattr(torch.version, "xpu", None):
            reason += " (this torch build has no XPU support: docker/xpu.Dockerfile)"
        return reason


class MpsBackend(Backend):
    """``torch.mps``: Apple silicon GPUs. It keeps no peak-memory statistics and has no bf16
    query of its own: bf16 needs macOS 14 (``torch.backends.mps.is_macos_or_newer``)."""

    def unavailable_reason(self) -> str:
        import torch

        if not torch.backends.mps.is_built():
            return "MPS is not available: this torch build has no MPS support"
        return "MPS is not available: it needs Apple silicon and macOS 12.3 or newer"

    def precision_problem(self, precision: str) -> str | None:
        if precision == "bf16":
            import torch

            if not torch.backends.mps.is_macos_or_newer(14, 0):
                return ("this Apple MPS device cannot run bf16: it needs macOS 14 or newer "
                        "(torch.backends.mps.is_macos_or_newer(14, 0) is False)")
        return None

    def peak_memory_mb(self, device) -> float | None:
        return None


_BACKEND_CLASSES = {"cuda": CudaBackend, "xpu": XpuBackend, "mps": MpsBackend}


def backend(name: str) -> Backend:
    """The :class:`Backend` of device ``name`` (one of :data:`DEVICES`)."""
    if name not in DEVICES:
        raise UnsupportedCombination(f"unknown device {name!r}; allowed: {', '.join(DEVICES)}")
    if name == "cpu":
        return Backend("cpu")
    import torch

    return _BACKEND_CLASSES[name](name, getattr(torch, name))


def pick_device(name: str):
    """The ``torch.device`` for ``name``, or :class:`DeviceUnavailable` with the reason."""
    import torch

    if name == "cuda":
        if not torch.cuda.is_available():
            reason = backend("cuda").unavailable_reason()
            note = os.environ.get(GPU_NOTE_VAR, "").strip()
            if note:
                reason += f"; {note}"
            raise DeviceUnavailable(reason)
        return torch.device("cuda", 0)
    if name == "cpu":
        return torch.device("cpu")
    chosen = backend(name)
    if not chosen.is_available():
        reason = chosen.unavailable_reason()
        note = os.environ.get(GPU_NOTE_VAR, "").strip()
        raise DeviceUnavailable(f"{reason}; {note}" if note else reason)
    return chosen.torch_device()


def check_precision(name: str, precision: str) -> None:
    """Raise :class:`DeviceUnavailable` with the capability query's answer when device
    ``name`` cannot run ``precision`` (the cell is then ``unavailable``)."""
    problem = backend(name).precision_problem(precision)
    if problem:
        raise DeviceUnavailable(problem)


@dataclass(frozen=True)
class PrecisionPolicy:
    """How a precision is applied: autocast dtype (or None), GradScaler, TF32 switches."""

    name: str
    autocast_dtype: object | None
    grad_scaler: bool
    allow_tf32: bool

    def autocast(self, device_type: str):
        """Context manager for the forward pass."""
        import torch

        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device_type, dtype=self.autocast_dtype)

    def apply_backend_flags(self) -> None:
        """Set the process-wide TF32 switches for this precision (explicitly on or off)."""
        import torch

        torch.backends.cuda.matmul.allow_tf32 = self.allow_tf32
        torch.backends.cudnn.allow_tf32 = self.allow_tf32


def precision_policy(name: str) -> PrecisionPolicy:
    """The :class:`PrecisionPolicy` for one of :data:`PRECISIONS`."""
    import torch

    policies = {
        "fp32": PrecisionPolicy("fp32", None, False, False),
        "tf32": PrecisionPolicy("tf32", None, False, True),
        "bf16": PrecisionPolicy("bf16", torch.bfloat16, False, False),
        "fp16": PrecisionPolicy("fp16", torch.float16, True, False),
    }
    if name not in policies:
        raise UnsupportedCombination(
            f"unknown precision {name!r}; allowed: {', '.join(PRECISIONS)}")
    return policies[name]
