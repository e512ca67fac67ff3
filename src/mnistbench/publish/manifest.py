"""``report/data/manifest.json``: what a publication holds and where it came from
(:func:`build_manifest`): the environments with their hardware (from ``summary.csv``'s
environment columns), the dates, the git revision, cells per status, the checks and what was
waived, the arguments the report was rendered with, the environments kept as published; and,
written last (:func:`write_manifest`), the size and SHA-256 of every other file of the
publication."""

from __future__ import annotations

import contextlib
from collections import Counter, defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from mnistbench import __version__
from mnistbench.core import atomic, schema
from mnistbench.publish.checks import Checked, ProblemKind, Study, checkout
from mnistbench.publish.kept import Kept, summary_rows
from mnistbench.publish.layout import (
    DATA_DIR,
    FORMAT,
    INDEX,
    MANIFEST,
    PUBLICATION_VERSION,
    README,
)
from mnistbench.results import aggregate, archive


def build_manifest(data: Path, study: Study, checked: Checked, configfiles: Sequence[Path],
                   env_configfiles: dict, render_args: dict, root: Path,
                   kept: Kept | None = None) -> dict:
    """The manifest of the publication whose tables are in ``data`` (staged), but for its
    ``files`` (:func:`write_manifest`): dated now, with the git revision of ``root``."""
    rows = summary_rows(data / aggregate.SUMMARY_CSV)
    found = checkout(root)
    by_env: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_env[row["env"]].append(row)
    versions: dict[str, set] = defaultdict(set)
    for cell in study.cells:
        versions[cell.key[0]].add(cell.schema_version)
    for entry in kept.manifest if kept is not None else []:
        versions[entry["env"]].update(entry["schema_versions"])
    environments = [{**_environment(env, env_rows, versions[env]),
                     "configfiles": [str(p) for p in (*configfiles,
                                                      *env_configfiles.get(env, ()))]}
                    for env, env_rows in sorted(by_env.items())]
    return {
        "format": FORMAT,
        "publication_version": PUBLICATION_VERSION,
        "published_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "mnistbench": __version__,
        "schema_version": schema.SCHEMA_VERSION,
        "git_revision": found[1] if found else "",
        "command": render_args["command"],
        "configfiles": [str(p) for p in configfiles],
        "env_configfiles": {env: [str(p) for p in paths]
                            for env, paths in env_configfiles.items()},
        "render": render_args,
        "cells": {"total": len(rows), "by_status": _statuses(rows)},
        "dates": _dates(rows),
        "environments": environments,
        "checks": {
            "code_compared": checked.how,
            **{kind.value: [p.as_dict() for p in checked.problems if p.kind == kind]
               for kind in ProblemKind},
            "waived": [kind.value for kind in checked.waived],
            "reason": checked.reason.strip(),
        },
        "kept": kept.manifest if kept is not None else [],
        "files": {},
    }


def write_manifest(stage: Path, manifest: dict) -> None:
    """Record in ``manifest`` the size and SHA-256 of every other file of the publication
    staged in ``stage``, and write it into the staged data folder."""
    manifest["files"] = _checksums(stage / DATA_DIR, stage)
    atomic.write_json(stage / DATA_DIR / MANIFEST, manifest)


def _checksums(data: Path, stage: Path) -> dict[str, dict]:
    """Size and SHA-256 of every file of the publication but the manifest, by its path in
    ``report/`` (all of them still staged: ``data`` is the staged data folder)."""
    files = {f"{DATA_DIR}/{p.name}": p for p in sorted(data.iterdir())
             if p.is_file() and p.name != MANIFEST}
    files[INDEX] = stage / INDEX
    files[README] = stage / README
    return {name: {"bytes": path.stat().st_size, "sha256": archive.sha256_file(path)}
            for name, path in files.items()}


def _statuses(rows: Sequence[dict]) -> dict[str, int]:
    counts = Counter(row["status"] for row in rows)
    return {s: counts.get(s, 0) for s in schema.STATUSES}


def _dates(rows: Sequence[dict]) -> dict[str, str]:
    started = [r.get("started_at") or "" for r in rows]
    ended = [r.get("ended_at") or "" for r in rows]

    def pick(values, choose):
        parsed = []
        for value in values:
            with contextlib.suppress(ValueError):
                parsed.append((datetime.fromisoformat(value), value))
        return choose(parsed)[1] if parsed else ""

    return {"first_started_at": pick(started, min), "last_ended_at": pick(ended, max)}


def _environment(env: str, rows: Sequence[dict], versions: set) -> dict:
    """One environment of the manifest: cells, devices, dates and every environment column
    of summary.csv (one value, or the sorted values when its cells differ)."""
    hardware = {}
    for column in (*schema.ENV_FIELDS, *schema.DERIVED_FIELDS):
        if rows and column in rows[0]:
            values = sorted({r[column] for r in rows if r[column] != ""})
            hardware[column] = values if len(values) > 1 else "".join(values)
    return {
        "env": env,
        "cells": len(rows),
        "by_status": _statuses(rows),
        "devices": sorted({r["device"] for r in rows}),
        "measured_devices": sorted({r["device"] for r in rows if r["status"] == "ok"}),
        "schema_versions": sorted(versions),
        **_dates(rows),
        "hardware": hardware,
    }
