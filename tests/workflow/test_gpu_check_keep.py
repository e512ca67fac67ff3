"""`scripts/gpu-check --prepare` checks KEEP_ARCHIVE before it changes anything (issue 41): a
bad one deleted .gpu/runs before it failed, and KEEP_ARCHIVE=-h printed unpack's help and
exited 0. The script runs from a copy in a folder of its own, so this checkout's .gpu is never
touched."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("value", "code", "words"), [
    ("-h", 2, "starts with '-', which mnistbench unpack would read as a flag"),
    ("--runs", 2, "starts with '-'"),
    ("archives/none.mnistbench.tar.gz", 2, "is not a file"),
    ("archives", 2, "is not a file"),
])
def test_a_bad_keep_archive_is_refused_before_anything_is_changed(tmp_path, value, code,
                                                                  words):
    """Exit 2 with one paragraph naming KEEP_ARCHIVE and the fix; .gpu/runs (an earlier
    lease's cells) and .gpu/plan.json are as they were."""
    shutil.copytree(REPO / "scripts", tmp_path / "scripts")
    (tmp_path / "archives").mkdir()
    kept = tmp_path / ".gpu" / "runs" / "lent" / "convergence" / "cell" / "summary.json"
    kept.parent.mkdir(parents=True)
    kept.write_text("{}")
    (tmp_path / ".gpu" / "plan.json").write_text("{}")
    proc = subprocess.run([str(tmp_path / "scripts" / "gpu-check"), "--prepare"],
                          env={**os.environ, "KEEP_ARCHIVE": value}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == code, proc.stderr
    assert f"KEEP_ARCHIVE={value}" in proc.stderr and words in proc.stderr
    assert "nothing was changed" in proc.stderr
    assert kept.read_text() == "{}" and (tmp_path / ".gpu" / "plan.json").read_text() == "{}"
    assert not (tmp_path / ".gpu" / "mnist").exists()


@pytest.mark.parametrize("content", [b"", b"\x1f\x8b\x08\x00truncated", b"plain text"])
def test_a_keep_archive_that_does_not_unpack_is_refused_before_gpu_is_touched(tmp_path,
                                                                              content):
    """An empty, truncated or foreign KEEP_ARCHIVE was refused only after .gpu/mnist,
    .gpu/plan.json and .gpu/lib had been rewritten (and it needed the MNIST mirror there to
    get that far); now `mnistbench unpack --check` reads it first: exit 1 naming
    KEEP_ARCHIVE, unpack's reason above, "nothing was changed", and .gpu as it was."""
    shutil.copytree(REPO / "scripts", tmp_path / "scripts")
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    archive = tmp_path / "archives" / "lent.mnistbench.tar.gz"
    archive.parent.mkdir()
    archive.write_bytes(content)
    kept = tmp_path / ".gpu" / "runs" / "lent" / "convergence" / "cell" / "summary.json"
    kept.parent.mkdir(parents=True)
    kept.write_text("{}")
    (tmp_path / ".gpu" / "plan.json").write_text("{}")
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / ".gpu").rglob("*"))
    proc = subprocess.run([str(tmp_path / "scripts" / "gpu-check"), "--prepare"],
                          env={**os.environ, "KEEP_ARCHIVE": str(archive)}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr
    assert "mnistbench unpack: error:" in proc.stderr and "Traceback" not in proc.stderr
    assert f"KEEP_ARCHIVE={archive} was refused (above)" in proc.stderr
    assert "nothing was changed" in proc.stderr
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / ".gpu").rglob("*")) == before
    assert kept.read_text() == "{}" and (tmp_path / ".gpu" / "plan.json").read_text() == "{}"
