"""Right under the verdict: the caveats of the study, on the page and not only in the
publication's README: cells published stale and why (a publication's checks: what
``mnistbench publish`` passes, or the manifest beside the tables when a publication's
``data/`` is rendered again), software versions that differ from the project's pins
(``envs/pip/torch.txt``, where the checkout has it) or between environments, cells measured
from trees with uncommitted changes (a git revision ending ``-dirty``), and environments whose
cells come from several hosts or sessions (different host names, code digests or revisions),
with how far the same cell's repeats then differ.
"""

from __future__ import annotations

import re
from pathlib import Path

from mnistbench.core import untrusted
from mnistbench.core.schema import ProblemKind
from mnistbench.report.formatting import num, plural, seconds
from mnistbench.report.selections import (
    CODE,
    Inputs,
    code_short,
    col,
    device_name,
    distinct,
    loader_name,
    median,
)

#: The publication's manifest beside its tables (mnistbench.publish.MANIFEST; the report
#: layer does not import publish).
MANIFEST = "manifest.json"
#: Where the project pins torch (the one home of the pin: envs/README.md), from the checkout.
PINS = Path(__file__).resolve().parents[4] / "envs" / "pip" / "torch.txt"
#: What a revision ends with when its tree had uncommitted changes.
DIRTY = "-dirty"
#: The columns that tell one session of an environment from another.
SESSION_COLUMNS = ("hostname", "code_digest", "git_revision")


def pinned(path: Path = PINS) -> dict[str, str]:
    """package -> pinned version from a requirements file (none when it is not there)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^\s#;]+)", text, re.M))


def read_checks(results: Path) -> dict | None:
    """The ``checks`` of the publication manifest in the folder ``results`` (a publication's
    ``data/``), None where there is none."""
    try:
        # bounded: a manifest nested 5000 deep was a RecursionError traceback in `report`
        data = untrusted.loads_strict((Path(results) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    checks = data.get("checks") if isinstance(data, dict) else None
    return checks if isinstance(checks, dict) else None


def _stale(checks: dict | None) -> list[str]:
    """A publication's stale cells per environment and the reason they were published."""
    checks = checks or {}
    stale = checks.get(ProblemKind.STALE) or []
    if not isinstance(stale, list) or not stale:
        return []
    per_env: dict[str, int] = {}
    for entry in stale:
        cell = str(entry.get("cell", "")) if isinstance(entry, dict) else str(entry)
        env = cell.split("/", 1)[0] or "?"
        per_env[env] = per_env.get(env, 0) + 1
    counted = ", ".join(f"{plural(n, 'cell')} of {env}" for env, n in sorted(per_env.items()))
    reason = str(checks.get("reason") or "").strip()
    return [f"Published stale (measured by other code than the publishing checkout's): "
            f"{counted}." + (f" Why they were published: {reason}" if reason else "")]


def _base(version: str) -> str:
    return version.split("+", 1)[0]


def _versions(summary) -> list[str]:
    """torch per environment against the pin and against each other."""
    pins = pinned()
    out = []
    per_env = {env: distinct(summary[summary["env"] == env], "torch")
               for env in sorted(summary["env"].unique())}
    pin = pins.get("torch")
    if pin:
        off = {env: v for env, v in per_env.items() if v and any(_base(x) != pin for x in v)}
        if off:
            out.append("Versions that differ from the pins (torch " + pin + "): "
                       + "; ".join(f"{env} ran torch {', '.join(v)}" for env, v in off.items())
                       + ".")
    elif len({tuple(v) for v in per_env.values() if v}) > 1:
        out.append("The environments ran different torch versions: "
                   + "; ".join(f"{env}: {', '.join(v)}" for env, v in per_env.items() if v)
                   + ".")
    return out


def _dirty(summary) -> list[str]:
    envs = {}
    for env, part in summary.groupby("env", sort=True):
        revisions = [r for r in distinct(part, "git_revision") if r.endswith(DIRTY)]
        if revisions:
            n = int(part["git_revision"].astype(str).str.endswith(DIRTY).sum())
            envs[env] = (n, len(part), revisions)
    if not envs:
        return []
    return ["Measured from trees with uncommitted changes (a revision ending -dirty: the "
            "code that ran is not exactly any commit): "
            + "; ".join(f"{env}, {n} of {plural(total, 'cell')} "
                        f"({', '.join(r[:7] + DIRTY for r in revs)})"
                        for env, (n, total, revs) in envs.items()) + "."]


def _sessions(inputs: Inputs) -> list[str]:
    """Environments whose cells come from several hosts or sessions, and how far the repeats
    of one cell at the blog's settings then differ."""
    out = []
    summary, cells = inputs.summary, inputs.cells
    for env, part in summary.groupby("env", sort=True):
        differ = {c: distinct(part, c) for c in SESSION_COLUMNS if len(distinct(part, c)) > 1}
        if not differ:
            continue
        hosts = distinct(part, "hostname")
        what = "; ".join(f"{len(v)} {c.replace('_', ' ')}s ({', '.join(x[:16] for x in v)})"
                         for c, v in differ.items())
        text = (f"{env}'s cells come from several hosts or sessions of one environment: {what}"
                + ("" if "hostname" in differ else
                   f"; every cell records the host name {', '.join(hosts) or 'none'}, so the "
                   "hosts cannot be told apart by name") + ".")
        mine = cells[cells["env"] == env]
        spreads = []
        for (device, _kind, loader), group in mine.groupby(["device", CODE, "loader"]):
            values = col(group, "epoch_s_median")
            if len(values) > 1 and min(values) > 0:
                apart = max(values) / min(values) - 1
                times = ", ".join(seconds(v) for v in values)
                spreads.append((apart, f"{device_name(device)}, {code_short(group)} "
                                       f"({loader_name(loader)}): {times} per epoch, "
                                       f"{num(100 * apart, 2, '%')} apart (median "
                                       f"{seconds(median(values))})"))
        if spreads:
            text += (" Its repeats at the blog's settings: "
                     + "; ".join(s for _, s in sorted(spreads, reverse=True)) + ".")
        out.append(text)
    return out


def context(inputs: Inputs) -> dict:
    summary = inputs.summary
    items = [*_stale(inputs.checks), *_versions(summary), *_dirty(summary),
             *_sessions(inputs)]
    return {"caveats": items}
