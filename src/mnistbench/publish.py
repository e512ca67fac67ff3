"""The published study: ``report/``, made from the current results by ``mnistbench publish``
(``make publish``), and checked by ``mnistbench publish --check``.

``report/`` holds

- ``index.html``: the report, one self-contained file, rendered from ``data/`` alone with
  :func:`mnistbench.report.render.render_report`;
- ``data/``: the tidy tables (``summary.csv``, ``epochs.csv``, ``resources.csv``,
  ``columns.csv``), the cost model (``cost_model.json``) and ``manifest.json``: the
  environments with their hardware (from ``summary.csv``'s environment columns), the dates,
  the git revision, cells per status, the checks and what was waived, the arguments the
  report was rendered with, and the size and SHA-256 of every other file of ``report/``;
- ``README.md``: what was measured where, how to reproduce it, how to add a machine.

:func:`publish` refuses, naming the cells, when the results are not what the study's config
asks for:

- **missing**: a cell of the study's matrix (:func:`expected_cells`) without a
  ``summary.json``, or an incomplete cell folder (still running, or killed);
- **failed**: a cell with status ``failed`` (an error; ``oom`` and ``unavailable`` are
  results the report shows), or an invalid one (:mod:`mnistbench.results.validate`: a bad
  value, a damaged file), named with what is wrong;
- **stale**: a cell measured by other code than this checkout's (:func:`stale_reasons`): of
  an older schema version, of another mnistbench version, without a code digest, or whose
  code digest (the measuring code and runtime, :func:`mnistbench.core.provenance.code_digest`)
  or workflow digest (the bench rule) differs from this checkout's. The git revision is
  recorded, not compared: an untracked file or a README edit leaves a cell current.

Each refusal can be waived (``allow_missing``, ``allow_failed``, ``allow_stale``) with a
``reason``; the manifest records the cells waived and the reason. The tables must also be
current: ``results/*.csv`` must be what aggregating ``results/runs`` gives now.

The checks (the config, the cells, missing, failed and stale) are
:mod:`mnistbench.publish_checks`; their names are importable from here too.

:func:`verify` checks a publication: every checksum, and that rendering ``data/`` again gives
``index.html`` apart from the generation stamp (:func:`strip_stamp`), so the published report
is reproducible from its own data.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import errno
import hashlib
import os
import re
import shlex
import shutil
import stat
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from mnistbench import __version__
from mnistbench.core import atomic, schema, untrusted

# The checks live in mnistbench.publish_checks; all their names stay importable from here.
from mnistbench.publish_checks import (  # noqa: F401 - re-exported
    CONFIG_SCHEMA,
    DEFAULT_CONFIG,
    REPORT_DIR,
    CellInfo,
    Problem,
    PublishError,
    checkout,
    current_digests,
    env_devices,
    expected_cells,
    find_problems,
    load_config,
    read_cells,
    stale_reasons,
)
from mnistbench.publish_kept import (  # noqa: F401 - re-exported
    DATA_DIR,
    MANIFEST,
    MAX_PUBLISHED_BYTES,
    Kept,
    kept_environments,
    summary_rows,
    table_rows,
)
from mnistbench.results import aggregate, archive, validate

#: ``format`` of the manifest, and its version.
FORMAT = "mnistbench-publication"
PUBLICATION_VERSION = 1
INDEX = "index.html"
README = "README.md"
COST_MODEL = "cost_model.json"
TABLES = (aggregate.SUMMARY_CSV, aggregate.EPOCHS_CSV, aggregate.RESOURCES_CSV,
          aggregate.COLUMNS_CSV)

#: An ISO 8601 date-time with seconds and a time zone: the form of the report's generation
#: stamp, which :func:`strip_stamp` masks.
STAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})")


@dataclass
class Publication:
    """What :func:`publish` wrote."""

    report: Path
    manifest: dict
    problems: list[Problem] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# publish
def publish(results: Path = Path("results"), report: Path = REPORT_DIR, *,
            configfiles: Sequence[Path] = (DEFAULT_CONFIG,),
            env_configfiles: Mapping[str, Sequence[Path]] | None = None,
            config_schema: Path = CONFIG_SCHEMA, cost_model: Path | None = None,
            allow_missing: bool = False, allow_failed: bool = False,
            allow_stale: bool = False, reason: str = "", root: Path | None = None,
            keep_published: bool = False,
            log: Callable[[str], None] | None = None) -> Publication:
    """Publish ``results`` (``results/runs`` and the tables made from it) into ``report``.

    ``env_configfiles``: environments that ran a study of their own (e.g. part of the matrix
    in a container), each with the config(s) loaded after ``configfiles`` for it, as its
    study's ``--configfile``; their cells are checked against that config's matrix.
    ``keep_published``: the environments of ``report``'s publication that ``results/runs``
    does not hold stay in it as published (:func:`kept_environments`), e.g. a machine lent
    for one session whose cells cannot be measured again.
    ``cost_model``: default ``results/cost_model.json`` (written by the workflow from config
    ``cost``). ``root``: the checkout the code is compared with (default: here). Paths are
    recorded relative to the current folder, where the publication is re-rendered from
    (run it from the project's folder). Raises :class:`PublishError`; ``report`` is then as
    it was."""
    results, report = Path(results), Path(report)
    root = Path(root) if root is not None else Path.cwd()
    runs = results / "runs"
    cells, incomplete = read_cells(runs)
    if not cells:
        raise PublishError(f"no complete cell under {runs}: run the study first (make study).")
    config = load_config(configfiles, config_schema)
    env_configfiles = {env: [Path(p) for p in paths]
                       for env, paths in sorted((env_configfiles or {}).items())}
    present = sorted({c.key[0] for c in cells})
    unknown = sorted(set(env_configfiles) - set(present))
    if unknown:
        raise PublishError(
            f"--env-configfile names {', '.join(unknown)}, which has no cells under {runs} "
            f"(environments there: {', '.join(present)}): check the environment's name.")
    env_configs = {env: load_config([*configfiles, *paths], config_schema)
                   for env, paths in env_configfiles.items()}
    kept = kept_environments(report, present) if keep_published else None
    all_env_configfiles = dict(env_configfiles)
    all_env_configs = dict(env_configs)  # those of kept environments too: for the command
    if kept is not None:  # recorded as published: their config files are never read
        for env, paths in kept.env_configfiles.items():
            all_env_configfiles[env] = [Path(p) for p in paths]
            all_env_configs[env] = kept.env_configs.get(env, {})
        if log is not None:
            log(f"keeping {', '.join(kept.envs) or 'no environment'} as published")
    try:
        problems, how = find_problems(cells, incomplete, config, root, env_configs)
    except (KeyError, TypeError, ValueError) as exc:
        raise PublishError(f"cannot derive the study's cells from the config "
                           f"{', '.join(map(str, configfiles))}: {exc!r}. Pass the config the "
                           "study ran with (--configfile).") from None
    allowed = {"missing": allow_missing, "failed": allow_failed, "stale": allow_stale}
    refused = [p for p in problems if not allowed[p.kind]]
    if refused:
        raise PublishError(_refusal(refused, report))
    waived = sorted({p.kind for p in problems})
    if waived and not reason.strip():
        raise PublishError(
            f"--allow-{'/--allow-'.join(waived)} waives {len(problems)} cell(s) "
            f"({_counts(problems)}): say why with --reason TEXT; it is recorded in "
            f"{report / DATA_DIR / MANIFEST} and shown in {report / README}.")

    cost_source = Path(cost_model) if cost_model is not None else results / COST_MODEL
    made: list[Path] = []
    try:
        made = atomic.make_dirs(report)
        _check_targets(report)
        atomic.remove_dead(report, STAGING)  # of a publish that was killed
        stage = Path(tempfile.mkdtemp(prefix=atomic.owner_prefix(STAGING), dir=report))
    except PublishError:
        atomic.remove_dirs(made)
        raise
    except OSError as exc:
        atomic.remove_dirs(made)
        raise PublishError(atomic.folder_error(report, exc, "the publication", "--report")
                           ) from None
    data, staged = report / DATA_DIR, stage / DATA_DIR
    swapping = False
    try:
        _stage_tables(runs, results, staged)
        if kept is not None:
            kept.merge_into(staged)
        _stage_cost_model(cost_source, staged / COST_MODEL)
        report_arg = _display(report)
        render_args = {
            "results": f"{report_arg}/{DATA_DIR}",
            "cost_model": f"{report_arg}/{DATA_DIR}/{COST_MODEL}",
            "command": reproduce_command(configfiles, all_env_configfiles, all_env_configs),
        }
        if log is not None:
            log(f"rendering {report / INDEX} from {staged}")
        manifest = _manifest(staged, cells, problems, how, waived, reason, configfiles,
                             all_env_configfiles, render_args, root, kept)
        # the page's caveats show the checks the manifest records, as they render again from
        # the manifest beside the tables (verify)
        render_staged(staged, render_args, stage / INDEX, checks=manifest.get("checks"))
        (stage / README).write_text(readme(manifest), encoding="utf-8")
        manifest["files"] = _checksums(staged, stage)
        atomic.write_json(staged / MANIFEST, manifest)
        # The whole new publication is staged, manifest included: swap it in, data first,
        # index.html last; until then report/ is the old publication, whole.
        for name in (README, INDEX):
            if (report / name).is_file():
                shutil.copy2(report / name, stage / f"old-{name}")
        _check_targets(report)
        had_data = data.exists() or data.is_symlink()
        swapping = True
        if had_data:
            os.rename(data, stage / "old-data")
        os.rename(staged, data)
        for name in (README, INDEX):
            os.replace(stage / name, report / name)
    except BaseException as exc:
        if swapping:
            _put_back(report, stage, had_data)
        shutil.rmtree(stage, ignore_errors=True)
        atomic.remove_dirs(made)
        if isinstance(exc, OSError):
            raise PublishError(atomic.folder_error(report, exc, "the publication",
                                                   "--report")) from None
        raise
    shutil.rmtree(stage, ignore_errors=True)
    return Publication(report=report, manifest=manifest, problems=problems)


#: Name start of publish's staging folder in ``report/``; a killed run's is removed by the
#: next (atomic.remove_dead).
STAGING = ".publish-"


def _check_targets(report: Path) -> None:
    """Refuse a ``report/`` whose index.html or README.md is not a regular file, or whose
    data/ is not a folder: the publication renames over them, which would destroy them."""
    for name in (INDEX, README):
        atomic.check_target(report / name)
    data = report / DATA_DIR
    with contextlib.suppress(FileNotFoundError):
        mode = os.stat(data).st_mode
        if not stat.S_ISDIR(mode):
            raise PublishError(
                f"{data} is {atomic.file_kind(mode)}, not a folder: publishing replaces "
                f"{data} with the new tables' folder, which would destroy it. Move it out of "
                "the way (or pass --report another folder); nothing was written.")


def _put_back(report: Path, stage: Path, had_data: bool) -> None:
    """Undo a swap cut short (an error or a signal at any point of it), judging by what is
    where: the old data/, README.md and index.html back in place, the new ones gone."""
    data, old_data, staged = report / DATA_DIR, stage / "old-data", stage / DATA_DIR
    with contextlib.suppress(OSError):
        if old_data.exists() or old_data.is_symlink():
            if data.exists():
                shutil.rmtree(data)
            os.rename(old_data, data)
        elif not had_data and not staged.exists() and data.exists():
            shutil.rmtree(data)  # the new data went in where there was none
    for name in (README, INDEX):
        if (stage / name).exists():
            continue  # not moved in yet
        backup = stage / f"old-{name}"
        with contextlib.suppress(OSError):
            if backup.is_file():
                os.replace(backup, report / name)
            else:
                (report / name).unlink()


def _counts(problems: Sequence[Problem]) -> str:
    counts = Counter(p.kind for p in problems)
    return ", ".join(f"{n} {kind}" for kind, n in counts.items())


def _refusal(problems: Sequence[Problem], report: Path) -> str:
    lines = []
    for kind in ("missing", "failed", "stale"):
        some = [p for p in problems if p.kind == kind]
        if some:
            shown = "; ".join(f"{p.cell} ({p.why})" for p in some[:3])
            more = f"; and {len(some) - 3} more" if len(some) > 3 else ""
            lines.append(f"{len(some)} {kind}: {shown}{more}")
    kinds = sorted({p.kind for p in problems})
    return (f"refusing to publish into {report}: {'. '.join(lines)}. Fix: run the study again "
            "(make study) for missing cells, after deleting the folders of failed and stale "
            f"cells; or publish them as they are with --allow-{' --allow-'.join(kinds)} "
            "--reason TEXT (recorded in the manifest).")


def _stage_tables(runs: Path, results: Path, out: Path) -> None:
    """Aggregate ``runs`` into ``out`` and check ``results``' tables are exactly that."""
    try:
        aggregate.aggregate(runs, out)
    except aggregate.AggregateError as exc:
        raise PublishError(f"the results do not aggregate: {exc}") from None
    for name in TABLES:
        current = results / name
        if not current.is_file():
            raise PublishError(f"{current} does not exist: run the study (make study) or "
                               f"`mnistbench aggregate {runs} --out-dir {results}` first.")
        if archive.sha256_file(current) != archive.sha256_file(out / name):
            raise PublishError(
                f"{current} is out of date: it is not what aggregating {runs} gives now (cells "
                "added, removed or rerun since, or another mnistbench version wrote it). Run "
                f"`mnistbench aggregate {runs} --out-dir {results}` (or the study), check the "
                "report, then publish.")


def _stage_cost_model(source: Path, target: Path) -> None:
    from mnistbench.results import cost

    if not source.is_file():
        raise PublishError(f"{source} does not exist: run the study (make study writes it "
                           "from config key cost), or pass --cost-model FILE.")
    try:
        model = cost.load_model(source)
    except cost.CostError as exc:
        raise PublishError(str(exc)) from None
    if source.suffix.lower() == ".json":
        shutil.copyfile(source, target)
        return
    import yaml

    data = cost.resolve(yaml.safe_load(source.read_text(encoding="utf-8")), model.source)
    atomic.write_json(target, data)


def _display(path: Path) -> str:
    """``path`` relative to the current folder where it lies inside it, else as given."""
    path = Path(path)
    if not path.is_absolute():
        return path.as_posix()
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def reproduce_command(configfiles: Sequence[Path],
                      env_configfiles: Mapping[str, Sequence[Path]] | None = None,
                      env_configs: Mapping[str, dict] | None = None) -> str:
    """The commands that measure and publish this study, shown in the report: the study,
    the study of each environment with a config of its own (through ``profiles/slurm`` when
    its config names SLURM partitions), then the publication. Snakemake takes its config
    files after one ``--configfile`` (a second one would replace the first); ``mnistbench
    publish`` takes one per ``--configfile``."""
    extra = [str(p) for p in configfiles
             if os.path.normpath(str(p)) != os.path.normpath(str(DEFAULT_CONFIG))]
    env_configfiles = env_configfiles or {}

    def study_command(files: Sequence[str], slurm: bool) -> str:
        if not files:
            return "make study"
        return shlex.join([".venv/bin/snakemake",
                           *(["--profile", "profiles/slurm"] if slurm else
                             ["--cores", "all"]), "--configfile", *files])

    commands = [study_command(extra, False)]
    for env, paths in env_configfiles.items():
        slurm = any(((env_configs or {}).get(env, {}).get("slurm") or {})
                    .get("partitions", {}).values())
        commands.append(study_command([*extra, *map(str, paths)], slurm))
    # publish reads exactly the files it is given (Snakemake loads config/config.yaml first).
    flags = [arg for path in configfiles for arg in ("--configfile", str(path))] if extra else []
    flags += [f"--env-configfile={env}={path}" for env, paths in env_configfiles.items()
              for path in paths]
    commands.append(shlex.join([".venv/bin/mnistbench", "publish", *flags])
                    if flags else "make publish")
    return " && ".join(commands)


def render(render_args: dict, out: Path) -> Path:
    """Render the report of a publication into ``out`` with its recorded arguments (paths
    relative to the current folder)."""
    from mnistbench.report import render as report

    try:
        return report.render_report(Path(render_args["results"]), Path(out),
                                    cost_model_path=Path(render_args["cost_model"]),
                                    command=render_args["command"])
    except report.ReportError as exc:
        raise PublishError(f"the report does not render from {render_args['results']}: {exc}"
                           ) from None


def render_staged(data: Path, render_args: dict, out: Path, checks: dict | None = None
                  ) -> Path:
    """Render a publication's report into ``out`` from its staged ``data`` folder, naming the
    paths it will have once in place (``render_args``): what :func:`render` gives from
    there (``checks``: the manifest's, which :func:`render` reads beside the tables), so the
    old publication stays whole until the swap."""
    from mnistbench.report import render as report
    from mnistbench.results import cost

    try:
        tables = aggregate.load_tables(data)
        # Named by the path it will have, as render() loads it from there.
        model = dataclasses.replace(cost.load_model(data / COST_MODEL),
                                    source=str(Path(render_args["cost_model"])))
        return report.write_report(tables, Path(out), model=model,
                                   results=Path(render_args["results"]),
                                   command=render_args["command"], checks=checks)
    except (aggregate.AggregateError, cost.CostError, report.ReportError) as exc:
        raise PublishError(f"the report does not render from {render_args['results']}: {exc}"
                           ) from None


def _checksums(data: Path, stage: Path) -> dict[str, dict]:
    """Size and SHA-256 of every file of the publication but the manifest, by its path in
    ``report/`` (all of them still staged: ``data`` is the staged data folder)."""
    files = {f"{DATA_DIR}/{p.name}": p for p in sorted(data.iterdir())
             if p.is_file() and p.name != MANIFEST}
    files[INDEX] = stage / INDEX
    files[README] = stage / README
    return {name: {"bytes": path.stat().st_size, "sha256": archive.sha256_file(path)}
            for name, path in files.items()}


def _manifest(data: Path, cells: Sequence[CellInfo], problems, how: str,
              waived: list[str], reason: str, configfiles, env_configfiles: dict,
              render_args: dict, root: Path, kept: Kept | None = None) -> dict:
    rows = summary_rows(data / aggregate.SUMMARY_CSV)
    found = checkout(root)
    by_env: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_env[row["env"]].append(row)
    versions: dict[str, set] = defaultdict(set)
    for cell in cells:
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
            "code_compared": how,
            "missing": [p.as_dict() for p in problems if p.kind == "missing"],
            "failed": [p.as_dict() for p in problems if p.kind == "failed"],
            "stale": [p.as_dict() for p in problems if p.kind == "stale"],
            "waived": waived,
            "reason": reason.strip(),
        },
        "kept": kept.manifest if kept is not None else [],
        "files": {},
    }


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


#: The template of report/README.md (rendered from the manifest).
README_TEMPLATE = "publication-README.md.j2"


#: ``value`` as text that Markdown shows as it is, on one line, in a code span no backtick of
#: it closes (HTML or Markdown in it stays text); one home: mnistbench.core.untrusted.
inert = untrusted.markdown_code
#: :data:`inert` for a cell of a Markdown table (a pipe in it escaped).
inert_cell = untrusted.markdown_cell


def fence_for(text: object) -> str:
    """The backtick fence of a code block that holds ``text``: longer than any backtick run
    in it, at least three."""
    runs = re.findall(r"`+", str(text))
    return "`" * max(3, max((len(run) for run in runs), default=0) + 1)


def readme(manifest: dict) -> str:
    """``report/README.md`` of a publication, from its manifest. Every value that comes from
    the results or the command line (environment names, hardware, dates, revision, config
    files, the waiver's reason, the commands) is inert: in a code span (:func:`inert`), with
    pipes escaped in tables (:func:`inert_cell`), or in a code block no backtick run of it can
    close (:func:`fence_for`)."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    def hw(env: dict) -> str:
        value = env["hardware"].get("hardware") or env["hardware"].get("cpu_model") or "?"
        return ", ".join(value) if isinstance(value, list) else value

    def statuses(counts: dict) -> str:
        return ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "none"

    environment = Environment(loader=PackageLoader("mnistbench.report", "templates"),
                              undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=True)
    environment.filters.update(code=inert, cell=inert_cell)
    template = environment.get_template(README_TEMPLATE)
    gpu = any(d != "cpu" for e in manifest["environments"] for d in e["measured_devices"])
    block = "\n".join(str(v) for v in (manifest["command"], manifest["render"]["results"],
                                        manifest["render"]["cost_model"],
                                        manifest["git_revision"]))
    return template.render(m=manifest, hw=hw, statuses=statuses, gpu=gpu,
                           fence=fence_for(block), one_line=untrusted.one_line)


# ---------------------------------------------------------------------------------------------
# verify
def strip_stamp(html: str) -> str:
    """``html`` with its generation stamp (every :data:`STAMP` date-time) masked."""
    return STAMP.sub("<generated_at>", html)


def verify(report: Path = REPORT_DIR) -> list[str]:
    """What is wrong with the publication in ``report`` (empty: nothing): its manifest, every
    checksum, files the manifest does not list, and whether rendering ``data/`` again (from
    the current folder, with the recorded arguments) gives ``index.html`` but for the
    generation stamp.

    Every file is read through :func:`mnistbench.core.untrusted.read_bytes_under`: a
    symbolic link in ``report/`` (to ``/etc/shadow``, say) is named and never followed, a
    FIFO never opened, and no problem quotes a line of a file that was not read. The report is
    rendered again only when every file of ``data/`` is a regular file of the publication; a
    table it cannot render (an edited one) is a problem listed beside the checksums, never a
    traceback."""
    report = Path(report)
    path = report / DATA_DIR / MANIFEST
    try:
        manifest = validate.loads_strict(untrusted.read_text_under(
            report, f"{DATA_DIR}/{MANIFEST}", max_bytes=validate.MAX_JSON_BYTES))
    except untrusted.UnsafeFile as exc:
        return [f"cannot read {path}: {exc.why}; publish again (make publish)"]
    except ValueError as exc:
        return [f"cannot read {path}: {exc}"]
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return [f"{path} is not the manifest of a publication (format {FORMAT!r})"]
    problems = []
    unread = False  # a file of the publication that is not read: no rendering from it
    files = manifest.get("files") or {}
    if not isinstance(files, dict):
        return [f"{path}: 'files' is not a mapping of paths to checksums"]
    for name, entry in files.items():
        outside = _outside(report, name)
        if outside:
            problems.append(f"{path} lists {name!r}, {outside}; it was not read (a "
                            f"publication's files lie in {report})")
            unread = True
            continue
        target = report / name
        if not isinstance(entry, dict):
            problems.append(f"{path}: the entry of {name!r} is not {{bytes, sha256}}")
            continue
        try:
            digest = hashlib.sha256(untrusted.read_bytes_under(
                report, name, max_bytes=MAX_PUBLISHED_BYTES)).hexdigest()
        except untrusted.UnsafeFile as exc:
            missing = exc.errno == errno.ENOENT
            problems.append(f"{target} is listed in the manifest but missing" if missing
                            else f"{target} is {exc.why}; it was not read")
            unread = unread or not missing
            continue
        if digest != entry.get("sha256"):
            problems.append(f"{target} does not match its SHA-256 in the manifest (changed "
                            "after publishing)")
    data_dir = report / DATA_DIR
    for extra in sorted(data_dir.iterdir()) if data_dir.is_dir() else []:
        if extra.name != MANIFEST and f"{DATA_DIR}/{extra.name}" not in files:
            problems.append(f"{extra} is not listed in the manifest")
            unread = unread or not stat.S_ISREG(os.lstat(extra).st_mode)
    render_args = manifest.get("render") or {}
    if not isinstance(render_args, dict) or not all(
            isinstance(render_args.get(k), str) for k in ("results", "cost_model", "command")):
        problems.append(f"{path}: 'render' must give results, cost_model and command as text")
        return problems
    cost_model = render_args["cost_model"]
    outside = _outside(report, os.path.relpath(os.path.abspath(cost_model), report))
    if outside:
        problems.append(f"{path}: render.cost_model {cost_model!r} is not inside {report} "
                        f"({outside}); the report was not rendered again (publish --check "
                        f"reads only {report})")
        return problems
    results = Path(render_args["results"])
    if not results.is_dir() or results.resolve() != (report / DATA_DIR).resolve():
        problems.append(f"the report was rendered from {results}, which is not {report / DATA_DIR} "
                        "from here: run the check from the folder it was published in (the "
                        "project's)")
        return problems
    if unread:
        problems.append(f"the report was not rendered again: a file of {report} was not read "
                        "(above)")
        return problems
    try:
        committed = untrusted.read_text_under(report, INDEX, max_bytes=MAX_PUBLISHED_BYTES)
    except untrusted.UnsafeFile as exc:
        problems.append(f"cannot read {report / INDEX}: {exc.why}; it was not compared")
        return problems
    with tempfile.TemporaryDirectory(prefix="mnistbench-verify-") as tmp:
        try:
            fresh = render(render_args, Path(tmp) / INDEX).read_text(encoding="utf-8")
        except PublishError as exc:
            problems.append(str(exc))
            return problems
    if strip_stamp(fresh) != strip_stamp(committed):
        problems.append(f"{report / INDEX} is not what {results} renders to now: "
                        + first_difference(strip_stamp(committed), strip_stamp(fresh)))
    return problems


def _outside(report: Path, name: object) -> str | None:
    """Why the manifest path ``name`` (relative to ``report``) is not a path inside it, or
    None: absolute, climbing out with ``..``, or leading out through a symbolic link."""
    if not isinstance(name, str) or not name or "\x00" in name:
        return "not a path"
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name):
        return "an absolute path"
    if ".." in re.split(r"[/\\]", name):
        return "a path that climbs out with '..'"
    root = report.resolve()
    if not (report / name).resolve().is_relative_to(root):
        return "a path that leads out through a symbolic link"
    return None


def first_difference(old: str, new: str, width: int = 160) -> str:
    """Where two texts first differ, as one short line."""
    old_lines, new_lines = old.splitlines(), new.splitlines()
    matcher = difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False)
    for tag, i1, _i2, j1, _j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        was = old_lines[i1][:width] if i1 < len(old_lines) else "(end)"
        now = new_lines[j1][:width] if j1 < len(new_lines) else "(end)"
        return f"line {i1 + 1} was {was!r}, renders as {now!r}"
    return "they differ in line endings"
