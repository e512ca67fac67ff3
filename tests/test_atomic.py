"""Tests for mnistbench.atomic: outputs appear whole or not at all."""

from __future__ import annotations

import csv
import json
import os

import pytest

from mnistbench import atomic


def test_write_text_json_csv(tmp_path) -> None:
    """Each writer leaves exactly the target file with the content."""
    atomic.write_text(tmp_path / "a.txt", "hé")
    atomic.write_json(tmp_path / "b.json", {"x": 1})
    atomic.write_csv(tmp_path / "c.csv", ["a", "b"], [{"a": 1, "b": None}])
    assert (tmp_path / "a.txt").read_text(encoding="utf-8") == "hé"
    assert json.loads((tmp_path / "b.json").read_text()) == {"x": 1}
    assert list(csv.reader((tmp_path / "c.csv").open())) == [["a", "b"], ["1", ""]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.json", "c.csv"]


def test_failure_keeps_the_old_file_and_no_temporary(tmp_path) -> None:
    """An error while writing leaves the previous content and no partial file."""
    target = tmp_path / "t.csv"
    target.write_text("old")
    with pytest.raises(ValueError):
        atomic.write_csv(target, ["a"], [{"a": 1}, {"zzz": 2}])
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"]


def test_files_get_the_umask_mode(tmp_path) -> None:
    """Outputs are readable like any file the user creates, not private like mkstemp's."""
    path = atomic.write_text(tmp_path / "report.html", "x")
    assert os.stat(path).st_mode & 0o777 == atomic.FILE_MODE
    assert atomic.FILE_MODE & 0o044 or os.umask(os.umask(0)) & 0o044
