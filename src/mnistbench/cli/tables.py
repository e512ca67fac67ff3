"""``mnistbench aggregate`` (every cell merged into the tidy tables,
:func:`mnistbench.results.aggregate.aggregate`) and ``mnistbench table`` (their headline
figures printed to paste, :func:`mnistbench.results.table.render`)."""

from __future__ import annotations

from pathlib import Path

from mnistbench.cli.common import CliError
from mnistbench.core import untrusted
from mnistbench.core.options import path_of


def register(sub) -> None:
    p = sub.add_parser(
        "aggregate",
        help="merge cells into summary.csv, epochs.csv and resources.csv",
        description="Read every cell under RUNS (layout RUNS/{env}/{experiment}/{cell}/) and "
        "write tidy tables into --out-dir. Cells copied in from other machines merge. Each ok "
        "cell is set against its environment's measured limit of its device where there is "
        "one (RUNS/{env}/peak/{device}.json, `mnistbench peak`): summary.csv's limit_* "
        "columns.",
    )
    p.add_argument("runs", type=path_of, nargs="?", default=Path("results/runs"),
                   help="runs folder (default: %(default)s)")
    p.add_argument("--out-dir", type=path_of, default=Path("results"),
                   help="where the CSVs go (default: %(default)s)")
    p.set_defaults(func=aggregate_command, cleans_up=True)

    p = sub.add_parser(
        "table", help="print the headline figures as a Markdown or CSV table, to paste",
        description="Print, from the aggregated summary.csv in RESULTS, one row per cell of "
        "the study but its repeat (experiment, device, precision, loader, batch size; the "
        "tip or width where a row has one) with each environment's medians over its ok runs "
        "of the epoch time, samples/s and final test accuracy, and its runs: every "
        "environment one after the other, or those named with --env side by side (two get "
        "the speed-up of the second over the first). Markdown, ready to paste into an issue, "
        "or CSV (mnistbench.results.table).")
    p.add_argument("--results", type=path_of, default=Path("results"),
                   help="folder with the aggregated summary.csv (report/data for the "
                   "published study)")
    p.add_argument("--env", action="append", default=[], metavar="ENV", dest="envs",
                   help="an environment to show, side by side with the others named "
                   "(repeatable, in the order of the columns; default: every environment, "
                   "one after the other)")
    p.add_argument("--experiment", action="append", default=[], metavar="NAME",
                   dest="experiments",
                   help="only this experiment's rows (repeatable; default: every experiment)")
    p.add_argument("--format", choices=("markdown", "csv"), default="markdown",
                   help="Markdown (GitHub-flavoured) or CSV (plain numbers)")
    p.set_defaults(func=table_command, parser=p)


def aggregate_command(args) -> int:
    from mnistbench.results import aggregate

    try:
        paths = aggregate.aggregate(args.runs, args.out_dir)
    except aggregate.AggregateError as exc:
        raise CliError(str(exc)) from None
    for path in paths:
        print(path)
    return 0


def table_command(args) -> int:
    from mnistbench.results import table

    twice = dict.fromkeys(e for e in args.envs if args.envs.count(e) > 1)
    if twice:
        args.parser.error(f"--env names {', '.join(twice)} more than once: each column "
                          "of environments shows one; name each environment once")
    try:
        text = table.render(args.results, envs=args.envs, experiments=args.experiments,
                            fmt=args.format)
    except table.TableError as exc:
        raise CliError(str(exc)) from None
    untrusted.write_stdout(text, "the table")
    return 0
