"""The resource sampler's GPU readers: NVML for an NVIDIA device (``pynvml``, imported by
the caller) and AMD SMI (``amdsmi``) for an AMD one. Each reads utilisation, memory, power
and the energy counter where the device has one (else the integral of the power it samples),
the clocks, the power limit and the throttle reasons at the start and end of a cell; a value
it cannot read is ``None``, and the reason is noted once (:mod:`mnistbench.measure.monitor`
owns the sampler and its errors)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

_MIB = 2**20

# --------------------------------------------------------------------------- NVML


def _cuda_to_nvml(nvml: Any, gpu_index: int, gpu_uuid: str | None) -> Any:
    """The NVML handle of CUDA device ``gpu_index``: by ``gpu_uuid`` when given, else through
    ``CUDA_VISIBLE_DEVICES`` (indices or ``GPU-``/``MIG-`` UUIDs), else by index."""
    if gpu_uuid:
        uuid = gpu_uuid if gpu_uuid.startswith(("GPU-", "MIG-")) else f"GPU-{gpu_uuid}"
        return nvml.nvmlDeviceGetHandleByUUID(uuid)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible:
        entries = [e.strip() for e in visible.split(",") if e.strip()]
        if gpu_index < len(entries):
            entry = entries[gpu_index]
            if entry.startswith(("GPU-", "MIG-")):
                return nvml.nvmlDeviceGetHandleByUUID(entry)
            if entry.isdigit():
                return nvml.nvmlDeviceGetHandleByIndex(int(entry))
    return nvml.nvmlDeviceGetHandleByIndex(gpu_index)


class NvmlGpu:
    """Utilisation, memory, power and energy of one GPU through NVML. Construction raises when
    NVML or the device is missing; field reads that the board does not support give None."""

    def __init__(self, gpu_index: int, gpu_uuid: str | None = None, nvml: Any = None,
                 note: Callable[[str, BaseException], None] | None = None):
        if nvml is None:
            import pynvml as nvml
        self.nvml = nvml
        self._note = note or (lambda where, exc: None)
        nvml.nvmlInit()
        try:
            self.handle = _cuda_to_nvml(nvml, gpu_index, gpu_uuid)
        except BaseException:
            nvml.nvmlShutdown()
            raise
        self.energy_source: str | None = None
        self._counter0_mj: float | None = None
        self._integral_j = 0.0
        self._last_power: tuple[float, float] | None = None  # (perf_counter s, W)
        try:
            self._counter0_mj = float(nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
            self.energy_source = "nvml-counter"
        except Exception:
            if self.power_w(time.perf_counter()) is not None:
                self.energy_source = "nvml-power-integral"

    def _get(self, where: str, func: Callable[[], Any]) -> Any:
        try:
            return func()
        except Exception as exc:
            self._note(f"nvml {where}", exc)
            return None

    def power_w(self, now: float) -> float | None:
        """Board power in W now; also advances the power integral to ``now``."""
        mw = self._get("power", lambda: self.nvml.nvmlDeviceGetPowerUsage(self.handle))
        if mw is None:
            return None
        watts = float(mw) / 1000.0
        if self._last_power is not None:
            t0, w0 = self._last_power
            self._integral_j += 0.5 * (w0 + watts) * max(0.0, now - t0)
        self._last_power = (now, watts)
        return watts

    def energy_j(self, now: float, power_w: float | None = None) -> float | None:
        """Joules since construction: counter difference, or the power integral up to ``now``
        (reads the power unless ``power_w`` was just read at ``now``)."""
        if self.energy_source == "nvml-counter":
            mj = self._get("energy",
                           lambda: self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
            return None if mj is None else (float(mj) - self._counter0_mj) / 1000.0
        if self.energy_source == "nvml-power-integral":
            if power_w is None:
                self.power_w(now)
            return self._integral_j
        return None

    def read(self, now: float) -> dict[str, float | None]:
        """One sample: utilisation %, memory used MiB, power W, energy J since construction."""
        util = self._get("utilization",
                         lambda: self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)
        mem = self._get("memory", lambda: self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used)
        power = self.power_w(now)
        return {
            "gpu_util_pct": None if util is None else float(util),
            "gpu_mem_mb": None if mem is None else float(mem) / _MIB,
            "gpu_power_w": power,
            "gpu_energy_j": self.energy_j(now, power_w=power),
        }

    def state(self) -> dict[str, Any]:
        """Graphics (SM) and memory clocks in MHz, enforced power limit in W and the clock
        throttle reasons (:func:`throttle_text`) now; None where the board does not say."""
        nvml, handle = self.nvml, self.handle
        sm = self._get("sm clock", lambda: nvml.nvmlDeviceGetClockInfo(
            handle, getattr(nvml, "NVML_CLOCK_SM", 1)))
        mem = self._get("memory clock", lambda: nvml.nvmlDeviceGetClockInfo(
            handle, getattr(nvml, "NVML_CLOCK_MEM", 2)))
        limit = self._get("power limit", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
        mask = None
        # Renamed in NVML 12.x ("clocks event reasons"); older drivers know the old name only.
        for name in ("nvmlDeviceGetCurrentClocksEventReasons",
                     "nvmlDeviceGetCurrentClocksThrottleReasons"):
            func = getattr(nvml, name, None)
            if func is not None:
                try:
                    mask = int(func(handle))
                    break
                except Exception as exc:
                    self._note("nvml throttle reasons", exc)
        return {"sm_clock_mhz": None if sm is None else float(sm),
                "mem_clock_mhz": None if mem is None else float(mem),
                "power_limit_w": None if limit is None else float(limit) / 1000.0,
                "throttle": throttle_text(mask)}

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception as exc:
            self._note("nvml shutdown", exc)


#: NVML's clock throttle ("clocks event") reason bits, as recorded (nvml.h).
THROTTLE_REASONS = (
    (0x1, "idle"), (0x2, "applications_clocks"), (0x4, "sw_power_cap"), (0x8, "hw_slowdown"),
    (0x10, "sync_boost"), (0x20, "sw_thermal"), (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"), (0x100, "display_clocks"),
)


def throttle_text(mask: int | None) -> str | None:
    """NVML throttle reasons as text: ``none``, or the reasons joined by ``+`` (an unknown bit
    as its hex value); None when unknown."""
    if mask is None:
        return None
    if mask == 0:
        return "none"
    names = [name for bit, name in THROTTLE_REASONS if mask & bit]
    rest = mask & ~sum(bit for bit, _ in THROTTLE_REASONS)
    if rest:
        names.append(hex(rest))
    return "+".join(names)


# --------------------------------------------------------------------------- AMD SMI


def _smi_number(value: Any) -> float | None:
    """A number from an AMD SMI reading, None for its "N/A" and other non-numbers."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value).split()[0])
    except (ValueError, IndexError):
        return None


def _visible_index(gpu_index: int) -> int:
    """The physical index of visible GPU ``gpu_index`` under HIP_VISIBLE_DEVICES /
    ROCR_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES (numeric lists only)."""
    for name in ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        entries = [e.strip() for e in os.environ.get(name, "").split(",") if e.strip()]
        if gpu_index < len(entries) and entries[gpu_index].isdigit():
            return int(entries[gpu_index])
    return gpu_index


class AmdSmiGpu:
    """Utilisation, memory, power, energy and state of one AMD GPU through AMD SMI (ROCm's
    ``amdsmi`` module), with :class:`NvmlGpu`'s interface. Construction raises when the
    module or the device is missing. Written against ROCm 6's amdsmi API and tested with a fake
    module only: no AMD GPU has run it (README's device table)."""

    def __init__(self, gpu_index: int, amdsmi: Any = None,
                 note: Callable[[str, BaseException], None] | None = None):
        if amdsmi is None:
            import amdsmi
        self.smi = amdsmi
        self._note = note or (lambda where, exc: None)
        amdsmi.amdsmi_init()
        try:
            self.handle = amdsmi.amdsmi_get_processor_handles()[_visible_index(gpu_index)]
        except BaseException:
            amdsmi.amdsmi_shut_down()
            raise
        self.energy_source: str | None = None
        self._counter0_j: float | None = None
        self._integral_j = 0.0
        self._last_power: tuple[float, float] | None = None
        counter = self._counter_j()
        if counter is not None:
            self._counter0_j = counter
            self.energy_source = "amdsmi-counter"
        elif self.power_w(time.perf_counter()) is not None:
            self.energy_source = "amdsmi-power-integral"

    def _get(self, where: str, func: Callable[[], Any]) -> Any:
        try:
            return func()
        except Exception as exc:
            self._note(f"amdsmi {where}", exc)
            return None

    def _counter_j(self) -> float | None:
        """The energy accumulator in J (count x resolution in uJ), None when unsupported."""
        info = self._get("energy", lambda: self.smi.amdsmi_get_energy_count(self.handle))
        if not isinstance(info, dict):
            return None
        count = _smi_number(info.get("energy_accumulator", info.get("power")))
        resolution = _smi_number(info.get("counter_resolution"))
        return None if count is None or resolution is None else count * resolution / 1e6

    def power_w(self, now: float) -> float | None:
        """Socket power in W now; also advances the power integral to ``now``."""
        info = self._get("power", lambda: self.smi.amdsmi_get_power_info(self.handle))
        watts = None
        if isinstance(info, dict):
            for key in ("current_socket_power", "average_socket_power"):
                watts = _smi_number(info.get(key))
                if watts is not None:
                    break
        if watts is None:
            return None
        if self._last_power is not None:
            t0, w0 = self._last_power
            self._integral_j += 0.5 * (w0 + watts) * max(0.0, now - t0)
        self._last_power = (now, watts)
        return watts

    def energy_j(self, now: float, power_w: float | None = None) -> float | None:
        """Joules since construction: counter difference, or the power integral to ``now``."""
        if self.energy_source == "amdsmi-counter":
            counter = self._counter_j()
            return None if counter is None else counter - self._counter0_j
        if self.energy_source == "amdsmi-power-integral":
            if power_w is None:
                self.power_w(now)
            return self._integral_j
        return None

    def read(self, now: float) -> dict[str, float | None]:
        """One sample: utilisation %, VRAM used MiB, power W, energy J since construction."""
        activity = self._get("activity", lambda: self.smi.amdsmi_get_gpu_activity(self.handle))
        vram = self._get("vram", lambda: self.smi.amdsmi_get_gpu_vram_usage(self.handle))
        power = self.power_w(now)
        return {
            "gpu_util_pct": _smi_number(activity.get("gfx_activity"))
            if isinstance(activity, dict) else None,
            "gpu_mem_mb": _smi_number(vram.get("vram_used")) if isinstance(vram, dict) else None,
            "gpu_power_w": power,
            "gpu_energy_j": self.energy_j(now, power_w=power),
        }

    def _clock(self, kind: str) -> float | None:
        clk_type = getattr(getattr(self.smi, "AmdSmiClkType", None), kind, None)
        info = self._get(f"{kind} clock",
                         lambda: self.smi.amdsmi_get_clock_info(self.handle, clk_type))
        if not isinstance(info, dict):
            return None
        return _smi_number(info.get("clk", info.get("cur_clk")))

    def state(self) -> dict[str, Any]:
        """Graphics and memory clocks (MHz), power cap (W) and throttle status now."""
        cap = self._get("power cap", lambda: self.smi.amdsmi_get_power_cap_info(self.handle))
        metrics = self._get("metrics", lambda: self.smi.amdsmi_get_gpu_metrics_info(self.handle))
        cap_uw = _smi_number(cap.get("power_cap")) if isinstance(cap, dict) else None
        status = (_smi_number(metrics.get("throttle_status"))
                  if isinstance(metrics, dict) else None)
        return {"sm_clock_mhz": self._clock("GFX"), "mem_clock_mhz": self._clock("MEM"),
                "power_limit_w": None if cap_uw is None else cap_uw / 1e6,
                "throttle": None if status is None else
                ("none" if status == 0 else f"throttle_status={int(status)}")}

    def close(self) -> None:
        try:
            self.smi.amdsmi_shut_down()
        except Exception as exc:
            self._note("amdsmi shutdown", exc)
