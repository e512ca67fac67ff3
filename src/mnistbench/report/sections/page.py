"""The page around the sections: title, the header's line on the study (results folder,
cells by status, repeats, environments), the footer, and the values the template's macros
share (several environments side by side, the share of the machine that makes a cell busy).
"""

from __future__ import annotations

from datetime import UTC, datetime

from mnistbench import __version__
from mnistbench.core import schema
from mnistbench.report import blog
from mnistbench.report.formatting import plural, readable_command
from mnistbench.report.selections import BUSY_SHARE_PCT, SETTINGS, Inputs, with_tip

TITLE = "mnistbench: CPU vs GPU training of an MNIST CNN"


def context(inputs: Inputs) -> dict:
    summary = inputs.summary
    counts = summary["status"].value_counts()
    repeats = summary.groupby(with_tip(summary, SETTINGS), dropna=False).size()
    fewest, most = int(repeats.min()), int(repeats.max())
    return {
        "title": TITLE,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "version": __version__,
        "results_dir": readable_command(str(inputs.results)),
        "envs": inputs.envs,
        "multi_env": inputs.multi_env,
        "n_cells": str(len(summary)),
        "status_counts": [{"status": s, "count": str(int(counts.get(s, 0)))}
                          for s in schema.STATUSES],
        "repeats": plural(f"{fewest}" if fewest == most else f"{fewest}–{most}", "repeat"),
        "busy_share": f"{BUSY_SHARE_PCT} %",
        "blog_title": f"\u201c{blog.TITLE}\u201d",
        "blog_source": blog.SOURCE,
    }
