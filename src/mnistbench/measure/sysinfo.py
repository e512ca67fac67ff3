"""What every cell records about the machine that ran it: versions, CPU, GPU, OS, host, git
revision, container and SLURM job (the keys of :data:`mnistbench.core.schema.ENV_FIELDS`).

:func:`capture` never raises: a value that cannot be found is ``""`` (text) or ``None``
(numbers). Facts that cannot change while the process runs (git revision, CPU model, GPU
driver) are looked up once and cached; environment variables are read on every call.

Environment variables read:

- ``MNISTBENCH_ENV``: the environment name (:func:`mnistbench.core.study.environment_name`).
- ``MNISTBENCH_CONTAINER``: image name, set when the container image is built.
- ``MNISTBENCH_CONTAINER_IMAGE_ID``: image ID (``sha256:...``), set by the workflow's docker
  runner (:mod:`mnistbench.launch.container`) for each cell it starts.
- ``MNISTBENCH_GIT_REVISION``: git revision baked into a container image, used when the
  package is not inside a git checkout.
- ``MNISTBENCH_WORKFLOW_DIGEST``: the digest of the workflow's bench rule, set by the workflow
  (:func:`mnistbench.core.provenance.workflow_digest`).
- ``SLURM_JOB_ID``, ``SLURM_JOB_PARTITION``, ``SLURMD_NODENAME``: set by SLURM.
- ``APPTAINER_CONTAINER`` / ``SINGULARITY_CONTAINER``: set by Apptainer (runtime name).
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import socket
from typing import Any

from mnistbench import __version__
from mnistbench.core import cpuruntime
from mnistbench.core.envvars import CONTAINER_VAR, IMAGE_ID_VAR, LAUNCH_VAR, WORKFLOW_DIGEST_VAR
from mnistbench.core.provenance import git_revision, running_code_digest
from mnistbench.core.schema import ENV_FIELDS
from mnistbench.measure import hardware

#: ENV_FIELDS holding numbers; unknown ones are None, unknown text fields are "".
NUMERIC_FIELDS = frozenset({"cpu_cores_logical", "cpu_cores_physical", "torch_threads",
                            "memory_gb", "gpu_count", "gpu_memory_gb"})


@functools.lru_cache(maxsize=1)
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or ""


@functools.lru_cache(maxsize=1)
def _os_description() -> str:
    """E.g. ``Debian GNU/Linux 12 (bookworm); Linux 6.1.0-18-amd64 x86_64``."""
    kernel = " ".join(p for p in (platform.system(), platform.release(), platform.machine()) if p)
    distro = ""
    with contextlib.suppress(OSError, AttributeError):  # no os-release file, Python < 3.10
        distro = platform.freedesktop_os_release().get("PRETTY_NAME", "")
    return f"{distro}; {kernel}" if distro else kernel


@functools.lru_cache(maxsize=1)
def _nvidia_driver() -> str:
    """NVIDIA driver version from NVML, ``""`` without a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # NVML missing, no driver, no permission: unknown
        return ""
    return version.decode() if isinstance(version, bytes) else str(version)


def _torch_fields() -> dict[str, Any]:
    out: dict[str, Any] = {}
    try:
        import torch
    except Exception:  # no torch: every torch field unknown
        return out
    out["torch"] = str(torch.__version__)
    out["cuda"] = torch.version.cuda or ""
    out["torch_threads"] = torch.get_num_threads()
    out["gpu_count"] = 0
    try:
        if torch.cuda.is_available():
            out["cudnn"] = str(torch.backends.cudnn.version() or "")
            out["gpu_count"] = torch.cuda.device_count()
            props = torch.cuda.get_device_properties(0)
            out["gpu_name"] = props.name
            out["gpu_memory_gb"] = round(props.total_memory / 2**30, 2)
    except Exception:  # a broken CUDA setup must not stop the capture
        pass
    return out


def _psutil_fields() -> dict[str, Any]:
    try:
        import psutil
    except Exception:
        return {"cpu_cores_logical": os.cpu_count()}
    out: dict[str, Any] = {}
    for key, logical in (("cpu_cores_logical", True), ("cpu_cores_physical", False)):
        try:
            out[key] = psutil.cpu_count(logical=logical)
        except Exception:
            out[key] = None
    try:
        out["memory_gb"] = round(psutil.virtual_memory().total / 2**30, 2)
    except Exception:
        out["memory_gb"] = None
    return out


def _safe(func, default):
    try:
        return func()
    except Exception:
        return default


def capture() -> dict[str, Any]:
    """The environment of this process, with exactly the keys of
    :data:`mnistbench.core.schema.ENV_FIELDS`; never raises."""
    env = os.environ
    info: dict[str, Any] = {
        "hostname": _safe(socket.gethostname, ""),
        "os": _safe(_os_description, ""),
        "python": platform.python_version(),
        "cpu_model": _safe(_cpu_model, ""),
        "gpu_driver": _safe(_nvidia_driver, ""),
        "git_revision": _safe(git_revision, ""),
        "code_digest": _safe(running_code_digest, ""),
        "workflow_digest": env.get(WORKFLOW_DIGEST_VAR, "").strip(),
        "mnistbench": __version__,
        "container": env.get(CONTAINER_VAR, ""),
        "container_image_id": env.get(IMAGE_ID_VAR, ""),
        "slurm_job_id": env.get("SLURM_JOB_ID", ""),
        "slurm_partition": env.get("SLURM_JOB_PARTITION", ""),
        "slurm_node": env.get("SLURMD_NODENAME", ""),
        "launch": env.get(LAUNCH_VAR) or "exec",
    }
    info.update(_safe(_torch_fields, {}))
    info.update(_safe(hardware.record, {}))  # ISA, bf16, oneDNN/MKL, governor; xpu/mps GPU
    info.update(_safe(_psutil_fields, {}))
    info.update(_safe(cpuruntime.record, {}))  # allocator as loaded, threads, OpenMP, binding
    return {key: info.get(key, None if key in NUMERIC_FIELDS else "") for key in ENV_FIELDS}
