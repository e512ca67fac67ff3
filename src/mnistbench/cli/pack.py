"""``mnistbench pack`` (one archive of an environment's results) and ``mnistbench unpack``,
alias ``import`` (an archive checked and merged into the runs folder):
:mod:`mnistbench.results.archive`."""

from __future__ import annotations

from pathlib import Path

from mnistbench.cli.common import CliError, to_stderr
from mnistbench.core.options import path_of


def register(sub) -> None:
    p = sub.add_parser(
        "pack", help="write one archive of an environment's results, to merge elsewhere",
        description="Write RUNS/ENV (every complete cell, and the environment's own files) "
        "into one .tar.gz with a manifest of sizes and SHA-256 checksums, checked as "
        "`mnistbench unpack` checks it before it is renamed into place (docs/publish.md).")
    p.add_argument("env", nargs="?", default=None,
                   help="the environment folder under RUNS (default: this machine's, "
                   "`mnistbench env-name`)")
    p.add_argument("--runs", type=path_of, default=Path("results/runs"),
                   help="runs folder (default: %(default)s)")
    p.add_argument("--out", type=path_of, default=None,
                   help="the archive to write (default: ENV.mnistbench.tar.gz here, with "
                   "--as: NAME.mnistbench.tar.gz)")
    p.add_argument("--as", dest="rename", default=None, metavar="NAME",
                   help="hold the environment under NAME in the archive (each cell's env "
                   "rewritten, nothing measured changed; the manifest records the old name): "
                   "for two machines whose host names, and so default environment names, "
                   "match (default: its own name)")
    p.set_defaults(func=pack_command, cleans_up=True)

    p = sub.add_parser(
        "unpack", aliases=["import"],
        help="check an archive of `mnistbench pack` and merge it into the runs folder",
        description="Check ARCHIVE (members only plain files under runs/ENV, no links or "
        "devices, sizes and SHA-256 as its manifest says, a schema version the aggregate "
        "reads, cells that aggregate) and merge its environment into RUNS/ENV. Nothing is "
        "changed when a check fails; an environment already there is replaced only with "
        "--replace. Then rerun the workflow or `mnistbench aggregate` (docs/publish.md).")
    p.add_argument("archive", type=path_of, help="the .tar.gz `mnistbench pack` wrote")
    p.add_argument("--runs", type=path_of, default=Path("results/runs"),
                   help="runs folder to merge into (default: %(default)s)")
    p.add_argument("--replace", action="store_true",
                   help="replace the environment when RUNS already holds it")
    p.add_argument("--check", action="store_true",
                   help="only check the archive (merges nothing: takes no --replace)")
    p.set_defaults(func=unpack_command, parser=p, cleans_up=True)


def pack_command(args) -> int:
    from mnistbench.core import study
    from mnistbench.results import archive

    env = args.env or study.environment_name()
    try:
        path = archive.pack(args.runs, env, args.out, log=to_stderr, rename=args.rename)
    except archive.ArchiveError as exc:
        raise CliError(str(exc)) from None
    print(path)
    return 0


def unpack_command(args) -> int:
    from mnistbench.results import archive

    if args.check and args.replace:
        args.parser.error("--check only checks the archive and merges nothing: --replace "
                          "would have no effect; drop it or --check")

    try:
        if args.check:
            with archive.open_archive(args.archive) as handle:
                result = archive.check_archive(handle, name=str(args.archive))
        else:
            result = archive.unpack(args.archive, args.runs, replace=args.replace)
    except OSError as exc:
        raise CliError(f"cannot read the archive {args.archive}: {exc.strerror or exc}."
                       ) from None
    except archive.ArchiveError as exc:
        raise CliError(str(exc)) from None
    print(archive.describe(result))
    return 0
