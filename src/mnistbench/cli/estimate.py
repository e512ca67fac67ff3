"""``mnistbench estimate``: how long a study's execution takes, or has left, from the plan the
workflow wrote when it started (:mod:`mnistbench.launch.estimate`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mnistbench.core import untrusted
from mnistbench.core.options import path_of
from mnistbench.launch.estimate import PLAN_FILE, Plan, progress_summary

#: The largest plan.json read: 100 MiB, some 500,000 cells (a study's is a few hundred KiB).
PLAN_MAX_BYTES = 100 << 20


def register(sub) -> None:
    p = sub.add_parser(
        "estimate", help="print how long a study's execution takes, or has left",
        description="Print the estimate of an execution's duration from its plan (the file "
        "the workflow writes when it starts, results/logs/estimate/plan.json): before its "
        "first cell, the cells and the estimated total with a range; once cells are done, "
        "how many and the time left, refitted from them (docs/workflow.md). To size a study "
        "before running it: `snakemake -n`, whose last line is the same estimate.")
    p.add_argument("--plan", type=path_of, default=Path("results/logs/estimate", PLAN_FILE),
                   help="the execution's plan (default: %(default)s)")
    p.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    """``mnistbench estimate``: print where the plan's execution stands; 1 when unreadable."""
    try:
        plan = Plan.from_json(untrusted.read_text_file(args.plan, max_bytes=PLAN_MAX_BYTES))
    except untrusted.UnsafeFile as exc:
        reason = exc.why
    except ValueError as exc:  # TooComplex, a JSON syntax error, a value no plan holds
        reason = str(exc)
    else:
        print(progress_summary(plan))
        return 0
    print(f"mnistbench estimate: error: cannot read the plan {args.plan} ({reason}): give the "
          "plan.json a study wrote when it started (results/logs/estimate/ of its working "
          "directory), or size a study with `snakemake -n`.", file=sys.stderr)
    return 1
