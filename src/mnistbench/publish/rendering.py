"""The report of a publication and the arguments it is rendered with: ``report/index.html``
rendered from ``report/data`` alone (:func:`mnistbench.report.render.render_report`), first in
the staging folder under the names it will have in place (:func:`render_staged`), and again by
``publish --check`` (:func:`render`); the command shown in it that measures and publishes the
study (:func:`reproduce_command`)."""

from __future__ import annotations

import dataclasses
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from mnistbench.publish.checks import DEFAULT_CONFIG, PublishError
from mnistbench.publish.layout import COST_MODEL, DATA_DIR, INDEX, README
from mnistbench.publish.markdown import readme
from mnistbench.results import aggregate


def render_arguments(report: Path, configfiles: Sequence[Path],
                     env_configfiles: Mapping[str, Sequence[Path]],
                     env_configs: Mapping[str, dict]) -> dict:
    """The arguments the report is rendered with, recorded in the manifest: its tables and
    cost model as paths relative to the current folder where the publication will lie, and
    the command that measures and publishes the study."""
    report_arg = _display(report)
    return {
        "results": f"{report_arg}/{DATA_DIR}",
        "cost_model": f"{report_arg}/{DATA_DIR}/{COST_MODEL}",
        "command": reproduce_command(configfiles, env_configfiles, env_configs),
    }


def render_into(stage: Path, args: dict, manifest: dict) -> None:
    """``index.html`` (:func:`render_staged`, with the checks the manifest records) and
    ``README.md`` (:func:`mnistbench.publish.markdown.readme`) of the publication staged in
    ``stage``."""
    # the page's caveats show the checks the manifest records, as they render again from the
    # manifest beside the tables (verify)
    render_staged(stage / DATA_DIR, args, stage / INDEX, checks=manifest.get("checks"))
    (stage / README).write_text(readme(manifest), encoding="utf-8")


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
