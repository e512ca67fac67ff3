"""Tests for mnistbench.core.schema: one documented definition of every output column."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mnistbench.core import schema

DOC = Path(__file__).resolve().parents[2] / "docs" / "columns.md"


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


CONFIG_SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"


def _resolve(ref: str, defs: dict) -> dict:
    """The schema a $ref names: a local #/$defs/NAME, or a file relative to the config schema
    (the cost model's, src/mnistbench/results/cost_model.schema.yaml), with an optional fragment."""
    target, _, fragment = ref.partition("#")
    if target:
        node = yaml.safe_load((CONFIG_SCHEMA.parent / target).read_text())
        return node["$defs"][fragment.rsplit("/", 1)[1]] if fragment else node
    return defs[fragment.rsplit("/", 1)[1]]


def _number_keys(node: dict, defs: dict, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Key paths of every number-valued setting of the config schema (following $refs)."""
    while "$ref" in node and node.get("type") is None:
        node = _resolve(node["$ref"], defs)
        defs = node.get("$defs", defs)
    if node.get("type") == "number":
        return [path]
    keys = []
    for name, child in node.get("properties", {}).items():
        keys += _number_keys(child, defs, (*path, name))
    return keys


def schema_validator(loaded: dict):
    """The jsonschema validator of the config schema ``loaded``, its references to other files
    resolved beside it (as Snakemake's validate resolves them)."""
    from urllib.parse import urlparse

    import jsonschema
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    def retrieve(uri: str) -> Resource:
        contents = yaml.safe_load(Path(urlparse(uri).path).read_text())
        return Resource.from_contents(contents, default_specification=DRAFT202012)

    loaded = {**loaded, "$id": CONFIG_SCHEMA.as_uri()}
    cls = jsonschema.validators.validator_for(loaded)
    return cls(loaded, registry=Registry(retrieve=retrieve))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_config_schema_rejects_non_finite_numbers(value) -> None:
    """Every number-valued config key refuses .nan, .inf and -.inf, naming a finite number as
    what is expected (every key at once through the schema's own jsonschema validator, built
    once; Snakemake's validate, which uses it, on the first key); finite values and the
    defaults still pass."""
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    loaded = yaml.safe_load(CONFIG_SCHEMA.read_text())
    keys = _number_keys(loaded, loaded["$defs"])
    assert ("experiments", "sweep", "lr") in keys and ("cost", "price_per_kwh") in keys
    assert len(keys) == 27  # lr and time_limit of 7 experiments, 13 of the cost model

    def config_with(*set_keys: tuple[str, ...]) -> dict:
        config: dict = {}
        for key in set_keys:
            block = config
            for part in key[:-1]:
                block = block.setdefault(part, {})
            block[key[-1]] = value
        return config

    validator = schema_validator(loaded)
    named: dict[tuple, set[str]] = {}
    for error in validator.iter_errors(config_with(*keys)):
        named.setdefault(tuple(error.absolute_path), set()).add(
            error.schema.get("description", ""))
    assert set(named) == set(keys)
    for key, descriptions in named.items():
        assert any(d.startswith("a finite number") for d in descriptions), key
    with pytest.raises(WorkflowError) as info:
        validate(config_with(keys[0]), str(CONFIG_SCHEMA))
    error = info.value.__context__
    assert tuple(error.absolute_path) == keys[0]
    assert error.schema["description"].startswith("a finite number")
    defaults: dict = {}
    validate(defaults, str(CONFIG_SCHEMA))  # (the cost model's defaults: cost.resolve)
    assert defaults["experiments"]["sweep"]["lr"] == 0.001
    assert defaults["experiments"]["convergence"]["time_limit"] == 0
    validate({"experiments": {"sweep": {"lr": 0.5, "time_limit": 3600.0}},
              "cost": {"price_per_kwh": 1e300}}, str(CONFIG_SCHEMA))
