"""A cell's progress while it trains: a one-line bar on a terminal, a plain line at most once a
minute where a person reads a log (the workflow's cell log, a container's or a SLURM job's
output), nothing with ``--quiet`` on a terminal."""

from __future__ import annotations

import sys
import time

PROGRESS_LOG_EVERY_S = 60.0  # s between two progress lines off a terminal


class Progress:
    """A one-line progress bar on stderr, redrawn at most every 0.25 s; silent when off. Off a
    terminal (``log_every_s``: the workflow's cell log, a container's or a SLURM job's output)
    a plain line at most every ``log_every_s`` instead, so a long cell shows it is moving."""

    def __init__(self, enabled: bool, log_every_s: float = 0.0) -> None:
        self.enabled = enabled
        self.log_every_s = log_every_s
        self._last = 0.0
        self._logged = time.perf_counter()

    @classmethod
    def for_cell(cls, quiet: bool) -> Progress:
        """The progress of a cell: the bar on a terminal unless ``quiet``; off one, a line a
        minute even when ``quiet``."""
        terminal = sys.stderr.isatty()
        return cls(enabled=not quiet and terminal,
                   log_every_s=0.0 if terminal else PROGRESS_LOG_EVERY_S)

    def update(self, epoch: int, epochs: int, step: int, steps: int, start: float,
               force: bool = False) -> None:
        if self.log_every_s and not self.enabled:
            now = time.perf_counter()
            if now - self._logged >= self.log_every_s:
                self._logged = now
                sys.stderr.write(f"progress: epoch {epoch}/{epochs}, {step}/{steps} steps, "
                                 f"{now - start:.0f} s into the epoch\n")
                sys.stderr.flush()
            return
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and now - self._last < 0.25:
            return
        self._last = now
        width = 30
        filled = int(width * step / max(steps, 1))
        bar = "#" * filled + "." * (width - filled)
        sys.stderr.write(f"\repoch {epoch}/{epochs} [{bar}] {step}/{steps} steps "
                         f"{now - start:6.1f} s")
        if force:
            sys.stderr.write("\n")
        sys.stderr.flush()
