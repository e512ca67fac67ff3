"""The package's public names: what the command and the tests use is in
``mnistbench.publish.__all__`` and importable from the package, and the problem kinds are the
strings the manifest and the ``--allow-KIND`` flags spell."""

from __future__ import annotations

import pytest

from mnistbench import publish

#: The names of mnistbench.publish that the command (cli.py) and the tests use.
USED = ("PublishError", "Problem", "ProblemKind", "CellInfo", "REPORT_DIR", "DEFAULT_CONFIG",
        "CONFIG_SCHEMA", "load_config", "env_devices", "expected_cells", "read_cells",
        "checkout", "current_digests", "stale_reasons", "find_problems", "publish",
        "Publication", "render", "render_staged", "verify", "readme", "inert", "inert_cell",
        "fence_for", "strip_stamp", "STAMP", "FORMAT", "PUBLICATION_VERSION", "DATA_DIR",
        "MANIFEST", "TABLES", "COST_MODEL", "reproduce_command")


def test_the_names_in_use_are_public_and_importable():
    assert sorted(set(USED) - set(publish.__all__)) == []
    assert [name for name in publish.__all__ if not hasattr(publish, name)] == []


def test_the_problem_kinds_are_the_manifest_s_strings():
    kinds = publish.ProblemKind
    assert [k.value for k in kinds] == ["missing", "failed", "stale"]
    assert f"{kinds.STALE}" == "stale" and kinds("failed") is kinds.FAILED
    assert {"stale": 1}.get(kinds.STALE) == 1  # a manifest's checks are read by its kinds


def test_a_publish_error_of_the_checks_is_caught_as_publishs(tmp_path):
    with pytest.raises(publish.PublishError, match="is not a folder"):
        publish.read_cells(tmp_path / "none")
