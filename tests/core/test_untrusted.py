"""Tests of mnistbench.core.untrusted: the one safe way to open a file under a root, the
bounds of every parser of a file from elsewhere, and inert text for Markdown and CSV."""

from __future__ import annotations

import json
import os
import time

import pytest
import yaml

from mnistbench.core import untrusted

SECRET = "root:SECRET-HASH:19000:0:99999:7:::\n"


@pytest.fixture
def root(tmp_path):
    (tmp_path / "root" / "data").mkdir(parents=True)
    (tmp_path / "root" / "data" / "table.csv").write_text("a,b\n1,2\n")
    (tmp_path / "secret").write_text(SECRET)
    return tmp_path / "root"


def test_a_file_under_the_root_is_read(root):
    assert untrusted.read_text_under(root, "data/table.csv", max_bytes=100) == "a,b\n1,2\n"


@pytest.mark.parametrize(("make", "name", "words"), [
    (lambda r: (r / "link").symlink_to(r.parent / "secret"), "link", "a symbolic link"),
    (lambda r: (r / "dir").symlink_to(r / "data"), "dir/table.csv", "a symbolic link"),
    (lambda r: os.mkfifo(r / "fifo"), "fifo", "not a regular file but a FIFO"),
    (lambda r: None, "data", "not a regular file but a folder"),
    (lambda r: None, "data/table.csv/x", "not a folder but"),
    (lambda r: None, "missing.csv", "missing"),
    (lambda r: None, "../secret", "climbs out with '..'"),
    (lambda r: None, "/etc/shadow", "not a relative path"),
])
def test_what_is_not_a_regular_file_under_the_root_is_named_never_read(root, make, name,
                                                                        words):
    """A symbolic link (at the end or on the way, even one that stays inside), a FIFO (never
    opened: that would hang), a folder, a path out of the root: UnsafeFile naming the path,
    never the content."""
    make(root)
    started = time.monotonic()
    with pytest.raises(untrusted.UnsafeFile) as info:
        untrusted.read_bytes_under(root, name, max_bytes=1000)
    assert time.monotonic() - started < 5
    assert words in str(info.value) and "SECRET" not in str(info.value)
    assert str(info.value).startswith(name if name.startswith("/") else str(root))


def test_a_file_past_its_size_cap_is_refused(root):
    with pytest.raises(untrusted.UnsafeFile, match="more than the 4 "):
        untrusted.read_bytes_under(root, "data/table.csv", max_bytes=4)
    (root / "bin").write_bytes(b"\xff\xfe")
    with pytest.raises(untrusted.UnsafeFile, match="not UTF-8 text"):
        untrusted.read_text_under(root, "bin", max_bytes=4)


def test_json_nested_past_the_bound_is_refused_before_parsing():
    """10,000 nested arrays (json.loads: RecursionError) are refused by depth; brackets in
    strings do not count."""
    with pytest.raises(untrusted.TooComplex, match="nested deeper than 64 levels"):
        untrusted.check_json_depth("[" * 10_000 + "]" * 10_000)
    untrusted.check_json_depth(json.dumps({"a": "[[[[" * 100, "b": [[1]]}))


BILLION_LAUGHS = "\n".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]"
       for a, b in zip("abcdefgh", "bcdefghi", strict=True)]) + "\n"


def test_a_billion_laughs_is_refused_in_microseconds():
    """9^9 values through aliases: refused by counting each shared object once."""
    data = yaml.safe_load(BILLION_LAUGHS)
    started = time.monotonic()
    with pytest.raises(untrusted.TooComplex, match="expands to more than 200000 values"):
        untrusted.check_tree(data, what="laughs.yaml")
    assert time.monotonic() - started < 0.5


def test_a_document_holding_itself_or_nesting_too_deep_is_refused():
    with pytest.raises(untrusted.TooComplex, match="holds itself"):
        untrusted.check_tree(yaml.safe_load("a: &a [*a]\n"))
    deep: list = []
    node = deep
    for _ in range(100):
        node.append([])
        node = node[0]
    with pytest.raises(untrusted.TooComplex, match="nests deeper than 64"):
        untrusted.check_tree(deep)
    untrusted.check_tree({"shared": [[1, 2]] * 100})  # shared but small: fine


def test_markdown_code_spans_hold_anything():
    assert untrusted.markdown_code("<img src=x onerror=alert(1)>") == \
        "`<img src=x onerror=alert(1)>`"
    assert untrusted.markdown_code("a``b") == "```a``b```"
    assert untrusted.markdown_cell("a|b\nc") == "`a\\|b c`"


def test_csv_safe_neutralises_formulas_but_not_numbers():
    for text in ("=1+1", "+cmd", "-2+3", "@SUM(A1)", "\tx", "\rx", "=HYPERLINK(\"x\")"):
        assert untrusted.csv_safe(text) == "'" + text
    for text in ("-1", "-1.5e-3", "+2", "0", "plain", ""):
        assert untrusted.csv_safe(text) == text
