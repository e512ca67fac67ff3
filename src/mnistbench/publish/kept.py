"""What ``mnistbench publish --keep-published`` keeps of the publication in ``report/``
(:func:`kept_environments`): the environments its tables hold that ``results/runs`` does not,
as published. The old publication is data: its files are read only inside ``report/``
through :func:`mnistbench.core.untrusted.read_text_under` (no symbolic link followed, a size
cap), the config files its manifest names are kept as names and never opened, its text
values are one-line strings, and every kept row is checked again as the aggregate's are
(:func:`mnistbench.results.rows.check_rows`). The step of :func:`mnistbench.publish.publish`
is :func:`keep`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mnistbench.core import atomic, schema, untrusted
from mnistbench.publish.checks import ProblemKind, PublishError, Study
from mnistbench.publish.layout import DATA_DIR, MANIFEST, MAX_PUBLISHED_BYTES
from mnistbench.results import aggregate, rows, validate


@dataclass
class Kept:
    """The environments of a publication that the next one keeps as published: their rows of
    the three tables, their manifest entries and the config files they were checked with
    (names only: what the publication recorded, never read again), with whether their study
    ran through SLURM (from the published command)."""

    envs: list[str]
    summary: list[dict]
    epochs: list[list[str]]
    resources: list[list[str]]
    manifest: list[dict]
    env_configfiles: dict[str, list[str]]
    env_configs: dict[str, dict] = field(default_factory=dict)

    def merge_into(self, data: Path) -> None:
        """Add the kept rows to the tables just aggregated into ``data``, in the order the
        aggregate writes cells (by environment, experiment, cell)."""
        key = len(schema.ID_COLUMNS)
        summary = summary_rows(data / aggregate.SUMMARY_CSV) + self.summary
        summary.sort(key=lambda r: tuple(r[c] for c in schema.ID_COLUMNS))
        atomic.write_csv(data / aggregate.SUMMARY_CSV, schema.summary_columns(), summary)
        for name, kept in ((aggregate.EPOCHS_CSV, self.epochs),
                           (aggregate.RESOURCES_CSV, self.resources)):
            header, *mine = table_rows(data / name)
            merged = sorted(mine + kept, key=lambda r: r[:key])  # stable: epochs in order
            aggregate.write_rows(data / name, header, merged)


def _published_csv(report: Path, name: str) -> list[list[str]]:
    """Every row of the publication's table ``data/NAME`` (its header first), read without
    following a symbolic link (:func:`mnistbench.core.untrusted.read_text_under`)."""
    text = untrusted.read_text_under(report, f"{DATA_DIR}/{name}", max_bytes=MAX_PUBLISHED_BYTES)
    with rows.csv_fields_up_to():
        return list(csv.reader(io.StringIO(text, newline="")))


def kept_environments(report: Path, present: Sequence[str],
                      hardware: Mapping[str, Mapping[str, set[str]]] | None = None) -> Kept:
    """What ``publish --keep-published`` keeps of ``report``'s publication: every environment
    of its tables that ``present`` (the environments under results/runs) does not name, as
    published. Their cells cannot be checked again (their summary.json files are not here):
    the manifest keeps what their publication's checks found, with its date and revision,
    and every kept row is checked again as the aggregate's rows are
    (:func:`mnistbench.results.rows.check_rows`).

    The old publication is data: its files are read only inside ``report`` (no symbolic link
    followed), and the config files its manifest names are kept as names, never opened.
    Raises :class:`PublishError` when there is no readable publication, when its tables have
    other columns than this mnistbench writes (measure those environments again), or when a
    kept row cannot come from a cell. ``hardware``: env -> :func:`hardware_of` the
    results' cells; an environment of ``present`` that the publication holds from other
    hardware is refused (:func:`check_same_hardware`), not silently replaced."""
    data = report / DATA_DIR
    try:
        old = validate.loads_strict(untrusted.read_text_under(
            report, f"{DATA_DIR}/{MANIFEST}", max_bytes=validate.MAX_JSON_BYTES))
        if not isinstance(old, dict):
            raise ValueError(f"{data / MANIFEST} is not a JSON object")
        summary_table = _published_csv(report, aggregate.SUMMARY_CSV)
        epochs = _published_csv(report, aggregate.EPOCHS_CSV)
        resources = _published_csv(report, aggregate.RESOURCES_CSV)
    except untrusted.UnsafeFile as exc:
        raise PublishError(f"--keep-published: the publication in {report} cannot be read "
                           f"({exc}); publish without --keep-published.") from None
    except (csv.Error, ValueError) as exc:
        raise PublishError(f"--keep-published: the publication in {report} cannot be read "
                           f"({exc}); publish without --keep-published.") from None
    # An empty table has no header: other columns too.
    wanted = [("summary.csv", summary_table, list(schema.summary_columns())),
              ("epochs.csv", epochs, aggregate.epoch_columns()),
              ("resources.csv", resources, aggregate.resource_columns())]
    for name, table, writes in wanted:
        has = list((table or [[]])[0])
        if has != list(writes) and not upgradable(has, writes):
            raise PublishError(
                f"--keep-published: {data / name} has other columns than this mnistbench "
                f"writes (schema {schema.SCHEMA_VERSION}): its environments cannot be kept as "
                "they are. Measure them again, or publish without --keep-published.")
        for line, row in enumerate(table[1:], start=2):
            if len(row) != len(has):
                raise PublishError(f"--keep-published: {data / name} line {line} has "
                                   f"{len(row)} fields, its header {len(has)}: the "
                                   "publication was edited or cut short; publish without "
                                   "--keep-published.")
    summary_table, epochs, resources = (upgrade(table, writes) for _, table, writes in wanted)
    header = summary_table[0]
    summary = [dict(zip(header, row, strict=True)) for row in summary_table[1:]]
    envs = sorted({row["env"] for row in summary} - set(present))
    if hardware is not None:
        check_same_hardware(report, hardware, summary)
    kept_summary = [r for r in summary if r["env"] in envs]
    kept_epochs = [r for r in epochs[1:] if r[0] in envs]
    try:
        for line, entry in enumerate(summary, start=2):  # named by their lines in the file
            if entry["env"] in envs:
                rows.check_rows("summary", [entry], data / aggregate.SUMMARY_CSV, line)
        for kind, name, kept_rows in (("epochs", aggregate.EPOCHS_CSV, epochs),
                                      ("resources", aggregate.RESOURCES_CSV, resources)):
            for line, record in enumerate(kept_rows[1:], start=2):
                if record[0] in envs:
                    rows.check_rows(kind, [dict(zip(kept_rows[0], record, strict=True))],
                                    data / name, line)
    except rows.TableRowError as exc:
        raise PublishError(f"--keep-published: {exc} Kept rows are checked at every "
                           "publish: publish without --keep-published (or measure that "
                           "environment again).") from None
    checks: dict = old["checks"] if isinstance(old.get("checks"), dict) else {}
    versions = {e.get("env"): e.get("schema_versions") or []
                for e in old.get("environments") or [] if isinstance(e, dict)}
    entries = []
    for env in envs:
        mine = {kind.value: [p for p in _dicts(checks.get(kind.value))
                             if str(p.get("cell", "")).startswith(f"{env}/")]
                for kind in ProblemKind}
        entries.append({"env": env, "published_at": _text(old.get("published_at")),
                        "git_revision": _text(old.get("git_revision")),
                        "cells": sum(row["env"] == env for row in summary),
                        "schema_versions": [v for v in _list(versions.get(env))
                                            if type(v) is int],
                        "checks": {**mine, "waived": [_text(w) for w in
                                                      _list(checks.get("waived"))],
                                   "reason": _text(checks.get("reason"))}})
    configs: dict = (old["env_configfiles"] if isinstance(old.get("env_configfiles"), dict)
                     else {})
    command = _text(old.get("command"))
    env_configfiles, env_configs = {}, {}
    for env in envs:
        paths = [_text(p) for p in _list(configs.get(env)) if _text(p)]
        if not paths:
            continue
        env_configfiles[env] = paths
        # Whether its study ran through SLURM, as the published command says (its config is
        # not read: it may lie anywhere, and it is not part of the publication).
        slurm = any("profiles/slurm" in part and all(p in part for p in paths)
                    for part in command.split(" && "))
        env_configs[env] = {"slurm": {"partitions": {"published": True}}} if slurm else {}
    return Kept(envs=envs, summary=kept_summary, epochs=kept_epochs,
                resources=[r for r in resources[1:] if r[0] in envs], manifest=entries,
                env_configfiles=env_configfiles, env_configs=env_configs)


#: The environment fields that name the hardware a cell ran on: the CPU's model and the
#: instruction set torch ran it with, and the GPU's name (schema.ENV_FIELDS).
HARDWARE_FIELDS = ("cpu_model", "cpu_capability", "gpu_name")


def hardware_of(cells: Iterable[tuple[str, Mapping[str, object]]]
                ) -> dict[str, dict[str, set[str]]]:
    """env -> field -> the values of :data:`HARDWARE_FIELDS` its cells record (empty ones
    left out), from (env, the cell's environment section or summary.csv row) pairs."""
    found: dict[str, dict[str, set[str]]] = {}
    for env, record in cells:
        fields = found.setdefault(env, {name: set() for name in HARDWARE_FIELDS})
        for name in HARDWARE_FIELDS:
            value = record.get(name)
            if value not in (None, ""):
                fields[name].add(str(value))
    return found


def check_same_hardware(report: Path, hardware: Mapping[str, Mapping[str, set[str]]],
                        published: Sequence[Mapping[str, str]]) -> None:
    """Refuse (:class:`PublishError`) an environment of the results that the publication in
    ``report`` holds under the same name from other hardware (another CPU model or
    instruction set, another GPU): publishing would replace those results with no word,
    where both are wanted (a lent machine's environment cannot be measured again)."""
    old = hardware_of((row["env"], row) for row in published)
    for env in sorted(set(hardware) & set(old)):
        # A field one side does not record (an older schema, no GPU seen) is not compared.
        differ = [name for name in HARDWARE_FIELDS if hardware[env][name]
                  and old[env][name] and hardware[env][name] != old[env][name]]
        if not differ:
            continue
        shown = "; ".join(
            f"{name} {_values(old[env][name])} published, {_values(hardware[env][name])} "
            "in the results" for name in differ)
        raise PublishError(
            f"--keep-published: the results hold an environment {env!r} that the "
            f"publication in {report} holds too, from other hardware ({shown}): publishing "
            "would replace the published environment with no word. Both are results: give "
            "the new one another name, `mnistbench pack ENV --as NAME` then `mnistbench "
            "unpack` (or run its study with `--config env=NAME`), then publish again; to "
            "replace the published one on purpose, publish without --keep-published.")


def _values(values: set[str]) -> str:
    return " / ".join(repr(untrusted.one_line(v)[:80]) for v in sorted(values)) or "none"


def upgradable(has: Sequence[str], writes: Sequence[str]) -> bool:
    """Whether a published table's header ``has`` is this mnistbench's ``writes`` less
    columns a later schema version added (:data:`mnistbench.core.schema.ADDED_IN`), in the
    same order: its rows are read with those columns empty, as an older summary.json is."""
    left_out = [c for c in writes if c not in has]
    return (bool(has) and [c for c in writes if c in has] == list(has)
            and all(c in schema.ADDED_IN for c in left_out))


def upgrade(table: list[list[str]], writes: Sequence[str]) -> list[list[str]]:
    """``table`` (its header first) in the columns ``writes``: each column it lacks empty
    (:func:`upgradable` said it may lack them)."""
    if not table or list(table[0]) == list(writes):
        return table
    where = {c: i for i, c in enumerate(table[0])}
    return [list(writes), *([row[where[c]] if c in where else "" for c in writes]
                            for row in table[1:])]


def _text(value: object) -> str:
    """A text value of an old manifest (data from anyone who could write to report/), on one
    line; anything else is empty."""
    return untrusted.one_line(value) if isinstance(value, str) else ""


def _list(value: object) -> list:
    return value if isinstance(value, list) else []


def _dicts(value: object) -> list[dict]:
    return [{k: _text(v) for k, v in item.items() if isinstance(k, str)}
            for item in _list(value) if isinstance(item, dict)]


def table_rows(path: Path) -> list[list[str]]:
    """Every row of a CSV table, its header first."""
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.reader(handle))


def summary_rows(path: Path) -> list[dict]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


# ---------------------------------------------------------------------------------------------
# The step of publish
def keep(report: Path, present: Sequence[str],
         log: Callable[[str], None] | None = None,
         hardware: Mapping[str, Mapping[str, set[str]]] | None = None) -> Kept:
    """``publish --keep-published``: what :func:`kept_environments` keeps of ``report``'s
    publication beside the environments ``present`` under results/runs (their ``hardware``,
    :func:`hardware_of`, the same as published), logged."""
    kept = kept_environments(report, present, hardware)
    if log is not None:
        log(f"keeping {', '.join(kept.envs) or 'no environment'} as published")
    return kept


def all_env_configs(study: Study, kept: Kept | None
                    ) -> tuple[dict[str, list[Path]], dict[str, dict]]:
    """The config files and configs of every environment with a study of its own, for the
    reproduce command and the manifest: the study's, and the kept environments' as recorded
    in their publication (their config files are never read)."""
    files, configs = dict(study.env_configfiles), dict(study.env_configs)
    if kept is not None:
        for env, paths in kept.env_configfiles.items():
            files[env] = [Path(p) for p in paths]
            configs[env] = kept.env_configs.get(env, {})
    return files, configs
