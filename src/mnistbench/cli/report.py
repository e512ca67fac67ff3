"""``mnistbench report``: the self-contained HTML report of the aggregated tables
(:func:`mnistbench.report.render.render_report`)."""

from __future__ import annotations

from pathlib import Path

from mnistbench.cli.common import CliError
from mnistbench.core.options import path_of


def register(sub) -> None:
    p = sub.add_parser(
        "report",
        help="render the self-contained HTML report",
        description="Render one self-contained HTML file (CSS inline, charts embedded) from "
        "the aggregated tables and a cost model.",
    )
    p.add_argument("--results", type=path_of, default=Path("results"),
                   help="folder with summary.csv, epochs.csv, resources.csv "
                   "(default: %(default)s)")
    p.add_argument("--cost-model", type=path_of, default=None,
                   help="YAML or JSON file with the cost model (prices, power, life); "
                   "default: the built-in model")
    p.add_argument("--out", type=path_of, default=Path("results/report/index.html"),
                   help="the HTML file to write")
    p.add_argument("--figures-dir", type=path_of, default=None,
                   help="also write each chart as a PNG file here")
    p.add_argument("--command", default=None,
                   help="the command that reproduces this report, shown in the methodology")
    p.set_defaults(func=command, cleans_up=True)


def command(args) -> int:
    from mnistbench.report import render as report

    try:
        path = report.render_report(args.results, args.out, cost_model_path=args.cost_model,
                                    figures_dir=args.figures_dir, command=args.command)
    except report.ReportError as exc:
        raise CliError(str(exc)) from None
    print(path)
    return 0
