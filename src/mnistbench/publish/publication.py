"""``mnistbench publish`` (``make publish``): the current results copied into ``report/`` with a
manifest, the report rendered from them, and a README (:func:`publish`), one step after the
other; a step that fails leaves ``report/`` as it was."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mnistbench.publish import checks, kept, manifest, rendering, staging, swap
from mnistbench.publish.checks import CONFIG_SCHEMA, DEFAULT_CONFIG, Problem, ProblemKind
from mnistbench.publish.layout import COST_MODEL, DATA_DIR, INDEX, REPORT_DIR


@dataclass
class Publication:
    """What :func:`publish` wrote."""

    report: Path
    manifest: dict
    problems: list[Problem] = field(default_factory=list)


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
    does not hold stay in it as published (:func:`mnistbench.publish.kept.kept_environments`),
    e.g. a machine lent for one session whose cells cannot be measured again.
    ``cost_model``: default ``results/cost_model.json`` (written by the workflow from config
    ``cost``). ``root``: the checkout the code is compared with (default: here). Paths are
    recorded relative to the current folder, where the publication is re-rendered from
    (run it from the project's folder). Raises :class:`PublishError`; ``report`` is then as
    it was."""
    results, report = Path(results), Path(report)
    root = Path(root) if root is not None else Path.cwd()
    study = checks.load(results / "runs", configfiles, env_configfiles, config_schema)
    kept_envs = (kept.keep(report, study.envs, log, kept.hardware_of(
        (c.key[0], c.env) for c in study.cells)) if keep_published else None)
    env_files, env_configs = kept.all_env_configs(study, kept_envs)
    allowed = {ProblemKind.MISSING: allow_missing, ProblemKind.FAILED: allow_failed,
               ProblemKind.STALE: allow_stale}
    checked = checks.refuse(study, configfiles, root, report, allowed, reason)
    cost_source = Path(cost_model) if cost_model is not None else results / COST_MODEL
    with staging.staging_folder(report) as stage:
        staging.stage_data(study.runs, results, stage / DATA_DIR, kept_envs, cost_source)
        args = rendering.render_arguments(report, configfiles, env_files, env_configs)
        if log is not None:
            log(f"rendering {report / INDEX} from {stage / DATA_DIR}")
        record = manifest.build_manifest(stage / DATA_DIR, study, checked, configfiles,
                                         env_files, args, root, kept_envs)
        rendering.render_into(stage, args, record)
        manifest.write_manifest(stage, record)
        swap.swap_in(report, stage)
    return Publication(report=report, manifest=record, problems=checked.problems)
