"""publish.py's checks live in mnistbench.publish_checks: every name moved there is still
``mnistbench.publish.NAME`` (the same object), and the modules of the top stay under 800
lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from mnistbench import publish, publish_checks

PKG = Path(__file__).resolve().parents[1] / "src" / "mnistbench"

MOVED = ("PublishError", "Problem", "CellInfo", "REPORT_DIR", "DEFAULT_CONFIG",
         "CONFIG_SCHEMA", "load_config", "env_devices", "expected_cells", "read_cells",
         "checkout", "current_digests", "stale_reasons", "find_problems")


@pytest.mark.parametrize("name", MOVED)
def test_moved_names_stay_importable_from_publish(name):
    assert getattr(publish, name) is getattr(publish_checks, name)


def test_publish_still_holds_the_publication():
    for name in ("publish", "Publication", "render", "render_staged", "verify", "readme",
                 "inert", "inert_cell", "fence_for", "strip_stamp", "STAMP", "FORMAT",
                 "PUBLICATION_VERSION", "DATA_DIR", "MANIFEST", "TABLES", "COST_MODEL",
                 "reproduce_command"):
        assert hasattr(publish, name), name


def test_a_publish_error_of_the_checks_is_caught_as_publishs(tmp_path):
    with pytest.raises(publish.PublishError, match="is not a folder"):
        publish.read_cells(tmp_path / "none")


@pytest.mark.parametrize("name", ["publish.py", "publish_checks.py", "publish_kept.py", "cli.py",
                                  "console.py", "steps.py", "completion.py"])
def test_top_modules_stay_under_800_lines(name):
    lines = len((PKG / name).read_text(encoding="utf-8").splitlines())
    assert lines < 800, f"src/mnistbench/{name} has {lines} lines"
