"""Tests for mnistbench.schema: one documented definition of every output column."""

from __future__ import annotations

from pathlib import Path

from mnistbench import schema

DOC = Path(__file__).resolve().parents[1] / "docs" / "columns.md"


def test_docs_match_the_schema() -> None:
    """docs/columns.md is the schema's own Markdown (regenerate it when the schema changes)."""
    assert DOC.read_text().endswith(schema.markdown_tables())


def test_summary_columns_are_unique_and_start_with_identity() -> None:
    """The aggregated summary has each column once, identity and status first."""
    cols = schema.summary_columns()
    assert len(cols) == len(set(cols))
    assert cols[:5] == ["env", "experiment", "cell", "status", "reason"]


def test_every_column_has_a_description_and_statuses_have_codes() -> None:
    """Every field is described, and every status has a distinct non-zero exit code but ok."""
    for table in (schema.PARAM_FIELDS, schema.RESULT_FIELDS, schema.TIMING_FIELDS,
                  schema.ENV_FIELDS, schema.EPOCH_COLUMNS, schema.RESOURCE_COLUMNS):
        assert all(desc for _, desc in table.values())
    assert set(schema.EXIT_CODES) == set(schema.STATUSES)
    assert len(set(schema.EXIT_CODES.values())) == len(schema.STATUSES)
    assert schema.EXIT_CODES["ok"] == 0


def test_units_cover_phase_columns() -> None:
    """Every phase has a seconds column in the epochs table and the results."""
    units = schema.units()
    for phase in schema.PHASES:
        assert units[f"{phase}_s"] == "s"
        assert f"{phase}_s" in schema.EPOCH_COLUMNS and f"{phase}_s" in schema.RESULT_FIELDS
