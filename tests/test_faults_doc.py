"""docs/faults.md, the table of bad inputs and faults the suite tries, stays true: every test it
names exists in the named file and asserts something, and it lists at least 230 cases (42
after the adversarial pass of issue 16, 150 after the reliability pass of issue 22, 230 after
issue 41's)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "faults.md"
ROW = re.compile(r"^\| (?P<case>[^|]+) \| (?P<test>tests/[\w/]+\.py::\w+) "
                 r"\| (?P<outcome>[^|]+) \|$")


def rows() -> list[dict[str, str]]:
    """The table rows of docs/faults.md (every line that starts a row but the headers)."""
    found = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if not line.startswith("| ") or line.startswith(("| bad input", "|---")):
            continue
        match = ROW.match(line)
        assert match, f"docs/faults.md: not a row of three cells naming a test: {line!r}"
        found.append(match.groupdict())
    return found


def functions_of(path: Path) -> dict[str, ast.FunctionDef]:
    """The module-level test functions of a test file, by name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name: node for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def asserts_something(function: ast.FunctionDef) -> bool:
    """Whether a test function holds an assert, a pytest.raises/fail or a call of a helper
    that asserts (any name starting with assert_)."""
    for node in ast.walk(function):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            if name in ("pytest.raises", "pytest.fail") or name.split(".")[-1].startswith(
                    "assert_"):
                return True
    return False


def test_the_table_lists_at_least_230_cases():
    """At least the 230 bad inputs and faults of the adversarial (issue 16) and reliability
    (issues 22 and 41) passes are in the table."""
    assert len(rows()) >= 230


def problems_of(table: list[dict[str, str]], root: Path = REPO) -> list[str]:
    """What is wrong with each row of ``table``: a named test that is not a test function of
    the named file, one that asserts nothing, an empty case or outcome."""
    problems, parsed = [], {}
    for row in table:
        path, name = row["test"].split("::")
        if path not in parsed:
            parsed[path] = functions_of(root / path) if (root / path).is_file() else {}
        if name not in parsed[path]:
            problems.append(f"docs/faults.md names {row['test']}, which does not exist")
        elif not asserts_something(parsed[path][name]):
            problems.append(f"{row['test']} asserts nothing")
        if not (row["outcome"].strip() and row["case"].strip()):
            problems.append(f"{row['test']}: its row has no case or no outcome")
    return problems


def test_every_named_test_exists_and_asserts():
    """Each row's test is a test function of the named file that can fail (one test for the
    whole table: the suite counts behaviours, not rows)."""
    assert problems_of(rows()) == []


def test_a_row_naming_a_missing_test_is_caught(tmp_path):
    """The checks above fail for a test that is not there, one that asserts nothing, a file
    that is not there and an empty outcome (so they can fail)."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "def test_real():\n    assert True\n\n\ndef test_nothing():\n    pass\n")
    table = [{"case": "a", "test": f"tests/{name}", "outcome": outcome}
             for name, outcome in [("test_x.py::test_real", "refused"),
                                   ("test_x.py::test_gone", "refused"),
                                   ("test_x.py::test_nothing", "refused"),
                                   ("test_y.py::test_real", "refused"),
                                   ("test_x.py::test_real", " ")]]
    assert problems_of(table, tmp_path) == [
        "docs/faults.md names tests/test_x.py::test_gone, which does not exist",
        "tests/test_x.py::test_nothing asserts nothing",
        "docs/faults.md names tests/test_y.py::test_real, which does not exist",
        "tests/test_x.py::test_real: its row has no case or no outcome"]
    empty = ast.parse("def test_nothing():\n    pass\n").body[0]
    assert not asserts_something(empty)
