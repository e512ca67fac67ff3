"""Process clocks that launchers and the timed process share: when a process started, to the
kernel's clock tick. Standard library only (:mod:`mnistbench.core`)."""

from __future__ import annotations

import os
import time


def process_start_unix(pid: int | str = "self") -> float:
    """When process ``pid`` started, as Unix time in s, to the kernel's clock tick (10 ms).

    From ``/proc/PID/stat`` (start in ticks since boot) and CLOCK_BOOTTIME, not from the boot
    time in ``/proc/stat``, which is rounded to whole seconds (psutil's ``create_time`` can be
    up to 1 s early for that reason). Falls back to now where /proc is missing.
    """
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22, starttime; fields[0] is field 3
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - age
    except (OSError, ValueError, IndexError, AttributeError):
        return time.time()
