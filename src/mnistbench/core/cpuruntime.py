"""The CPU runtime a cell trains under: the memory allocator and its tuning, torch's intra-op
and inter-op threads, OpenMP settings and core binding; chosen per cell, and recorded as it
really was (the allocator as loaded, read from the process's own memory maps).

Why it matters: glibc's malloc hands each step's large activation buffers back to the kernel
and faults them in again on the next step (thousands of page faults per step, the zero-fill of
max-pool's backward on fresh pages), which costs up to a third of a bf16 epoch on a CPU.

Allocators (``--allocator``, config ``allocator``):

- ``glibc``: the C library's malloc as it comes (the stock setting, the blog's);
- ``glibc-tuned``: glibc with ``mallopt``: mmap threshold 32 MiB (glibc's maximum), heap
  trimming off, applied in the cell's process before its first tensor;
- ``jemalloc``, ``tcmalloc``: preloaded libraries (``LD_PRELOAD``; Debian's libjemalloc2 and
  libtcmalloc-minimal4), which keep freed memory for reuse;
- ``auto`` (the default): the fastest measured here (:data:`AUTO_ORDER`: tcmalloc, measured
  with ``benchmarks/bench_train.py --allocators``), falling back to ``glibc-tuned`` when it is
  not installed; the summary records what ran.

A preloaded library must be in place when the process starts: ``mnistbench train`` re-executes
itself once with ``LD_PRELOAD`` set (:func:`ensure_allocator`, called by the console script
before anything is imported), and the workflow starts its fork server under the study's
allocator, so forked cells inherit it (a cell with another allocator differs in ``LD_PRELOAD``
and the server refuses it: it then runs as a new process). No torch import here.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ALLOCATORS = ("auto", "glibc", "glibc-tuned", "jemalloc", "tcmalloc")
#: What ``auto`` picks, first found first, else glibc-tuned. Measured side by side
#: (benchmarks/bench_train.py --repeats 3, Intel Xeon AVX512 with native bf16, 2 threads,
#: 2026-12-03, medians): tcmalloc 1.97x faster than glibc in bf16 and 1.13x in fp32,
#: glibc-tuned 1.92x and 1.09x; Debian's jemalloc with its default settings 0.72x and 0.73x
#: (one repeat; slower): jemalloc stays a choice, not a default. tcmalloc also keeps large
#: buffers that glibc's 32 MiB mmap threshold cannot (fp32 at batch 512 and up).
AUTO_ORDER = ("tcmalloc",)
#: Preloadable allocators: their shared libraries, in order of preference, and the package
#: that provides them on Debian/Ubuntu.
LIBRARIES: dict[str, tuple[str, ...]] = {
    "jemalloc": ("libjemalloc.so.2",),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4"),
}
PACKAGES = {"jemalloc": "libjemalloc2", "tcmalloc": "libtcmalloc-minimal4"}
#: Folders searched for the libraries when ldconfig does not know them.
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                "/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")
#: Set in a re-executed process so that it never re-executes again.
REEXEC_VAR = "MNISTBENCH_ALLOCATOR_REEXEC"

# glibc's mallopt parameters (malloc.h) and the tuned values.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
TUNED_MMAP_THRESHOLD = 32 * 2**20  # B, glibc's largest allowed mmap threshold
TUNED_TRIM_THRESHOLD = 2**31 - 1  # B, i.e. never give the top of the heap back
TUNING_TEXT = "mallopt: mmap threshold 32 MiB, trim threshold 2 GiB (heap trimming off)"

#: Environment variables that steer OpenMP and core binding, recorded when set.
OMP_VARIABLES = ("OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "OMP_WAIT_POLICY",
                 "OMP_SCHEDULE", "KMP_AFFINITY", "KMP_BLOCKTIME", "GOMP_CPU_AFFINITY",
                 "MKL_NUM_THREADS")

_TUNED: list[str] = []  # the tuning this process applied (glibc-tuned), for the record


class AllocatorError(ValueError):
    """The requested allocator cannot be had here; the message names the package."""


def library_path(allocator: str) -> str | None:
    """The shared library of a preloadable ``allocator`` on this machine, or None."""
    for name in LIBRARIES.get(allocator, ()):
        found = ctypes.util.find_library(name.removeprefix("lib").split(".so")[0])
        if found == name:
            return name  # ldconfig knows it: the dynamic loader finds it by name
        for folder in LIBRARY_DIRS:
            path = Path(folder, name)
            if path.is_file():
                return str(path)
    return None


def resolve(requested: str) -> tuple[str, str | None]:
    """(allocator, library or None) for ``requested``: ``auto`` becomes the first of
    :data:`AUTO_ORDER` that is installed, else ``glibc-tuned``. Raises
    :class:`AllocatorError` for a library allocator that is not installed."""
    if requested not in ALLOCATORS:
        raise AllocatorError(f"unknown allocator {requested!r}; allowed: {', '.join(ALLOCATORS)}")
    if requested == "auto":
        for allocator in AUTO_ORDER:
            library = library_path(allocator)
            if library:
                return allocator, library
        return "glibc-tuned", None
    if requested in LIBRARIES:
        library = library_path(requested)
        if library is None:
            raise AllocatorError(
                f"allocator {requested} is not installed: none of "
                f"{', '.join(LIBRARIES[requested])} was found. Install it (apt-get install "
                f"{PACKAGES[requested]}; scripts/setup-system does as root), or choose "
                "--allocator auto, glibc-tuned or glibc.")
        return requested, library
    return requested, None


def _preload_entries(value: str) -> list[str]:
    return [entry for entry in value.replace(":", " ").split() if entry]


def _is_allocator_library(entry: str) -> bool:
    name = Path(entry).name
    return any(name.startswith(lib.split(".so")[0]) for libs in LIBRARIES.values()
               for lib in libs)


def preload_environment(env: Mapping[str, str], library: str | None) -> dict[str, str]:
    """``env`` with ``LD_PRELOAD`` holding ``library`` (first) and no other allocator library;
    without ``library``, with every allocator library taken out of it."""
    others = [e for e in _preload_entries(env.get("LD_PRELOAD", ""))
              if not _is_allocator_library(e)]
    entries = ([library] if library else []) + others
    out = {k: v for k, v in env.items() if k != "LD_PRELOAD"}
    if entries:
        out["LD_PRELOAD"] = " ".join(entries)
    return out


def loaded_allocator(maps: Path = Path("/proc/self/maps")) -> tuple[str, str]:
    """(allocator, library path) as this process really has it, read from its memory maps:
    ``jemalloc`` or ``tcmalloc`` when their library is mapped, else ``glibc`` (with
    ``-tuned`` when :func:`tune_glibc` ran in this process)."""
    try:
        text = maps.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        path = line.split(maxsplit=5)[5] if len(line.split(maxsplit=5)) == 6 else ""
        name = Path(path).name
        for allocator, libs in LIBRARIES.items():
            if any(name.startswith(lib.split(".so")[0] + ".so") for lib in libs):
                return allocator, path
    return ("glibc-tuned" if _TUNED else "glibc"), ""


def tune_glibc() -> str:
    """Apply the glibc tuning (:data:`TUNING_TEXT`) to this process; the text recorded."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    ok = libc.mallopt(M_MMAP_THRESHOLD, TUNED_MMAP_THRESHOLD) == 1
    ok = libc.mallopt(M_TRIM_THRESHOLD, TUNED_TRIM_THRESHOLD) == 1 and ok
    if not ok:
        raise AllocatorError("glibc's mallopt refused the tuning; this C library may not be "
                             "glibc. Choose --allocator glibc (or jemalloc/tcmalloc).")
    if not _TUNED:
        _TUNED.append(TUNING_TEXT)
    return TUNING_TEXT


def allocator_option(p: argparse.ArgumentParser) -> None:
    """Declare ``--allocator`` on ``p`` (``mnistbench train`` declares it with this, and the
    console script reads it with it before anything is imported)."""
    p.add_argument("--allocator", default="auto", choices=ALLOCATORS,
                   help="memory allocator of the cell: auto (default: tcmalloc where "
                   "installed, else glibc-tuned), glibc (stock), glibc-tuned (mallopt), "
                   "jemalloc, tcmalloc (preloaded; Debian libjemalloc2, libtcmalloc-minimal4)")


def _allocator_of(argv: Sequence[str]) -> str:
    """The value of ``--allocator`` in a ``train`` command line (default ``auto``), read with
    the train parser's own option (``--allocator=X`` included)."""
    parser = argparse.ArgumentParser(add_help=False)
    allocator_option(parser)
    known, _ = parser.parse_known_args(list(argv))
    return known.allocator


def ensure_allocator(argv: Sequence[str]) -> None:
    """For ``mnistbench train ARGV``: when the requested allocator's library is not what this
    process has preloaded (or a library is preloaded that should not be), re-execute the same
    command once with ``LD_PRELOAD`` set right; return when nothing needs to change. An
    unknown or missing allocator is left to the train command to report."""
    if os.environ.get(REEXEC_VAR):
        return
    try:
        allocator, library = resolve(_allocator_of(argv))
    except (AllocatorError, SystemExit):
        return
    loaded, _ = loaded_allocator()
    preloaded = [e for e in _preload_entries(os.environ.get("LD_PRELOAD", ""))
                 if _is_allocator_library(e)]
    wants_library = allocator in LIBRARIES
    if (wants_library and loaded == allocator) or (not wants_library and not preloaded
                                                    and loaded.startswith("glibc")):
        return
    env = preload_environment(os.environ, library)
    env[REEXEC_VAR] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "mnistbench.console", "train", *argv],
              env)


def prepare(requested: str) -> dict[str, str]:
    """In the cell's process, before its first tensor: apply ``requested`` where it is done
    in-process (``glibc-tuned``), and return the record of what runs (:func:`record`).
    Raises :class:`AllocatorError` when the allocator cannot be had."""
    allocator, _ = resolve(requested)
    if allocator == "glibc-tuned":
        tune_glibc()
    return record()


def _cpu_list(cpus: set[int]) -> str:
    """{0, 1, 2, 5} -> "0-2,5"."""
    ranges: list[str] = []
    for cpu in sorted(cpus):
        if ranges and "-" in ranges[-1] and int(ranges[-1].split("-")[1]) == cpu - 1:
            ranges[-1] = f"{ranges[-1].split('-')[0]}-{cpu}"
        elif ranges and "-" not in ranges[-1] and int(ranges[-1]) == cpu - 1:
            ranges[-1] = f"{ranges[-1]}-{cpu}"
        else:
            ranges.append(str(cpu))
    return ",".join(ranges)


def record() -> dict[str, str]:
    """What the cell's CPU runtime really is: allocator as loaded (and its library), the
    tuning, torch's inter-op threads, OpenMP variables, core binding (the keys of
    :data:`mnistbench.core.schema.ENV_FIELDS` it fills)."""
    allocator, library = loaded_allocator()
    interop = ""
    torch = sys.modules.get("torch")
    if torch is not None:
        interop = str(torch.get_num_interop_threads())
    try:
        affinity = _cpu_list(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = ""
    omp = "; ".join(f"{name}={os.environ[name]}" for name in OMP_VARIABLES if name in os.environ)
    return {
        "allocator_loaded": allocator,
        "allocator_library": library,
        "malloc_tuning": "; ".join(_TUNED),
        "interop_threads": interop,
        "omp_settings": omp,
        "cpu_affinity": affinity,
    }
