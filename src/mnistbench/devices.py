"""The one place that names devices, precisions and loaders, says which combinations are
supported, and picks the device a cell runs on.

Precisions (allowed values of ``--precision``):

- ``fp32``: plain float32 everywhere; on CUDA, TF32 tensor-core math is switched *off*.
- ``tf32``: float32 storage, TF32 tensor-core matmul and convolution; CUDA only.
- ``bf16``: ``torch.autocast`` to bfloat16; CPU and CUDA.
- ``fp16``: ``torch.autocast`` to float16 with a ``GradScaler``; CUDA only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .envvars import GPU_NOTE_VAR

DEVICES = ("cpu", "cuda")
LOADERS = ("dataloader", "resident")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


#: device -> precisions it supports.
SUPPORTED: dict[str, tuple[str, ...]] = {
    "cpu": ("fp32", "bf16"),
    "cuda": ("fp32", "tf32", "bf16", "fp16"),
}


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


def cuda_hidden() -> bool:
    """Whether $CUDA_VISIBLE_DEVICES hides every GPU ("" or -1), as CUDA itself reads it."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return visible is not None and visible.strip() in ("", "-1")


def nvidia_gpu_visible() -> bool:
    """Whether this machine shows an NVIDIA GPU, found without importing torch (~3 s): the
    driver's /proc entries, else `nvidia-smi -L`; False when CUDA_VISIBLE_DEVICES hides it.
    The workflow's ``devices: auto`` asks this when it builds the matrix."""
    if cuda_hidden():
        return False
    gpus = Path(os.sep, "proc", "driver", "nvidia", "gpus")
    if gpus.is_dir() and any(gpus.iterdir()):
        return True
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20,
                             check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def available_devices() -> list[str]:
    """Devices this machine has: always ``cpu``, plus ``cuda`` when torch sees a GPU."""
    import torch

    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


class DeviceUnavailable(RuntimeError):
    """The requested device does not exist on this machine."""


def pick_device(name: str):
    """The ``torch.device`` for ``name``, or :class:`DeviceUnavailable` with the reason."""
    import torch

    if name == "cuda":
        if not torch.cuda.is_available():
            reason = "no CUDA GPU is visible to torch"
            if torch.version.cuda is None:
                reason += " (this torch build has no CUDA support)"
            note = os.environ.get(GPU_NOTE_VAR, "").strip()
            if note:
                reason += f"; {note}"
            raise DeviceUnavailable(reason)
        return torch.device("cuda", 0)
    return torch.device("cpu")


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
