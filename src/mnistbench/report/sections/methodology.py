"""Methodology and environment: the prose lives in the template; here are every
environment's fields side by side, the settings of each experiment, every column with its
unit, and the reproducing command."""

from __future__ import annotations

import re

from mnistbench.core import schema
from mnistbench.report.formatting import missing, plain, readable_command
from mnistbench.report.selections import TIP_COLUMN, Inputs, distinct
from mnistbench.results import aggregate


def _env_rows(summary, envs) -> list[dict]:
    rows = []
    for field, (unit, description) in schema.ENV_FIELDS.items():
        values = [", ".join(distinct(summary[summary["env"] == env], field)) or "–"
                  for env in envs]
        if all(v == "–" for v in values) and field.startswith("slurm"):
            continue
        rows.append({"field": field, "unit": unit, "description": description,
                     "per_env": values})
    return rows


def _unrecorded(summary, key: str) -> bool:
    """Whether ``key`` is a field this schema version added (schema.ADDED_IN) that no cell of
    the study recorded: its summaries predate it, so neither its settings nor the column
    table name it."""
    if schema.ADDED_IN.get(key, 1) < schema.SCHEMA_VERSION:
        return False
    return key not in summary.columns or all(missing(v) for v in summary[key].tolist())


def _settings(summary) -> list[dict]:
    params = {**schema.PARAM_FIELDS}
    if TIP_COLUMN in summary.columns and TIP_COLUMN not in params:
        params[TIP_COLUMN] = ("", "the tips experiment's lever")
    rows = []
    for experiment, group in summary.groupby("experiment", sort=True):
        shown = []
        for key, (unit, _) in params.items():
            if key in schema.ID_COLUMNS or key not in group.columns or _unrecorded(summary,
                                                                                  key):
                continue
            values = sorted({v for v in group[key].tolist() if not missing(v)},
                            key=lambda v: (isinstance(v, str), v))
            shown.append({"key": key, "unit": unit,
                          "shown": ", ".join(plain(v) for v in values) or "–"})
        rows.append({"experiment": experiment, "cells": str(len(group)), "params": shown})
    return rows


def _worded(text: str) -> str:
    """A column's description in the report's words: the loaders by their names."""
    return re.sub(r"\bresident loader\b", "data held in memory",
                  re.sub(r"\bdataloader loader\b", "the DataLoader", str(text)))


def context(inputs: Inputs) -> dict:
    return {
        "env_rows": _env_rows(inputs.summary, inputs.envs),
        "settings": _settings(inputs.summary),
        "columns": [{**row, "description": _worded(row["description"])}
                    for row in aggregate.column_rows()
                    if not _unrecorded(inputs.summary, row["name"])],
        "command": readable_command(inputs.command) if inputs.command else "",
    }
