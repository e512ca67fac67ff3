"""scripts/commit-subjects (run by scripts/lint): the commits not yet on main have subjects of at
most 72 characters; main is origin/main, else main, and a clone with neither, or one where HEAD
is main, passes with nothing to check."""

from __future__ import annotations

import runpy
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "commit-subjects"
check = runpy.run_path(str(SCRIPT))
OK = "x" * check["MAX_SUBJECT"]
LONG = "x" * (check["MAX_SUBJECT"] + 1)


@pytest.fixture(autouse=True)
def identity(monkeypatch):
    for who in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{who}_NAME", "test")
        monkeypatch.setenv(f"GIT_{who}_EMAIL", "test@example.invalid")
    monkeypatch.delenv("MNISTBENCH_LINT_BASE", raising=False)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          check=True).stdout.strip()


def repo(path: Path, branch: str, *subjects: str) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", branch)
    commit(path, *subjects)
    return path


def commit(path: Path, *subjects: str) -> None:
    for subject in subjects:
        git(path, "commit", "-q", "--allow-empty", "-m", subject, "-m", "the detail")


def test_a_branch_with_a_long_subject_fails_naming_it(tmp_path, capsys):
    work = repo(tmp_path / "w", "main", LONG)  # on main already: not checked
    git(work, "checkout", "-q", "-b", "issue")
    commit(work, OK)
    assert check["main"]([], cwd=work) == 0
    commit(work, LONG)
    assert check["main"]([], cwd=work) == 1
    err = capsys.readouterr().err
    assert f"{git(work, 'rev-parse', '--short', 'HEAD')} has a subject of 73 characters" in err
    assert "2 commit(s) not on main, 1 too long" in err


def test_head_on_main_has_nothing_new(tmp_path, capsys):
    work = repo(tmp_path / "w", "main", LONG, LONG)
    assert check["main"]([], cwd=work) == 0
    assert "0 commit(s) not on main" in capsys.readouterr().err


def test_a_clone_without_main_passes_and_says_so(tmp_path, capsys):
    work = repo(tmp_path / "w", "issue", LONG)
    assert check["main"]([], cwd=work) == 0
    assert "nothing checked" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    assert check["main"]([], cwd=empty) == 0


def test_origin_main_comes_first(tmp_path, capsys):
    """In a clone, main's own commits not yet pushed are checked against origin/main (and a
    named base wins over both)."""
    origin = repo(tmp_path / "origin", "main", LONG)
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    assert check["main"]([], cwd=clone) == 0
    commit(clone, LONG)
    assert check["main"]([], cwd=clone) == 1
    assert "1 commit(s) not on origin/main" in capsys.readouterr().err
    assert check["main"](["--base", "main"], cwd=clone) == 0


def test_the_base_can_be_named_in_the_environment(tmp_path, monkeypatch):
    work = repo(tmp_path / "w", "main", OK)
    git(work, "branch", "old")
    commit(work, LONG)
    assert check["main"]([], cwd=work) == 0  # main: HEAD
    monkeypatch.setenv("MNISTBENCH_LINT_BASE", "old")
    assert check["main"]([], cwd=work) == 1
