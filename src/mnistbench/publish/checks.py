"""What ``mnistbench publish`` checks before it publishes: the study's config as the workflow
reads it (:func:`load_config`), the cells its matrix asks of each environment
(:func:`expected_cells`), the cells found (:func:`read_cells`), and which are

- **missing**: a cell of the matrix without a ``summary.json``, or an incomplete folder;
- **failed**: status ``failed``, or invalid (:mod:`mnistbench.results.validate`);
- **stale**: measured by other code than this checkout's (:func:`stale_reasons`: schema
  version, mnistbench version, code digest, workflow digest);

each a :class:`ProblemKind`, with the git checkout the publication records (:func:`checkout`).
Two steps of :func:`mnistbench.publish.publish` are here: :func:`load` (the cells and the
configs) and :func:`refuse` (the problems, refused unless waived with a reason).
"""

from __future__ import annotations

import copy
import os
import subprocess
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mnistbench import __version__
from mnistbench.core import provenance, schema, study, untrusted
from mnistbench.core.schema import ProblemKind
from mnistbench.publish.layout import DATA_DIR, MANIFEST, README, REPORT_DIR
from mnistbench.results import rows, validate

DEFAULT_CONFIG = Path("config/config.yaml")
CONFIG_SCHEMA = Path("workflow/schemas/config.schema.yaml")

_GIT_TIMEOUT_S = 30


class PublishError(Exception):
    """The results cannot be published (or a publication does not check); the message names
    the cells or files and the fix."""


@dataclass(frozen=True)
class Problem:
    """A cell that keeps the results from being published: its :class:`ProblemKind`,
    ``cell`` as ``env/experiment/cell``, and why."""

    kind: ProblemKind
    cell: str
    why: str

    def as_dict(self) -> dict[str, str]:
        return {"cell": self.cell, "why": self.why}


@dataclass(frozen=True)
class CellInfo:
    """What the checks need of one cell's ``summary.json``."""

    key: tuple[str, str, str]
    status: str
    schema_version: int
    device: str
    env: dict
    #: Why the cell is invalid (mnistbench.results.validate), filed as failed; "" when valid.
    invalid: str = ""

    @property
    def name(self) -> str:
        return "/".join(self.key)


# ---------------------------------------------------------------------------------------------
# The study's config and its cells
def load_config(configfiles: Sequence[Path], config_schema: Path = CONFIG_SCHEMA, *,
                env: str = "", env_files: Sequence[Path] = ()) -> dict:
    """The study's config as the workflow reads it: ``configfiles`` merged in order (a later
    file's keys replace, its mappings merge), every key left out set to its default from
    ``config_schema``, then checked against that schema as the workflow checks it (a file
    given with ``--env-configfile`` too). Each file is read bounded
    (:mod:`mnistbench.core.untrusted`: a regular file of at most 4 MiB, no YAML alias
    expansion past 200,000 values nor nesting past 64 levels), so a "billion laughs" is
    refused at once; a file that does not parse is named, its content never quoted.
    ``env_files``: files of ``--env-configfile ENV=FILE`` for ``env``, loaded after
    ``configfiles``; an error in one names that flag as the fix."""
    import yaml

    config: dict = {}
    env_files = [Path(p) for p in env_files]
    for path in [*configfiles, *env_files]:
        config_fix = (f"Pass the config environment {env} ran with (--env-configfile "
                      f"{env}=FILE, repeatable)." if Path(path) in env_files else
                      "Pass the config the study ran with (--configfile, repeatable).")
        try:
            text = untrusted.read_text_file(Path(path))
            data = yaml.safe_load(text) or {}
            untrusted.check_tree(data, what=f"the config {path}")
        except untrusted.UnsafeFile as exc:
            raise PublishError(f"cannot read the config {exc}. {config_fix}") from None
        except untrusted.TooComplex as exc:
            raise PublishError(f"{exc}. {config_fix}") from None
        except RecursionError:
            raise PublishError(f"the config {path} nests deeper than Python's parser reaches; "
                               f"no config nests so deep. {config_fix}") from None
        except yaml.YAMLError as exc:
            where = getattr(exc, "problem_mark", None)
            at = f" (line {where.line + 1}, column {where.column + 1})" if where else ""
            raise PublishError(f"the config {path} is not valid YAML{at}: "
                               f"{getattr(exc, 'problem', None) or 'a syntax error'}. "
                               f"{config_fix}") from None
        if not isinstance(data, dict):
            raise PublishError(f"the config {path} is not a mapping. {config_fix}")
        _merge(config, data)
    try:
        spec = yaml.safe_load(untrusted.read_text_file(Path(config_schema)))
    except (untrusted.UnsafeFile, yaml.YAMLError) as exc:
        raise PublishError(f"cannot read the config schema {config_schema}: {exc}. Run "
                           "mnistbench publish from the project's folder.") from None
    _fill_defaults(spec, config)
    _check_config(config, spec, [*configfiles, *env_files])
    return config


def _check_config(config: dict, spec: dict, configfiles: Sequence[Path]) -> None:
    """Refuse (PublishError) a merged config that the workflow's schema refuses, naming the
    key, what it must be and the files; the cost model's schema is the one beside
    :mod:`mnistbench.results.cost`."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    from mnistbench.results import cost

    spec = copy.deepcopy(spec)
    uri = "urn:mnistbench:cost-model-schema"


    def point_to_cost(node: object) -> None:  # "../../src/.../cost_model.schema.yaml#/x"
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.split("#")[0].endswith("cost_model.schema.yaml"):
                node["$ref"] = uri + ref[len(ref.split("#")[0]):]
            for value in node.values():
                point_to_cost(value)
        elif isinstance(node, list):
            for value in node:
                point_to_cost(value)

    point_to_cost(spec)
    registry = Registry().with_resource(uri, Resource.from_contents(
        {**cost.SCHEMA, "$id": uri}, default_specification=DRAFT202012))
    error = best_match(Draft202012Validator(spec, registry=registry).iter_errors(config))
    if error is None:
        return
    key = ".".join(str(part) for part in error.absolute_path) or "(top level)"
    wanted = error.schema.get("description", "") if isinstance(error.schema, dict) else ""
    message = error.message if len(error.message) <= 200 else error.message[:197] + "..."
    raise PublishError(
        f"invalid config key {key} in {', '.join(map(str, configfiles))}: {message}"
        + (f" (expected: {' '.join(wanted.split())})" if wanted else "")
        + ". Fix that key; workflow/schemas/config.schema.yaml describes every key.")


def _merge(into: dict, update: dict) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def _fill_defaults(spec: dict, data: dict) -> None:
    for name, sub in (spec.get("properties") or {}).items():
        if not isinstance(sub, dict):
            continue
        if "default" in sub:
            data.setdefault(name, copy.deepcopy(sub["default"]))
        if isinstance(data.get(name), dict) and "properties" in sub:
            _fill_defaults(sub, data[name])


def env_devices(config: dict, cells: Iterable[CellInfo]) -> list[str]:
    """The devices the study measures in one environment: config ``devices`` as listed; for
    ``auto`` the CPU, and CUDA when the environment's cells recorded a GPU; for a SLURM
    partition (cells with ``slurm_partition``) the devices its cells ran on."""
    cells = list(cells)
    if any(str(c.env.get("slurm_partition") or "") for c in cells):
        return sorted({c.device for c in cells})
    if config.get("devices", "auto") == "auto":
        gpu = any(str(c.env.get("gpu_name") or "") and _int(c.env.get("gpu_count")) > 0
                  for c in cells)
        return ["cpu", "cuda"] if gpu else ["cpu"]
    return list(config["devices"])


def expected_cells(config: dict, cells: Sequence[CellInfo],
                   env_configs: Mapping[str, dict] | None = None) -> set[tuple[str, str, str]]:
    """(env, experiment, cell) of every cell the config's matrix asks of each environment
    that has cells (:func:`mnistbench.core.study.build_matrix`, devices per :func:`env_devices`);
    an environment in ``env_configs`` is asked what its own config's matrix holds."""
    by_env: dict[str, list[CellInfo]] = defaultdict(list)
    for cell in cells:
        by_env[cell.key[0]].append(cell)
    expected: set[tuple[str, str, str]] = set()
    for env, env_cells in by_env.items():
        own = (env_configs or {}).get(env, config)
        cores = max((_int(c.env.get("cpu_cores_logical")) for c in env_cells), default=1)
        def only(device: str, env: str = env) -> list[tuple[str, str | None]]:
            return [(env, None)]  # every device of this environment's own matrix

        matrix = study.build_matrix(own["experiments"], env_devices(own, env_cells),
                                    int(own.get("seed", 0)), envs_of=only,
                                    cores=max(cores, 1))
        expected |= {c.key for c in matrix}
    return expected


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def read_cells(runs: Path) -> tuple[list[CellInfo], list[str]]:
    """Every complete cell under ``runs`` and the incomplete cell folders (no
    ``summary.json``), as ``env/experiment/cell``; hidden folders are not cells."""
    runs = Path(runs)
    if not runs.is_dir():
        raise PublishError(f"no results to publish: {runs} is not a folder. Run the study "
                           "first (make study), or unpack another machine's results.")
    cells, incomplete = [], []
    try:
        folders = rows.cell_folders(runs)
    except validate.CellError as exc:
        raise PublishError(str(exc)) from None
    for folder in folders:
        env, experiment, name = folder.relative_to(runs).parts
        key = (env, experiment, name)
        path = folder / schema.SUMMARY_FILE
        if not (path.exists() or path.is_symlink()):
            incomplete.append("/".join(key))
            continue
        try:
            cell = validate.read_cell(folder)
        except validate.CellError as exc:
            raise PublishError(str(exc)) from None
        cells.append(CellInfo(key=key, status=cell.table_status, schema_version=cell.version,
                              device=str(cell.params["device"]),
                              env=dict(cell.table_sections()["env"]),
                              invalid="" if cell.valid else cell.why()))
    return cells, incomplete


# ---------------------------------------------------------------------------------------------
# Stale: measured by other code
def _git(args: Sequence[str], root: Path) -> subprocess.CompletedProcess | None:
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              timeout=_GIT_TIMEOUT_S, env=env, check=False)
    except (OSError, subprocess.SubprocessError):
        return None


def checkout(root: Path) -> tuple[Path, str] | None:
    """(top folder, revision) of the git checkout at ``root``; the revision gets ``-dirty``
    when tracked files outside ``report/`` differ from it. None outside a checkout."""
    proc = _git(["rev-parse", "--show-toplevel", "HEAD"], root)
    if proc is None or proc.returncode != 0 or len(proc.stdout.split()) != 2:
        return None
    top, rev = proc.stdout.split()
    status = _git(["status", "--porcelain", "--untracked-files=no", "--", ".",
                   f":(exclude){REPORT_DIR}"], Path(top))
    dirty = status is not None and status.returncode == 0 and status.stdout.strip()
    return Path(top), f"{rev}-dirty" if dirty else rev


def current_digests(root: Path) -> tuple[str, str]:
    """The code digest and the workflow digest cells measured now would record: of the
    checkout's ``src/mnistbench`` when ``root`` holds one, else of the running package, with
    the installed runtime; and of ``root``'s bench rule (``""`` without one)."""
    source = root / "src" / "mnistbench"
    code = provenance.code_digest(source if source.is_dir() else None)
    rules = root / provenance.BENCH_RULES
    try:
        workflow = provenance.workflow_digest(rules.read_text(encoding="utf-8"))
    except OSError:
        workflow = ""
    return code, workflow


def stale_reasons(cells: Sequence[CellInfo], root: Path) -> tuple[list[Problem], str]:
    """The stale cells, and how the code was compared (for the manifest)."""
    code, workflow = current_digests(root)
    how = (f"cells' env.code_digest against {code} (the measuring code "
           f"{', '.join(provenance.MEASURING)} and the installed "
           f"{', '.join(provenance.RUNTIME)}), env.workflow_digest where recorded against "
           f"{workflow or '(no bench rule here)'} ({provenance.BENCH_RULES}); schema_version "
           f"against {schema.SCHEMA_VERSION}; env.mnistbench against {__version__}")
    problems = []
    for cell in cells:
        why = []
        if cell.schema_version < schema.SCHEMA_VERSION:
            why.append(f"schema version {cell.schema_version} (this mnistbench writes "
                       f"{schema.SCHEMA_VERSION}: the fields added since are empty)")
        version = str(cell.env.get("mnistbench") or "")
        if version != __version__:
            why.append(f"mnistbench {version or '(unknown)'}, not {__version__}")
        measured = str(cell.env.get("code_digest") or "")
        if not measured:
            why.append("no code digest recorded: the code that measured it is not known")
        elif measured != code:
            why.append(f"measured by other code (code digest {measured}, now {code}: the "
                       "measuring code or its installed runtime changed)")
        rule = str(cell.env.get("workflow_digest") or "")
        if rule and workflow and rule != workflow:
            why.append(f"started by another bench rule (workflow digest {rule}, now "
                       f"{workflow}: {provenance.BENCH_RULES} changed)")
        if why:
            problems.append(Problem(ProblemKind.STALE, cell.name, "; ".join(why)))
    return problems, how


def find_problems(cells: Sequence[CellInfo], incomplete: Sequence[str], config: dict,
                  root: Path, env_configs: Mapping[str, dict] | None = None,
                  ) -> tuple[list[Problem], str]:
    """Missing, failed and stale cells, in that order, and how the code was compared."""
    present = {c.key for c in cells}
    missing = sorted({"/".join(k) for k in expected_cells(config, cells, env_configs) - present}
                     | set(incomplete))
    problems = [Problem(ProblemKind.MISSING, name,
                        "incomplete: its folder has no summary.json (still running, or killed)"
                        if name in incomplete else "a cell of the study's config never ran")
                for name in missing]
    problems += [Problem(ProblemKind.FAILED, c.name, f"invalid: {c.invalid}" if c.invalid
                         else "status failed") for c in cells if c.status == "failed"]
    stale, how = stale_reasons(cells, root)
    return problems + stale, how


# ---------------------------------------------------------------------------------------------
# The steps of publish: load, then refuse
@dataclass(frozen=True)
class Study:
    """What :func:`load` found: the cells under ``runs`` (complete, and the incomplete
    folders), the study's config, and each environment's own config files and config."""

    runs: Path
    cells: list[CellInfo]
    incomplete: list[str]
    config: dict
    env_configfiles: dict[str, list[Path]]
    env_configs: dict[str, dict]

    @property
    def envs(self) -> list[str]:
        """The environments with cells under ``runs``."""
        return sorted({c.key[0] for c in self.cells})


def load(runs: Path, configfiles: Sequence[Path],
         env_configfiles: Mapping[str, Sequence[Path]] | None,
         config_schema: Path = CONFIG_SCHEMA) -> Study:
    """The cells under ``runs`` and the configs they are checked against: ``configfiles``,
    and for each environment of ``env_configfiles`` its files loaded after them. Refuses
    (:class:`PublishError`) no complete cell, a config the schema refuses, and an environment
    named in ``env_configfiles`` that has no cells."""
    cells, incomplete = read_cells(runs)
    if not cells:
        raise PublishError(f"no complete cell under {runs}: run the study first (make study).")
    config = load_config(configfiles, config_schema)
    env_files = {env: [Path(p) for p in paths]
                 for env, paths in sorted((env_configfiles or {}).items())}
    present = sorted({c.key[0] for c in cells})
    unknown = sorted(set(env_files) - set(present))
    if unknown:
        raise PublishError(
            f"--env-configfile names {', '.join(unknown)}, which has no cells under {runs} "
            f"(environments there: {', '.join(present)}): check the environment's name.")
    env_configs = {env: load_config(configfiles, config_schema, env=env, env_files=paths)
                   for env, paths in env_files.items()}
    return Study(runs=runs, cells=cells, incomplete=incomplete, config=config,
                 env_configfiles=env_files, env_configs=env_configs)


@dataclass(frozen=True)
class Checked:
    """What :func:`refuse` let through: every problem found (all waived), how the code was
    compared, the kinds waived (sorted) and why."""

    problems: list[Problem]
    how: str
    waived: list[ProblemKind]
    reason: str


def refuse(study: Study, configfiles: Sequence[Path], root: Path, report: Path,
           allowed: Mapping[ProblemKind, bool], reason: str) -> Checked:
    """Find the study's problems (:func:`find_problems`) and refuse (:class:`PublishError`,
    naming the cells and the flags that waive them) every kind not ``allowed``; a waiver
    needs a ``reason``."""
    try:
        problems, how = find_problems(study.cells, study.incomplete, study.config, root,
                                      study.env_configs)
    except (KeyError, TypeError, ValueError) as exc:
        raise PublishError(f"cannot derive the study's cells from the config "
                           f"{', '.join(map(str, configfiles))}: {exc!r}. Pass the config the "
                           "study ran with (--configfile).") from None
    refused = [p for p in problems if not allowed[p.kind]]
    if refused:
        raise PublishError(_refusal(refused, report))
    waived = sorted({p.kind for p in problems})
    if waived and not reason.strip():
        raise PublishError(
            f"--allow-{'/--allow-'.join(waived)} waives {len(problems)} cell(s) "
            f"({_counts(problems)}): say why with --reason TEXT; it is recorded in "
            f"{report / DATA_DIR / MANIFEST} and shown in {report / README}.")
    return Checked(problems=problems, how=how, waived=waived, reason=reason)


def _counts(problems: Sequence[Problem]) -> str:
    counts = Counter(p.kind for p in problems)
    return ", ".join(f"{n} {kind}" for kind, n in counts.items())


def _refusal(problems: Sequence[Problem], report: Path) -> str:
    lines = []
    for kind in ProblemKind:
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
