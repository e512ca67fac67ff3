"""The hardware record that tells machines apart: what every cell records beyond the model
names (the ``env`` keys of :data:`HARDWARE_FIELDS`, part of
:data:`mnistbench.core.schema.ENV_FIELDS`), and torch's own ``collect_env`` report, saved once per
environment beside its runs.

Two machines with the same CPU model name can differ in what torch does with them: the vector
ISA torch dispatches to (``torch.backends.cpu.get_cpu_capability()``: AVX2, AVX512, ...),
whether bf16 has hardware support (AVX512-BF16, AMX) or runs emulated, the oneDNN and MKL builds,
the frequency governor and turbo. :func:`record` reads them; :func:`mnistbench.results.aggregate.
hardware_label` names the hardware by them, so such machines are never pooled.

Accelerators: :func:`record` also names the accelerator torch sees (``gpu_backend``: cuda,
rocm, xpu or mps) and, for xpu and mps (which :mod:`mnistbench.measure.sysinfo`'s CUDA fields do not
cover), its name, count and memory. Nothing here raises: what cannot be read is ``""``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from mnistbench.core import atomic

#: The env keys :func:`record` fills (the GPU keys only for xpu and mps, and gpu_driver for
#: rocm).
HARDWARE_FIELDS = ("gpu_backend", "hip", "cpu_capability", "cpu_flags", "cpu_bf16", "onednn",
                   "mkl", "cpu_governor", "cpu_turbo")

#: CPU flags that decide which kernels torch runs (x86: /proc/cpuinfo "flags"; arm64:
#: "Features"), recorded in this order where present.
RELEVANT_CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
                      "amx_int8", "amx_fp16", "sve", "sve2", "bf16")

#: File name of torch's collect_env report in ``results/runs/{env}/``.
COLLECT_ENV_FILE = "collect_env.txt"


def cpu_flags(root: Path | str = os.sep) -> str:
    """The :data:`RELEVANT_CPU_FLAGS` this CPU has, space-separated (first CPU's line)."""
    try:
        text = Path(root, "proc", "cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            have = set(value.split())
            return " ".join(f for f in RELEVANT_CPU_FLAGS if f in have)
    return ""


def cpu_governor(root: Path | str = os.sep) -> str:
    """The cpufreq scaling governor(s) of the CPUs, e.g. ``performance`` (distinct values
    joined by commas); ``""`` where cpufreq is not exposed (many VMs and containers)."""
    found = set()
    with contextlib.suppress(OSError):
        cpus = Path(root, "sys", "devices", "system", "cpu")
        for path in cpus.glob("cpu[0-9]*/cpufreq/scaling_governor"):
            with contextlib.suppress(OSError):
                found.add(path.read_text(encoding="ascii").strip())
    return ",".join(sorted(v for v in found if v))


def cpu_turbo(root: Path | str = os.sep) -> str:
    """``on`` or ``off``: turbo/boost as the kernel reports it (intel_pstate's ``no_turbo``,
    else cpufreq's ``boost``); ``""`` where neither is readable."""
    cpu = Path(root, "sys", "devices", "system", "cpu")
    with contextlib.suppress(OSError, ValueError):
        return "off" if int((cpu / "intel_pstate" / "no_turbo").read_text()) else "on"
    with contextlib.suppress(OSError, ValueError):
        return "on" if int((cpu / "cpufreq" / "boost").read_text()) else "off"
    return ""


def parse_config(text: str) -> dict[str, str]:
    """oneDNN and MKL versions from ``torch.__config__.show()`` (``""`` when not built in)."""
    onednn = re.search(r"(?:MKL-DNN|oneDNN)\s+v(\d[\w.]*)", text)
    mkl = re.search(r"Math Kernel Library Version\s+(\d[\w.]*)", text)
    return {"onednn": onednn.group(1) if onednn else "", "mkl": mkl.group(1) if mkl else ""}


@functools.lru_cache(maxsize=1)
def _torch_config() -> dict[str, str]:
    import torch

    return parse_config(torch.__config__.show())


def gpu_backend() -> str:
    """The accelerator torch sees: ``cuda`` (NVIDIA), ``rocm`` (AMD, torch's ROCm build, whose
    device type is still cuda), ``xpu``, ``mps``, or ``""``."""
    import torch

    with contextlib.suppress(Exception):
        if torch.cuda.is_available():
            return "rocm" if torch.version.hip else "cuda"
    with contextlib.suppress(Exception):
        if torch.xpu.is_available():
            return "xpu"
    with contextlib.suppress(Exception):
        if torch.backends.mps.is_available():
            return "mps"
    return ""


def _accelerator_fields(backend: str) -> dict[str, Any]:
    """gpu_name, gpu_count, gpu_memory_gb (and gpu_driver) of an xpu, mps or rocm device."""
    import torch

    out: dict[str, Any] = {}
    if backend == "xpu":
        props = torch.xpu.get_device_properties(0)
        out.update(gpu_name=props.name, gpu_count=torch.xpu.device_count(),
                   gpu_memory_gb=round(props.total_memory / 2**30, 2),
                   gpu_driver=str(getattr(props, "driver_version", "")))
    elif backend == "mps":
        name = ""
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            name = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"],
                                  capture_output=True, text=True, timeout=5,
                                  check=False).stdout.strip()
        out.update(gpu_name=name or "Apple silicon GPU", gpu_count=1,
                   gpu_memory_gb=round(torch.mps.recommended_max_memory() / 2**30, 2))
    elif backend == "rocm":
        with contextlib.suppress(OSError):
            out["gpu_driver"] = Path("/sys/module/amdgpu/version").read_text().strip()
    return out


def record(root: Path | str = os.sep) -> dict[str, Any]:
    """The hardware record of this process (keys :data:`HARDWARE_FIELDS`, plus the GPU keys
    of an xpu or mps device); never raises."""
    out: dict[str, Any] = {"cpu_flags": cpu_flags(root), "cpu_governor": cpu_governor(root),
                           "cpu_turbo": cpu_turbo(root)}
    try:
        import torch
    except Exception:
        return out
    with contextlib.suppress(Exception):
        out["cpu_capability"] = str(torch.backends.cpu.get_cpu_capability())
    with contextlib.suppress(Exception):
        from mnistbench.measure.model import NATIVE_CPU_BF16

        out["cpu_bf16"] = "native" if NATIVE_CPU_BF16 else "emulated"
    with contextlib.suppress(Exception):
        out.update(_torch_config())
    out["hip"] = str(getattr(torch.version, "hip", None) or "")
    with contextlib.suppress(Exception):
        backend = gpu_backend()
        out["gpu_backend"] = backend
        out.update(_accelerator_fields(backend))
    return out


def collect_env_report() -> str:
    """torch's own environment report (``python -m torch.utils.collect_env``)."""
    from torch.utils import collect_env

    return collect_env.get_pretty_env_info() + "\n"


def save_collect_env(path: Path | str) -> Path:
    """Write :func:`collect_env_report` to ``path`` atomically; return the path."""
    return atomic.write_text(path, collect_env_report())
