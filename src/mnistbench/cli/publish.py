"""``mnistbench publish``: the current results copied into report/ with a manifest, or the
publication there checked (:mod:`mnistbench.publish`; docs/publish.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mnistbench.cli.common import CliError, to_stderr
from mnistbench.core.options import path_of
from mnistbench.core.schema import ProblemKind

#: What each ``--allow-KIND`` waives, in the help.
WAIVED = {ProblemKind.MISSING: "cells of the study that never ran or did not finish",
          ProblemKind.FAILED: "cells with status failed",
          ProblemKind.STALE: "cells measured by other code than this checkout's"}


def register(sub) -> None:
    p = sub.add_parser(
        "publish", help="copy the current results into report/ with a manifest (or check it)",
        description="Copy the tables and cost model of RESULTS into REPORT/data with "
        "manifest.json (environments, hardware, dates, git revision, cells per status, "
        "checksums), render REPORT/index.html from them and write REPORT/README.md. Refuses, "
        "naming the cells, when cells of the config's study are missing, failed or stale "
        "(measured by other code than this checkout's), unless allowed with a --reason that "
        "the manifest records. Run it from the project's folder (docs/publish.md).")
    p.add_argument("--results", type=path_of, default=Path("results"),
                   help="results folder: runs/, the tables, cost_model.json "
                   "(default: %(default)s)")
    p.add_argument("--report", type=path_of, default=Path("report"),
                   help="the publication folder (default: %(default)s)")
    p.add_argument("--configfile", type=path_of, action="append", default=None,
                   help="the config(s) the study ran with, in Snakemake's order (repeatable; "
                   "default: config/config.yaml)")
    p.add_argument("--env-configfile", action="append", default=[], metavar="ENV=FILE",
                   type=_env_file,
                   help="environment ENV ran a study of its own: FILE was its --configfile, "
                   "loaded after the --configfile(s); its cells are checked against that "
                   "study (repeatable; e.g. the container's part of the matrix)")
    p.add_argument("--cost-model", type=path_of, default=None,
                   help="cost model to publish (default: RESULTS/cost_model.json)")
    for kind in ProblemKind:
        p.add_argument(f"--allow-{kind}", action="store_true",
                       help=f"publish despite {WAIVED[kind]} (needs --reason)")
    p.add_argument("--reason", default="", help="why checks were waived (in the manifest)")
    p.add_argument("--keep-published", action="store_true",
                   help="keep the environments of REPORT's publication that RESULTS/runs "
                   "does not hold, as published (e.g. a lent machine's: their rows, and "
                   "their checks from that publication)")
    p.add_argument("--check", action="store_true",
                   help="instead, check the publication in REPORT: checksums, and that "
                   "rendering its data again gives its index.html but for the date (takes "
                   "only --report)")
    p.set_defaults(func=command, parser=p, cleans_up=True)


def _env_file(text: str) -> tuple[str, Path]:
    """``ENV=FILE`` of ``publish --env-configfile``."""
    env, sep, path = text.partition("=")
    if not sep or not env or not path:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not ENV=FILE (e.g. myhost-docker-cpu=config/container.yaml)")
    return env, Path(path)


def _publish_usage(args) -> None:
    """Contradictory flags of ``publish`` are usage errors (exit 2): ``--check`` publishes
    nothing, so no flag of a publication applies; ``--reason`` explains a waiver, so it needs
    an ``--allow-*`` flag."""
    allows = [f"--allow-{kind}" for kind in ProblemKind if getattr(args, f"allow_{kind}")]
    if args.check:
        given = [*allows]
        given += [flag for flag, on in (
            ("--reason", bool(args.reason)), ("--cost-model", args.cost_model is not None),
            ("--configfile", args.configfile is not None),
            ("--env-configfile", bool(args.env_configfile)),
            ("--results", args.results != Path("results"))) if on]
        if given:
            args.parser.error(f"--check checks the publication in --report and publishes "
                              f"nothing: {', '.join(given)} would have no effect; drop "
                              f"{'them' if len(given) > 1 else 'it'} or --check")
    elif args.reason.strip() and not allows:
        args.parser.error("--reason says why checks were waived, but no --allow-missing, "
                          "--allow-failed or --allow-stale waives any: add the one it "
                          "explains, or drop --reason")


def command(args) -> int:
    from mnistbench import publish

    _publish_usage(args)
    if args.check:
        problems = publish.verify(args.report)
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            raise CliError(f"{len(problems)} problem(s) with the publication in {args.report} "
                           "(listed above); publish again (make publish).")
        print(f"{args.report}: every checksum matches, and its data renders to its "
              "index.html")
        return 0
    env_configfiles: dict[str, list[Path]] = {}
    for env, path in args.env_configfile:
        env_configfiles.setdefault(env, []).append(path)
    try:
        result = publish.publish(
            args.results, args.report, configfiles=args.configfile or [publish.DEFAULT_CONFIG],
            env_configfiles=env_configfiles, cost_model=args.cost_model,
            allow_missing=args.allow_missing, allow_failed=args.allow_failed,
            allow_stale=args.allow_stale, reason=args.reason,
            keep_published=args.keep_published, log=to_stderr)
    except publish.PublishError as exc:
        raise CliError(str(exc)) from None
    cells = result.manifest["cells"]
    print(f"{result.report}: {cells['total']} cells of {len(result.manifest['environments'])} "
          f"environment(s); manifest {result.report / publish.DATA_DIR / publish.MANIFEST}")
    return 0
