"""A background resource sampler that runs beside a training cell: process and system CPU use,
resident memory, GPU utilisation, memory and power (NVML) and GPU and CPU energy counters,
one row of :data:`mnistbench.core.schema.RESOURCE_COLUMNS` every ``interval`` seconds.

Usage (the trainer)::

    mon = ResourceMonitor(interval=0.5, gpu_index=0)   # gpu_index None: no NVML
    mon.start()
    mon.set_stage("warmup")
    ...
    mon.set_stage("train"); e0 = mon.energy()
    ...                                               # timed epochs
    e1 = mon.energy(); mon.set_stage("done")
    mon.stop()
    mon.write_csv(out / "resources.csv"); mon.summary("train")

How the numbers are measured:

- ``proc_cpu_pct``: CPU seconds (user + system) of the process and all its descendants
  (DataLoader workers) since the previous row, over the wall time since then, × 100, so 100 is
  one busy core. A child that exits between two rows is still counted: once its parent reaps
  it, its time shows up in the parent's ``children_user``/``children_system`` counters, and
  only the part not seen before is added.
- ``sys_cpu_pct``: busy share of all cores since the previous row (100 = every core busy),
  from ``psutil.cpu_times()`` deltas (the same formula as ``psutil.cpu_percent``, with private
  state, so other callers of ``cpu_percent`` neither disturb nor are disturbed by it).
- ``rss_mb``: sum of the resident set sizes of the process and its descendants (pages shared
  between a parent and its forked workers are counted once per process).
- GPU columns: NVML (``pynvml``, imported lazily) for one NVIDIA device, or AMD SMI (the
  ``amdsmi`` module of ROCm, when importable) for an AMD one (``gpu_vendor="amd"``); empty
  when ``gpu_index`` is None or the library cannot start (Intel XPU and Apple MPS have no power
  source here). ``gpu_energy_j`` comes from the board's energy counter
  (``gpu_energy_source == "nvml-counter"`` / ``"amdsmi-counter"``) or, on boards without one,
  from integrating the power readings over time with the trapezoid rule
  (``"nvml-power-integral"`` / ``"amdsmi-power-integral"``). The AMD SMI path is tested with a
  fake module only: no AMD GPU has run it.
- GPU state (:meth:`ResourceMonitor.record_gpu_state`): clocks, enforced power limit and clock
  throttle reasons, read when the trainer asks (the start and end of the timed epochs).
- ``cpu_energy_j``: sum of the package domains of the powercap RAPL interface
  (``/sys/class/powercap/intel-rapl:N/energy_uj``, also used for AMD CPUs), wraparound handled
  with ``max_energy_range_uj`` (``cpu_energy_source == "rapl"``); empty where those files are
  missing or unreadable (kernels since 5.10 let only root read them).

Cost: on Linux the sampler reads ``/proc`` directly (one ``stat`` file per process of the tree
and the ``children`` lists of its threads, never the whole of ``/proc``), about 0.5 ms per
sample, i.e. about 0.15% of one core at the default 0.5 s period.

Each row is labelled with the stage that was current during the interval it ends:
:meth:`ResourceMonitor.set_stage` takes a sample before switching, so no interval straddles
two stages. The first row (taken by :meth:`start`) has empty CPU columns: there is no interval
before it. A sampling error is recorded in :attr:`ResourceMonitor.errors` and the sampler keeps
going.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from mnistbench.core import atomic
from mnistbench.core.schema import RESOURCE_COLUMNS
from mnistbench.measure.gpusampler import AmdSmiGpu, NvmlGpu

#: Allowed values of the ``stage`` column, in the order a cell goes through them.
STAGES = ("setup", "warmup", "train", "done")

#: Default sampling period in seconds.
DEFAULT_INTERVAL_S = 0.5

#: Where the powercap sysfs tree lives.
DEFAULT_POWERCAP_ROOT = Path("/sys/class/powercap")

#: At most this many distinct error messages are kept in ``errors``.
MAX_ERRORS = 50

_MIB = 2**20


# --------------------------------------------------------------------------- process tree


def _has_proc_children(pid: int) -> bool:
    """Whether the kernel offers ``/proc/PID/task/TID/children`` (CONFIG_PROC_CHILDREN)."""
    return os.path.exists(f"/proc/{pid}/task/{pid}/children")


def _read_small(path: str) -> bytes:
    """Contents of a small /proc file (one unbuffered read: cheaper than ``open()``)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 65536)
    finally:
        os.close(fd)


def _descendant_pids(pid: int) -> list[int]:
    """PIDs of every descendant of ``pid``, read from ``/proc/PID/task/TID/children``: cheap,
    as it touches only this process tree (psutil's ``children()`` reads all of /proc)."""
    out: list[int] = []
    seen = {pid}
    queue = [pid]
    while queue:
        current = queue.pop()
        try:
            tids = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue  # exited meanwhile
        for tid in tids:
            try:
                text = _read_small(f"/proc/{current}/task/{tid}/children")
            except OSError:
                continue  # the thread or process ended meanwhile
            for child in text.split():
                child_pid = int(child)
                if child_pid not in seen:
                    seen.add(child_pid)
                    out.append(child_pid)
                    queue.append(child_pid)
    return out


@dataclass(frozen=True)
class _ProcTimes:
    ppid: int
    own_s: float  # user + system CPU seconds of the process itself
    reaped_s: float  # children_user + children_system: CPU seconds of its reaped children


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # ticks per s
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096  # bytes


def _read_proc_stat(pid: int) -> tuple[tuple[int, float], _ProcTimes, int] | None:
    """((pid, start time in ticks), CPU times, RSS bytes) from ``/proc/PID/stat`` in one
    read; None when the process is gone."""
    try:
        data = _read_small(f"/proc/{pid}/stat")
    except OSError:
        return None
    # "pid (comm) state ppid ..."; comm may hold spaces and parentheses: split at the last ")".
    fields = data[data.rindex(b")") + 2:].split()
    # fields[i] is stat field i + 3 (proc(5)): 4 ppid, 14-17 utime stime cutime cstime,
    # 22 starttime, 24 rss (pages).
    times = _ProcTimes(
        ppid=int(fields[1]),
        own_s=(int(fields[11]) + int(fields[12])) / _CLK_TCK,
        reaped_s=(int(fields[13]) + int(fields[14])) / _CLK_TCK,
    )
    return (pid, float(fields[19])), times, int(fields[21]) * _PAGE


class ProcessTree:
    """CPU seconds and resident memory of a process and all its descendants, read as deltas
    between calls of :meth:`read`. On Linux it reads ``/proc`` directly (one file per
    process, plus the ``children`` lists of this tree only); elsewhere it uses psutil."""

    def __init__(self, pid: int | None = None):
        self.root = psutil.Process(pid if pid is not None else os.getpid())
        self._use_proc_children = (_has_proc_children(self.root.pid)
                                   and _read_proc_stat(self.root.pid) is not None)
        self._last: dict[tuple[int, float], _ProcTimes] | None = None

    def _snapshot(self) -> tuple[dict[tuple[int, float], _ProcTimes], int]:
        """{(pid, start time): CPU times} of every process in the tree, and their RSS sum."""
        current: dict[tuple[int, float], _ProcTimes] = {}
        rss = 0
        if self._use_proc_children:
            for pid in [self.root.pid, *_descendant_pids(self.root.pid)]:
                got = _read_proc_stat(pid)
                if got is None:
                    if pid == self.root.pid:
                        raise psutil.NoSuchProcess(pid)
                    continue  # exited meanwhile
                key, times, proc_rss = got
                current[key] = times
                rss += proc_rss
            return current, rss
        for proc in [self.root, *self.root.children(recursive=True)]:
            try:
                with proc.oneshot():
                    cpu = proc.cpu_times()
                    key = (proc.pid, proc.create_time())
                    ppid = proc.ppid()
                    rss += proc.memory_info().rss
            except psutil.Error:  # exited, zombie or not ours: skip it this time
                if proc is self.root:
                    raise
                continue
            current[key] = _ProcTimes(
                ppid=ppid,
                own_s=cpu.user + cpu.system,
                reaped_s=getattr(cpu, "children_user", 0.0)
                + getattr(cpu, "children_system", 0.0),
            )
        return current, rss

    def read(self) -> tuple[float | None, int]:
        """(CPU seconds used by the tree since the previous call, None on the first call;
        summed resident set size in bytes now)."""
        current, rss = self._snapshot()
        last, self._last = self._last, current
        if last is None:
            return None, rss
        # Processes seen last time and gone now: their last-seen totals were counted already,
        # so subtract them from their parent's reaped-children counter when it grows.
        gone_by_parent: dict[int, float] = defaultdict(float)
        for key, rec in last.items():
            if key not in current:
                gone_by_parent[rec.ppid] += rec.own_s + rec.reaped_s
        used = 0.0
        for key, rec in current.items():
            prev = last.get(key)
            own = rec.own_s - prev.own_s if prev else rec.own_s
            reaped = rec.reaped_s - prev.reaped_s if prev else rec.reaped_s
            used += max(0.0, own) + max(0.0, reaped - gone_by_parent.get(key[0], 0.0))
        return used, rss


class SystemCpu:
    """Busy share of all cores between calls, from ``psutil.cpu_times()`` deltas."""

    def __init__(self):
        self._last: tuple[float, float] | None = None

    @staticmethod
    def _now() -> tuple[float, float]:
        t = psutil.cpu_times()
        total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
        idle = t.idle + getattr(t, "iowait", 0.0)
        return total, idle

    def read(self) -> float | None:
        """Percent of all cores busy since the previous call (100 = all); None on the first
        call and when no clock tick passed."""
        total, idle = self._now()
        last, self._last = self._last, (total, idle)
        if last is None:
            return None
        d_total, d_idle = total - last[0], idle - last[1]
        if d_total <= 0:
            return None
        return min(100.0, max(0.0, 100.0 * (d_total - d_idle) / d_total))


# --------------------------------------------------------------------------- RAPL


class Rapl:
    """CPU package energy from the powercap RAPL interface, in joules since construction.

    ``root`` is the powercap folder (``/sys/class/powercap``; a fake tree in tests). Only the
    top-level domains ``intel-rapl:N`` (one per package; not ``intel-rapl:N:M`` subdomains,
    which the package already contains, nor a ``psys`` platform domain, which contains the
    packages) are summed. :attr:`available` is False when no domain can be read."""

    def __init__(self, root: Path | str = DEFAULT_POWERCAP_ROOT):
        self.root = Path(root)
        self.domains: list[tuple[Path, int]] = []  # (energy_uj file, max_energy_range_uj)
        self._last: list[int] = []
        self._total_uj = 0
        try:
            candidates = sorted(self.root.glob("intel-rapl:*"))
        except OSError:
            candidates = []
        for folder in candidates:
            if folder.name.count(":") != 1:
                continue
            try:
                name = (folder / "name").read_text(encoding="ascii").strip()
            except OSError:
                name = ""
            if name.startswith("psys"):
                continue
            try:
                value = int((folder / "energy_uj").read_text(encoding="ascii"))
                max_range = int((folder / "max_energy_range_uj").read_text(encoding="ascii"))
            except (OSError, ValueError):
                continue  # unreadable (permissions since Linux 5.10) or malformed
            self.domains.append((folder / "energy_uj", max_range))
            self._last.append(value)

    @property
    def available(self) -> bool:
        return bool(self.domains)

    def read(self) -> float | None:
        """Joules used by all packages since construction; None when a counter cannot be read
        now (the next successful read still counts the energy in between)."""
        if not self.domains:
            return None
        values = []
        for path, _ in self.domains:
            try:
                values.append(int(path.read_text(encoding="ascii")))
            except (OSError, ValueError):
                return None
        for i, (value, (_, max_range)) in enumerate(zip(values, self.domains, strict=True)):
            last = self._last[i]
            # The counter runs from 0 to max_energy_range_uj and wraps to 0.
            self._total_uj += value - last if value >= last else max_range - last + value
            self._last[i] = value
        return self._total_uj / 1e6


# --------------------------------------------------------------------------- the monitor

_DIGITS = {"t_s": 3, "proc_cpu_pct": 1, "sys_cpu_pct": 1, "rss_mb": 1, "gpu_util_pct": 1,
           "gpu_mem_mb": 1, "gpu_power_w": 2, "gpu_energy_j": 3, "cpu_energy_j": 3}


class ResourceMonitor:
    """Samples resources every ``interval`` seconds on a daemon thread; see the module doc.

    ``interval``: period in s (> 0). ``gpu_index``: CUDA device index to watch through NVML,
    None for no GPU columns. ``gpu_uuid``: NVML UUID of that device (``GPU-…``; torch's
    ``get_device_properties(i).uuid`` works), the surest way to find it behind
    ``CUDA_VISIBLE_DEVICES`` or cgroups. ``pid``: root of the watched process tree (default:
    this process). ``powercap_root``: powercap sysfs folder. ``nvml``: an object with pynvml's
    functions (tests), default ``pynvml``. ``gpu_vendor``: ``nvidia`` (NVML) or ``amd`` (AMD
    SMI, through ``amdsmi``: an object with its functions, default the ``amdsmi`` module).
    """

    def __init__(self, interval: float = DEFAULT_INTERVAL_S, gpu_index: int | None = None, *,
                 gpu_uuid: str | None = None, pid: int | None = None,
                 powercap_root: Path | str = DEFAULT_POWERCAP_ROOT, nvml: Any = None,
                 gpu_vendor: str = "nvidia", amdsmi: Any = None):
        if not (isinstance(interval, int | float) and interval > 0):
            raise ValueError(f"ResourceMonitor interval must be a number of seconds > 0, "
                             f"got {interval!r}; pass e.g. interval=0.5.")
        if gpu_index is not None and (isinstance(gpu_index, bool) or not isinstance(gpu_index, int)
                                      or gpu_index < 0):
            raise ValueError(f"ResourceMonitor gpu_index must be None (no GPU) or a CUDA device "
                             f"index >= 0, got {gpu_index!r}.")
        self.interval = float(interval)
        self.gpu_index = gpu_index
        self.gpu_uuid = gpu_uuid
        self.pid = pid if pid is not None else os.getpid()
        self.powercap_root = Path(powercap_root)
        self._nvml = nvml
        self.gpu_vendor = gpu_vendor
        self._amdsmi = amdsmi
        #: One dict per sample, keys of schema.RESOURCE_COLUMNS in order; None = not measured.
        self.rows: list[dict[str, Any]] = []
        #: Distinct error messages met while sampling ("where: Type: message").
        self.errors: list[str] = []
        #: "nvml-counter", "nvml-power-integral", "amdsmi-counter", "amdsmi-power-integral"
        #: or None (no GPU energy).
        self.gpu_energy_source: str | None = None
        #: "rapl" or None (no CPU energy).
        self.cpu_energy_source: str | None = None
        #: Why the GPU columns are empty although gpu_index was given; None otherwise.
        self.gpu_unavailable_reason: str | None = None
        #: CPU seconds the sampler thread itself has used (time.thread_time).
        self.sampler_cpu_s = 0.0
        self._dts: list[float] = []  # wall seconds covered by each row
        self._stage = STAGES[0]
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._state = "new"  # new -> running -> stopped
        self._t0 = 0.0
        self._last_t: float | None = None
        self._last_energy: dict[str, float | None] = {"gpu_j": None, "cpu_j": None}
        self._tree: ProcessTree | None = None
        self._sys: SystemCpu | None = None
        self._rapl: Rapl | None = None
        self._gpu: NvmlGpu | AmdSmiGpu | None = None
        self._gpu_states: dict[str, dict[str, Any] | None] = {}

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> ResourceMonitor:
        """Open the counters, take the first sample and start the sampler thread."""
        if self._state != "new":
            raise RuntimeError("ResourceMonitor.start() was already called; a monitor runs "
                               "once: create a new ResourceMonitor for another cell.")
        self._tree = ProcessTree(self.pid)
        self._sys = SystemCpu()
        self._rapl = Rapl(self.powercap_root)
        self.cpu_energy_source = "rapl" if self._rapl.available else None
        if self.gpu_index is not None:
            try:
                if self.gpu_vendor == "amd":
                    self._gpu = AmdSmiGpu(self.gpu_index, self._amdsmi, note=self._note)
                else:
                    self._gpu = NvmlGpu(self.gpu_index, self.gpu_uuid, self._nvml,
                                        note=self._note)
                self.gpu_energy_source = self._gpu.energy_source
            except Exception as exc:  # no NVML library, no driver, no such device
                self._gpu = None
                self.gpu_unavailable_reason = f"{type(exc).__name__}: {exc}"
        with self._lock:
            self._t0 = time.perf_counter()
            self._state = "running"
            self._sample()
        self._thread = threading.Thread(target=self._loop, name="mnistbench-monitor",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread, take the last sample and close NVML; later calls do nothing."""
        if self._state != "running":
            return
        self._stop_event.set()
        if self._thread is not None:
            self._thread.join(timeout=max(10.0, 4 * self.interval))
            if self._thread.is_alive():
                self._note("stop", TimeoutError("sampler thread did not end within the "
                                                "join timeout"))
        with self._lock:
            self._safe_sample()
            self._state = "stopped"
            if self._gpu is not None:
                self._gpu.close()

    def __enter__(self) -> ResourceMonitor:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._state == "running"

    @property
    def stage(self) -> str:
        return self._stage

    def set_stage(self, stage: str) -> None:
        """Label the following rows with ``stage`` (one of :data:`STAGES`); while running, a
        sample closes the previous stage first."""
        if stage not in STAGES:
            raise ValueError(f"unknown monitor stage {stage!r}; allowed: {', '.join(STAGES)} "
                             f"(the 'stage' column of resources.csv).")
        with self._lock:
            if self._state == "running" and stage != self._stage:
                self._safe_sample()
            self._stage = stage

    def energy(self) -> dict[str, float | None]:
        """Cumulative energy since :meth:`start`, read now: ``{"gpu_j": J or None, "cpu_j": J
        or None}``; the difference of two calls is the energy in between. After :meth:`stop`,
        the values of the last sample."""
        if self._state == "new":
            raise RuntimeError("ResourceMonitor.energy() needs a started monitor: call "
                               "start() first.")
        with self._lock:
            if self._state == "running":
                now = time.perf_counter()
                gpu_j = self._try("gpu energy",
                                  lambda: self._gpu.energy_j(now) if self._gpu else None)
                cpu_j = self._try("rapl", lambda: self._rapl.read() if self._rapl else None)
                self._last_energy = {"gpu_j": gpu_j, "cpu_j": cpu_j}
            return dict(self._last_energy)

    def record_gpu_state(self, when: str) -> None:
        """Read the GPU's clocks, power limit and throttle reasons now, as its state at
        ``when`` (``start`` or ``end`` of the timed epochs); nothing without a GPU."""
        if when not in ("start", "end"):
            raise ValueError(f"record_gpu_state: when must be start or end, got {when!r}.")
        with self._lock:
            if self._gpu is not None and self._state == "running":
                self._gpu_states[when] = self._try("gpu state", self._gpu.state)

    def gpu_states(self) -> dict[str, float | str | None]:
        """The GPU state fields of the summary's results (schema.RESULT_FIELDS
        ``gpu_*_start_*``/``gpu_*_end_*``, ``gpu_throttle_*``); None where not read."""
        out: dict[str, float | str | None] = {}
        for when in ("start", "end"):
            state = self._gpu_states.get(when) or {}
            out[f"gpu_sm_clock_{when}_mhz"] = state.get("sm_clock_mhz")
            out[f"gpu_mem_clock_{when}_mhz"] = state.get("mem_clock_mhz")
            out[f"gpu_power_limit_{when}_w"] = state.get("power_limit_w")
            out[f"gpu_throttle_{when}"] = state.get("throttle")
        return out

    # ----------------------------------------------------------------- sampling

    def _note(self, where: str, exc: BaseException) -> None:
        message = f"{where}: {type(exc).__name__}: {exc}"
        if message not in self.errors and len(self.errors) < MAX_ERRORS:
            self.errors.append(message)

    def _try(self, where: str, func: Callable[[], Any]) -> Any:
        try:
            return func()
        except Exception as exc:
            self._note(where, exc)
            return None

    def _loop(self) -> None:
        start_cpu = time.thread_time()
        deadline = time.perf_counter() + self.interval
        while not self._stop_event.wait(max(0.0, deadline - time.perf_counter())):
            with self._lock:
                if self._state == "running":
                    self._safe_sample()
            now = time.perf_counter()
            deadline += self.interval
            if deadline < now:  # fell behind (suspended, overloaded): do not catch up
                deadline = now + self.interval
            self.sampler_cpu_s = time.thread_time() - start_cpu

    def _safe_sample(self) -> None:
        try:
            self._sample()
        except Exception as exc:  # never let the sampler die
            self._note("sample", exc)

    def _sample(self) -> None:
        """Append one row; the caller holds the lock."""
        now = time.perf_counter()
        dt = 0.0 if self._last_t is None else now - self._last_t
        row: dict[str, Any] = dict.fromkeys(RESOURCE_COLUMNS)
        row["t_s"] = now - self._t0
        row["stage"] = self._stage
        tree = self._try("process", self._tree.read) if self._tree else None
        if tree is not None:
            cpu_s, rss = tree
            if cpu_s is not None and dt > 0:
                row["proc_cpu_pct"] = 100.0 * cpu_s / dt
            row["rss_mb"] = rss / _MIB
        if self._sys is not None:
            row["sys_cpu_pct"] = self._try("system cpu", self._sys.read)
        if self._gpu is not None:
            gpu = self._try("nvml", lambda: self._gpu.read(now))
            if gpu:
                row.update(gpu)
        if self._rapl is not None and self._rapl.available:
            row["cpu_energy_j"] = self._try("rapl", self._rapl.read)
        self._last_energy = {"gpu_j": row["gpu_energy_j"], "cpu_j": row["cpu_energy_j"]}
        for key, digits in _DIGITS.items():
            if row[key] is not None:
                row[key] = round(float(row[key]), digits)
        self.rows.append(row)
        self._dts.append(dt)
        self._last_t = now

    # ----------------------------------------------------------------- results

    def write_csv(self, path: Path | str) -> Path:
        """Write the rows to ``path`` atomically, columns in schema order."""
        with self._lock:
            rows = list(self.rows)
        return atomic.write_csv(path, list(RESOURCE_COLUMNS), rows)

    def summary(self, stage: str = "train") -> dict[str, float | None]:
        """Time-weighted means and peaks over the rows of ``stage`` (None where nothing was
        measured): ``cpu_pct_mean``, ``cpu_pct_peak`` (100 = one core), ``gpu_util_mean``,
        ``gpu_util_peak`` (%), ``gpu_power_mean_w`` (W); ``peak_rss_mb`` (MiB) over all rows;
        ``system_load_mean`` (machine-wide busy %, 100 = every core), ``others_load_mean``
        (the part of it other processes used) and ``busy`` (others above
        :data:`BUSY_OTHERS_PCT`).
        For the CPU peak, rows covering less than half an interval (taken at a stage switch),
        whose percentages the 10 ms CPU-time tick makes coarse, are merged with their
        neighbours first, so the peak is never below the mean."""
        if stage not in STAGES:
            raise ValueError(f"unknown monitor stage {stage!r}; allowed: {', '.join(STAGES)}.")
        with self._lock:
            pairs = [(r, dt) for r, dt in zip(self.rows, self._dts, strict=True)]
        in_stage = [(r, dt) for r, dt in pairs if r["stage"] == stage]
        rss = [r["rss_mb"] for r, _ in pairs if r["rss_mb"] is not None]
        # What the rest of the machine used: its busy share less this cell's own (in % of all
        # cores); above BUSY_OTHERS_PCT on average the cell was timed on a busy machine.
        others_mean = _weighted_mean(_others(in_stage), "others")
        # GPU utilisation is NVML's share of its own sample period (1/6 s to 1 s by product)
        # in which a kernel ran: over a stage shorter than that and two of our intervals it is
        # noise (the same 0.04 s cell read 76 % in one run and 1 % in another): not reported.
        gpu_span = sum(dt for r, dt in in_stage if r["gpu_util_pct"] is not None)
        resolved = gpu_span >= self.min_util_span_s
        return {
            "system_load_mean": _weighted_mean(in_stage, "sys_cpu_pct"),
            "others_load_mean": others_mean,
            "busy": None if others_mean is None else bool(others_mean > BUSY_OTHERS_PCT),
            "cpu_pct_mean": _weighted_mean(in_stage, "proc_cpu_pct"),
            "cpu_pct_peak": _peak(_windows(in_stage, "proc_cpu_pct", 0.5 * self.interval),
                                  "proc_cpu_pct"),
            "peak_rss_mb": max(rss) if rss else None,
            "gpu_util_mean": _weighted_mean(in_stage, "gpu_util_pct") if resolved else None,
            "gpu_util_peak": _peak(in_stage, "gpu_util_pct") if resolved else None,
            "gpu_power_mean_w": _weighted_mean(in_stage, "gpu_power_w"),
        }


    @property
    def min_util_span_s(self) -> float:
        """The shortest stage whose GPU utilisation is reported: two sampler intervals, and
        at least NVML's longest sample period (:data:`NVML_UTIL_PERIOD_S`)."""
        return max(2 * self.interval, NVML_UTIL_PERIOD_S)

    def others_load_between(self, start: float, end: float) -> float | None:
        """The mean % of all cores other processes used between ``start`` and ``end``
        (``time.perf_counter`` values, e.g. an epoch's), from the sampler windows that overlap
        it, each weighted by its overlap; None when no window with CPU figures overlaps.
        Rows shorter than half an interval (taken at a stage switch) are merged with their
        neighbours first, as for the CPU peak: in a 2 ms row one 10 ms CPU-time tick reads as
        hundreds of %, and an epoch that ended before its next sample would otherwise have
        been judged on that row alone (others -299.9 %, seen on a 2-core AVX2 machine)."""
        with self._lock:
            pairs = list(zip(self.rows, self._dts, strict=True))
        overlapping = []
        for window, dt in _windows(_others(pairs), "others", 0.5 * self.interval):
            w_end = self._t0 + window["t_s"]  # each window covers (its time - dt, its time]
            overlap = min(end, w_end) - max(start, w_end - dt)
            if overlap > 0:
                overlapping.append((window, overlap))
        return _weighted_mean(overlapping, "others")


def _others(pairs: Sequence[tuple[dict[str, Any], float]]) -> list[tuple[dict, float]]:
    """(row, weight) pairs of what other processes used: the system's busy share less this
    cell's own, in % of all cores, for rows with both figures."""
    cores = psutil.cpu_count() or 1
    return [({"others": r["sys_cpu_pct"] - r["proc_cpu_pct"] / cores, "t_s": r["t_s"]}, w)
            for r, w in pairs if r["sys_cpu_pct"] is not None and r["proc_cpu_pct"] is not None]


#: NVML's utilisation is the share of its last sample period, 1/6 s to 1 s depending on the
#: product, in which a kernel ran: a stage shorter than the longest is not resolved.
NVML_UTIL_PERIOD_S = 1.0

#: % of all cores that other processes may use on average while a cell is timed before the
#: cell counts as timed on a busy machine (its summary's ``busy``; the report flags it).
BUSY_OTHERS_PCT = 25.0


def _weighted_mean(pairs: Sequence[tuple[dict[str, Any], float]], key: str) -> float | None:
    """Mean of ``key`` weighted by each row's interval; plain mean if all intervals are 0."""
    vals = [(r[key], dt) for r, dt in pairs if r[key] is not None]
    if not vals:
        return None
    weight = sum(dt for _, dt in vals)
    if weight <= 0:
        return sum(v for v, _ in vals) / len(vals)
    return sum(v * dt for v, dt in vals) / weight


def _windows(pairs: Sequence[tuple[dict[str, Any], float]], key: str,
             min_dt: float) -> list[tuple[dict[str, Any], float]]:
    """Consecutive rows merged (time-weighted) until each window covers at least ``min_dt``
    seconds; a short remainder joins the last window. Rows without a value are skipped. Each
    window keeps the ``t_s`` of its last row, where rows have one: it ends there."""
    windows: list[list[Any]] = []  # [sum of value × dt, sum of dt, t_s of the last row]
    acc: list[Any] | None = None
    for r, dt in pairs:
        if r[key] is None or dt <= 0:
            continue
        if acc is None:
            acc = [0.0, 0.0, None]
        acc[0] += r[key] * dt
        acc[1] += dt
        acc[2] = r.get("t_s")
        if acc[1] >= min_dt:
            windows.append(acc)
            acc = None
    if acc is not None:
        if windows:
            windows[-1][0] += acc[0]
            windows[-1][1] += acc[1]
            windows[-1][2] = acc[2]
        else:
            windows.append(acc)
    return [({key: v / d, "t_s": t_s}, d) for v, d, t_s in windows]


def _peak(pairs: Sequence[tuple[dict[str, Any], float]], key: str) -> float | None:
    vals = [r[key] for r, _ in pairs if r[key] is not None]
    return max(vals) if vals else None
