"""Where ``mnistbench publish`` builds the new publication before the swap: a staging folder in
``report/`` (:func:`staging_folder`), and its ``data/``, made from the results
(:func:`stage_data`): the tables aggregated again from the runs, which must be the results'
tables byte for byte, the rows of the environments kept as published, and the cost model."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from mnistbench.core import atomic
from mnistbench.publish.checks import PublishError
from mnistbench.publish.kept import Kept
from mnistbench.publish.layout import COST_MODEL, TABLES
from mnistbench.publish.swap import check_targets
from mnistbench.results import aggregate, archive

#: Name start of publish's staging folder in ``report/``; a killed run's is removed by the
#: next (atomic.remove_dead).
STAGING = ".publish-"


@contextlib.contextmanager
def staging_folder(report: Path) -> Iterator[Path]:
    """A new staging folder in ``report`` (made if need be; a killed publish's removed),
    removed when the block ends. A block that fails leaves ``report`` as it was: the folder
    and any folder made for it are removed, and an OSError is raised as a
    :class:`PublishError` naming ``report``."""
    made: list[Path] = []
    try:
        made = atomic.make_dirs(report)
        check_targets(report)
        atomic.remove_dead(report, STAGING)  # of a publish that was killed
        stage = Path(tempfile.mkdtemp(prefix=atomic.owner_prefix(STAGING), dir=report))
    except PublishError:
        atomic.remove_dirs(made)
        raise
    except OSError as exc:
        atomic.remove_dirs(made)
        raise PublishError(atomic.folder_error(report, exc, "the publication", "--report")
                           ) from None
    try:
        yield stage
    except BaseException as exc:
        shutil.rmtree(stage, ignore_errors=True)
        atomic.remove_dirs(made)
        if isinstance(exc, OSError):
            raise PublishError(atomic.folder_error(report, exc, "the publication",
                                                   "--report")) from None
        raise
    shutil.rmtree(stage, ignore_errors=True)


def stage_data(runs: Path, results: Path, data: Path, kept: Kept | None,
               cost_model: Path) -> None:
    """The publication's tables and cost model in ``data``: ``runs`` aggregated, checked to
    be ``results``' tables (:func:`stage_tables`), with the rows of ``kept`` merged in, and
    ``cost_model`` (:func:`stage_cost_model`)."""
    stage_tables(runs, results, data)
    if kept is not None:
        kept.merge_into(data)
    stage_cost_model(cost_model, data / COST_MODEL)


def stage_tables(runs: Path, results: Path, out: Path) -> None:
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


def stage_cost_model(source: Path, target: Path) -> None:
    """The cost model ``source`` as JSON at ``target``: copied when it is JSON, resolved from
    YAML otherwise; refused (:class:`PublishError`) when it is missing or invalid."""
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
