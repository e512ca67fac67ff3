"""A cell whose mnistbench version is not known counts as stale (mnistbench.publish's
stale_reasons): only a cell that records this version is current."""

from __future__ import annotations

import pytest

from mnistbench import __version__, publish
from mnistbench.core import schema


def cell(tmp_path, **env) -> publish.CellInfo:
    """A cell measured by the running code (its digests) with ``env`` over the current one."""
    code, workflow = publish.current_digests(tmp_path)
    current = {"mnistbench": __version__, "code_digest": code, "workflow_digest": workflow}
    return publish.CellInfo(("env", "sweep", "cell"), "ok", schema.SCHEMA_VERSION, "cpu",
                            {**current, **env})


def test_a_cell_of_this_version_is_current(tmp_path):
    assert publish.stale_reasons([cell(tmp_path)], tmp_path)[0] == []


@pytest.mark.parametrize("version", ["", None, "absent"])
def test_a_cell_with_no_recorded_version_is_stale(tmp_path, version):
    """No version (empty, null or no field at all) is not this version: the cell is stale."""
    unknown = cell(tmp_path, mnistbench=version)
    if version == "absent":
        del unknown.env["mnistbench"]
    stale, _ = publish.stale_reasons([unknown], tmp_path)
    assert [(p.kind, p.cell) for p in stale] == [("stale", "env/sweep/cell")]
    assert stale[0].why == f"mnistbench (unknown), not {__version__}"
