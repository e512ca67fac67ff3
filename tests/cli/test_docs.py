"""docs/cli.md names every subcommand of the parser, and its exit codes section the signals."""

from __future__ import annotations

from pathlib import Path

from mnistbench import cli, completion

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_docs_cli_names_every_subcommand():
    text = DOC.read_text(encoding="utf-8")
    for name in completion.nodes(cli.build_parser())[""].subcommands:
        if name == "import":  # the alias of unpack, named beside it
            assert "(alias `import`)" in text
            continue
        assert f"`mnistbench {name}" in text, f"docs/cli.md does not name `mnistbench {name}`"


def test_docs_cli_gives_the_exit_codes_of_a_signal():
    text = DOC.read_text(encoding="utf-8")
    exits = text[text.index("## Exit codes"):]
    for code in ("130", "143", "129", "10 unavailable"):
        assert code in exits
