"""Which comparison of the CPU and the GPU a section makes, decided once from the whole study.

Every section that sets the two devices side by side chooses, in this order, and names its
choice (:class:`Pair`):

1. the devices of one machine: an environment that measured both (like for like);
2. the same code across machines, labelled: the GPU of one environment against the CPU of
   another (the CPU environment with the most cells that ran that code and loader), never
   without saying so;
3. nothing, and why: only then may a section say that a device was not measured, and it says
   "not in this study" only when no environment of the study measured it
   (:func:`device_absence`).

The verdict box, the headline table and the headline chart (:func:`headline_bars`) pick
their other environment across machines by the same rule (the one with the most cells).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from mnistbench.report import blog
from mnistbench.report.formatting import seconds
from mnistbench.report.selections import (
    CODE,
    CODE_SHORT,
    code_short,
    col,
    device_name,
    focus_env,
    gpu_absence,
    median,
    speedup,
    with_code,
)

#: The two kinds of comparison, as the page names them.
ONE_MACHINE = "one machine"
ACROSS_MACHINES = "across machines"


@dataclass(frozen=True)
class Pair:
    """The environments of a CPU/GPU comparison: the same one (one machine) or two (across
    machines, labelled as such wherever it is shown)."""

    cpu_env: str
    gpu_env: str

    @property
    def one_machine(self) -> bool:
        return self.cpu_env == self.gpu_env

    @property
    def scope(self) -> str:
        """:data:`ONE_MACHINE` or :data:`ACROSS_MACHINES`."""
        return ONE_MACHINE if self.one_machine else ACROSS_MACHINES

    @property
    def cpu_env_arg(self) -> str | None:
        """``cpu_env`` of :func:`mnistbench.report.selections.speedup`: None on one machine."""
        return None if self.one_machine else self.cpu_env

    def label(self) -> str:
        """The comparison in words: "on one machine (env)" or "across machines, not like for
        like: the GPU of A against the CPU of B"."""
        if self.one_machine:
            return f"on one machine ({self.gpu_env})"
        return (f"across machines, not like for like: the GPU of {self.gpu_env} against the "
                f"CPU of {self.cpu_env}")

    def short(self) -> str:
        """A few words for a table cell: "one machine" or "across machines (CPU: B)"."""
        return ONE_MACHINE if self.one_machine else f"{ACROSS_MACHINES} (CPU: {self.cpu_env})"


def _cells_of(cells, code=None, loader=None):
    keep = cells["device"].isin(["cpu", "cuda"])
    if code is not None and CODE in cells.columns:
        keep &= cells[CODE] == code
    if loader is not None:
        keep &= cells["loader"] == loader
    return cells[keep]


def _cpu_env(summary, candidates) -> str:
    """The other environment of a comparison across machines (its CPU, or the GPU the
    chart's machine lacks): the one with the most cells in the study (then by name)."""
    counts = summary["env"].value_counts()
    return min(candidates, key=lambda env: (-int(counts.get(env, 0)), env))


def other_env(summary, cells, env: str, device: str) -> str | None:
    """The environment whose ``device`` stands in for ``env``'s where ``env`` has no ok cell
    of it among ``cells`` (across machines, labelled): by :func:`_cpu_env`'s rule; None when
    ``env`` has its own or no environment has one."""
    part = _cells_of(cells)
    have = set(part.loc[part["device"] == device, "env"])
    if env in have or not have:
        return None
    return _cpu_env(summary, sorted(have))


def pairs(summary, cells, *, code=None, loader=None) -> list[Pair]:
    """Every comparison of ``cells`` (of one kind of ``code`` and one ``loader`` when given),
    one per environment with GPU cells: on that machine where it measured its CPU too, else
    across machines against :func:`_cpu_env`'s CPU; those of one machine first."""
    part = _cells_of(cells, code, loader)
    gpu_envs = sorted(set(part.loc[part["device"] == "cuda", "env"]))
    cpu_envs = sorted(set(part.loc[part["device"] == "cpu", "env"]))
    if not gpu_envs or not cpu_envs:
        return []
    found = [Pair(env, env) if env in cpu_envs else Pair(_cpu_env(summary, cpu_envs), env)
             for env in gpu_envs]
    return sorted(found, key=lambda p: (not p.one_machine, p.gpu_env))


def pair(summary, cells, *, code=None, loader=None) -> Pair | None:
    """The first of :func:`pairs` (one machine first); None when the study has no CPU and GPU
    cells of that code and loader in any environment."""
    found = pairs(summary, cells, code=code, loader=loader)
    return found[0] if found else None


def ratio(cells, found: Pair, loader, *, code=None, column="epoch_s_median", device="cuda"):
    """:func:`mnistbench.report.selections.speedup` of ``found``: the CPU's median over the
    GPU's, like for like on one machine, else across the two machines."""
    return speedup(cells, found.gpu_env, loader, device=device, column=column, code=code,
                   cpu_env=found.cpu_env_arg)


def measured_devices(summary) -> set[str]:
    """The devices of which the whole study (every environment) has an ok cell."""
    return set(summary.loc[summary["status"] == "ok", "device"])


def device_absence(summary, device: str, env: str | None = None) -> str:
    """Why ``device`` has no result where one was looked for, in a few words, from the whole
    study: "measured on another machine (NVIDIA-H200-local)" when another environment has ok
    cells of it (``env``: the one looked at), "not in this study" only when none has."""
    done = summary[(summary["status"] == "ok") & (summary["device"] == device)]
    others = sorted(set(done["env"]) - ({env} if env else set()))
    if others:
        return f"{device_name(device)} measured on another machine ({', '.join(others)})"
    if done.empty:
        return f"no {device_name(device)} in this study"
    return f"no ok {device_name(device)} cell here"


# ---------------------------------------------------------------------------------------------
# The headline chart: the blog's machine and this study's, the other device across machines
@dataclass(frozen=True)
class Bar:
    """One bar of the headline chart: its label, seconds per epoch (None: a placeholder for
    what was not measured), whose it is ("blog": the blog's, another machine; "cpu"/"cuda":
    this study's; "placeholder") and the text at its end."""

    label: str
    seconds: float | None
    whose: str
    text: str


def headline_bars(summary) -> tuple[str, list[Bar]]:
    """(the machines shown, the bars of the headline chart): the blog's CPU and GPU epochs,
    then per device the blog's code and this project's best (and other settings where they
    ran) of the machine the first screen describes; a device it did not measure comes from
    the environment :func:`other_env` picks, labelled as another machine; a placeholder only
    for code that did not run and for a device no environment measured."""
    summary = summary if CODE in summary.columns else with_code(summary)
    cells, _ = blog.blog_cells(summary)
    env = focus_env(summary, cells)
    ref = blog.BLOG
    cpu_s, gpu_s = (float(cast(float, ref[key])) for key in ("cpu_epoch_s", "gpu_epoch_s"))
    bars = [Bar(f"the blog: CPU, {ref['cpu']}", cpu_s, "blog", f"{cpu_s:g} s"),
            Bar(f"the blog: GPU, {ref['gpu']}", gpu_s, "blog", f"{gpu_s:g} s")]
    shown = [env]
    for device in ("cpu", "cuda"):
        name = device_name(device)
        source = other_env(summary, cells, env, device) or env
        mine = cells[(cells["env"] == source) & (cells["device"] == device)]
        if mine.empty:
            why = (gpu_absence(summary) or "no GPU cell at the blog's settings"
                   if device == "cuda" else f"no {name} cell at the blog's settings")
            bars.append(Bar(f"this study, {name}", None, "placeholder", f"not measured: {why}"))
            continue
        where = "" if source == env else f" of {source}"
        if source != env:
            shown.append(f"{name}: {source}, {ACROSS_MACHINES}")
        for kind in ("blog", "best", ""):
            part = mine[mine[CODE] == kind]
            if part.empty and kind:
                bars.append(Bar(f"this study, {name}{where}: {CODE_SHORT[kind]}", None,
                                "placeholder", "not run here"))
            for _, group in part.groupby("loader", sort=True):
                value = median(col(group, "epoch_s_median"))
                if value is not None:
                    bars.append(Bar(f"this study, {name}{where}: {code_short(group)}", value,
                                    device, seconds(value)))
    return "; ".join(shown), bars
