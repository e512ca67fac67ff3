"""``mnistbench estimate``: how long a study's execution takes, or has left, from the plan the
workflow wrote when it started (:mod:`mnistbench.launch.estimate`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mnistbench.launch.estimate import PLAN_FILE, Plan, progress_summary


def register(sub) -> None:
    p = sub.add_parser(
        "estimate", help="print how long a study's execution takes, or has left",
        description="Print the estimate of an execution's duration from its plan (the file "
        "the workflow writes when it starts, results/logs/estimate/plan.json): before its "
        "first cell, the cells and the estimated total with a range; once cells are done, "
        "how many and the time left, refitted from them (docs/workflow.md). To size a study "
        "before running it: `snakemake -n`, whose last line is the same estimate.")
    p.add_argument("--plan", type=Path, default=Path("results/logs/estimate", PLAN_FILE),
                   help="the execution's plan (default: %(default)s)")
    p.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    """``mnistbench estimate``: print where the plan's execution stands; 1 when unreadable."""
    try:
        plan = Plan.from_json(args.plan.read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"mnistbench estimate: error: cannot read the plan {args.plan} ({exc}): give the "
              "plan.json a study wrote when it started (results/logs/estimate/ of its working "
              "directory), or size a study with `snakemake -n`.", file=sys.stderr)
        return 1
    print(progress_summary(plan))
    return 0
