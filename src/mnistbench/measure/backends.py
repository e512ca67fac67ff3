"""The torch device layer of the timed process: :class:`Backend` drives the device a cell
runs on (availability, the torch device, synchronisation, timing events, peak memory, random
state, capability queries), one implementation over the ``torch.cuda``-style module of each
backend (``torch.cuda``, ``torch.xpu``, ``torch.mps``); :func:`backend` picks it, and
:func:`precision_policy` applies a precision. Tests drive the trainer through a fake module of
the same shape. The names of devices and precisions, the supported combinations and the
torch-free discovery of a machine's devices are :mod:`mnistbench.core.devices`."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

from mnistbench.core.devices import (
    ACCELERATORS,
    DEVICES,
    PRECISIONS,
    UnsupportedCombination,
    device_label,
    rocm_gpu_visible,
)
from mnistbench.core.envvars import GPU_NOTE_VAR


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
        numerics on fp32 units: the CPU path of :mod:`mnistbench.measure.model` without
        AVX512-BF16 or AMX, or a GPU before bf16 tensor cores), or ``unknown`` (no query says)."""
        if self.module is None:
            from mnistbench.measure.model import NATIVE_CPU_BF16

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
