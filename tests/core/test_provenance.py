"""Tests of mnistbench.core.provenance: the code digest sees what runs and nothing else, the
workflow digest sees the bench rule's lines and not its comments."""

from __future__ import annotations

import shutil
from pathlib import Path

from mnistbench.core import provenance

PACKAGE = Path(provenance.__file__).resolve().parents[1]
VERSIONS = {"torch": "2.14.1", "numpy": "2.4.6"}


def copy_package(tmp_path: Path) -> Path:
    """A copy of the running package's source (what the digest reads)."""
    target = tmp_path / "mnistbench"
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def test_code_digest_ignores_comments_docstrings_layout_and_other_layers(tmp_path):
    package = copy_package(tmp_path)
    before = provenance.code_digest(package, VERSIONS)
    assert before == provenance.code_digest(PACKAGE, VERSIONS)
    train = package / "measure" / "train.py"
    text = train.read_text()
    train.write_text("# a new comment\n" + text.replace('"""', '"""Edited docstring. ', 1)
                     + "\n\n# trailing comment\n")
    (package / "report" / "render.py").write_text("# the report, rewritten\n")
    (package / "measure" / "notes.txt").write_text("untracked scratch note\n")
    assert provenance.code_digest(package, VERSIONS) == before


def test_code_digest_changes_with_measuring_code_and_runtime(tmp_path):
    package = copy_package(tmp_path)
    before = provenance.code_digest(package, VERSIONS)
    model = package / "measure" / "model.py"
    model.write_text(model.read_text() + "\nEXTRA_LAYER = 1\n")
    changed = provenance.code_digest(package, VERSIONS)
    assert changed != before
    assert provenance.code_digest(package, {**VERSIONS, "torch": "2.15.0"}) != changed
    schema = package / "core" / "schema.py"
    schema.write_text(schema.read_text() + "\nNEW = 2\n")
    assert provenance.code_digest(package, VERSIONS) != changed


def test_normalized_source_keeps_code_and_drops_docstrings():
    a = 'def f():\n    """Doc."""\n    return 1  # one\n'
    b = 'def f():\n    return 1\n'
    assert provenance.normalized_source(a) == provenance.normalized_source(b)
    assert provenance.normalized_source(b) != provenance.normalized_source(b.replace("1", "2"))
    # a string that is not the first statement is code, not a docstring
    c = 'def f():\n    x = 1\n    "kept"\n    return x\n'
    assert provenance.normalized_source(c) != provenance.normalized_source(
        'def f():\n    x = 1\n    return x\n')


def test_workflow_digest_sees_rule_lines_not_comments():
    rule = "rule bench:\n    shell:\n        'unset OMP_NUM_THREADS; mnistbench train'\n"
    base = provenance.workflow_digest(rule)
    assert provenance.workflow_digest("# why\n\n" + rule.replace("    shell", "  shell")) == base
    assert provenance.workflow_digest(rule.replace("OMP_NUM_THREADS", "MKL_NUM_THREADS")) != base


def test_the_running_digest_is_the_installed_code_and_versions():
    assert provenance.running_code_digest() == provenance.code_digest()
    assert set(provenance.runtime_versions()) == set(provenance.RUNTIME)
    assert provenance.runtime_versions()["torch"]
