"""Tests of ``mnistbench completion bash|zsh`` (mnistbench.completion): the script is made
from the parser, and bash completes subcommands, flags, choices and paths with it."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from mnistbench import cli, completion

BASH = shutil.which("bash")

#: Completes each line of stdin as readline would (the words split on blanks, `--flag=value`
#: split at `=`, as bash's COMP_WORDBREAKS does) and prints the candidates, one line each.
HARNESS = r"""
complete_line() {
    local line="$1" w
    COMP_WORDS=()
    read -ra parts <<< "$line"
    for w in "${parts[@]}"; do
        if [[ "$w" == --*=* ]]; then COMP_WORDS+=("${w%%=*}" "=" "${w#*=}");
        else COMP_WORDS+=("$w"); fi
    done
    [[ "$line" == *" " || "$line" == *"=" ]] && COMP_WORDS+=("")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    COMPREPLY=()
    _mnistbench
    echo "${COMPREPLY[*]}"
}
while IFS= read -r line; do complete_line "$line"; done
"""


def script(shell: str, capsys) -> str:
    assert cli.main(["completion", shell]) == 0
    return capsys.readouterr().out


@pytest.fixture
def complete(tmp_path, capsys):
    """complete(line) -> the candidates bash's completion offers after ``line``."""
    if BASH is None:
        pytest.skip("no bash here")
    source = tmp_path / "mnistbench.bash"
    source.write_text(script("bash", capsys))
    (tmp_path / "cell-a").mkdir()
    (tmp_path / "archive.tar.gz").write_text("")

    def run(*lines: str) -> list[list[str]]:
        proc = subprocess.run([BASH, "--norc", "-c", f"source {source}\n{HARNESS}"],
                              input="\n".join(lines) + "\n", capture_output=True, text=True,
                              cwd=tmp_path, timeout=60, check=True)
        assert proc.stderr == ""
        return [line.split() for line in proc.stdout.splitlines()]

    return run


def test_bash_completes_subcommands_flags_choices_and_paths(complete):
    got = complete(
        "mnistbench ",
        "mnistbench t",
        "mnistbench train --dev",
        "mnistbench train --device ",
        "mnistbench train --device c",
        "mnistbench train --precision=b",
        "mnistbench train --compile --prec",  # --compile takes a value or none
        "mnistbench train --env train --ex",  # a value is never taken for a subcommand
        "mnistbench docker ",
        "mnistbench docker build --",
        "mnistbench table --format ",
        "mnistbench completion ",
        "mnistbench train --out ce",
        "mnistbench unpack ar",
        "mnistbench docker run --record r -- train --load",
        "mnistbench train --lr ",  # a free value: nothing to offer
    )
    parser = cli.build_parser()
    top = completion.nodes(parser)[""].subcommands
    assert got[0] == top and {"train", "table", "completion", "docker"} <= set(top)
    assert got[1] == ["train", "table"]
    assert got[2] == ["--device"]
    assert got[3] == ["cpu", "cuda", "xpu", "mps"]
    assert got[4] == ["cpu", "cuda"]
    assert got[5] == ["bf16"]
    assert got[6] == ["--precision"]
    assert got[7] == ["--experiment"]
    assert got[8] == ["check", "build", "run"]
    assert set(got[9]) == {"--help", "--dockerfile", "--tag", "--context", "--build-arg",
                           "--docker-option", "--record"}
    assert got[10] == ["markdown", "csv"]
    assert got[11] == ["bash", "zsh"]
    assert got[12] == ["cell-a"]
    assert got[13] == ["archive.tar.gz"]
    assert got[14] == ["--loader"]
    assert got[15] == []


def test_the_script_knows_every_command_and_flag_of_the_parser(capsys):
    text = script("bash", capsys)
    tree = completion.nodes(cli.build_parser())
    assert {"", "train", "docker run", "table", "completion"} <= set(tree)
    for path, node in tree.items():
        for flag in node.flags:
            assert f" {flag} " in text.replace("'", " ") or f" {flag} ;;" in text, (path, flag)
    assert "complete -F _mnistbench mnistbench" in text
    assert tree["train"].values["--device"] == "choices:cpu cuda xpu mps"
    assert tree["train"].values["--out"] == "file"
    assert "--quiet" not in tree["train"].values  # takes no value
    assert tree["docker run"].remainder and tree["completion"].positional == "choices:bash zsh"


def test_bash_script_is_valid_bash(capsys):
    if BASH is None:
        pytest.skip("no bash here")
    proc = subprocess.run([BASH, "-n"], input=script("bash", capsys), capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr


def test_zsh_script_uses_the_bash_one_under_bashcompinit(capsys):
    text = script("zsh", capsys)
    assert text.startswith("#compdef mnistbench\n")
    assert "autoload -U +X bashcompinit && bashcompinit" in text
    assert script("bash", capsys) in text
    zsh = shutil.which("zsh")
    if zsh:
        proc = subprocess.run([zsh, "-n"], input=text, capture_output=True, text=True,
                              timeout=60, check=False)
        assert proc.returncode == 0, proc.stderr


def test_an_unknown_shell_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["completion", "fish"])
    assert info.value.code == 2
    assert "invalid choice: 'fish'" in capsys.readouterr().err


def test_bash_completes_a_file_name_with_spaces_as_one_candidate(tmp_path, capsys):
    """Weak case: a file name with spaces was split into words; it is one candidate now."""
    if BASH is None:
        pytest.skip("no bash here")
    source = tmp_path / "mnistbench.bash"
    source.write_text(script("bash", capsys))
    (tmp_path / "my archive 1.tar.gz").write_text("")
    (tmp_path / "my archive 2.tar.gz").write_text("")
    drive = (f"source {source}\nCOMP_WORDS=(mnistbench unpack my); COMP_CWORD=2\n"
             "_mnistbench\nprintf '%s\\n' \"${#COMPREPLY[@]}\" \"${COMPREPLY[@]}\"\n")
    proc = subprocess.run([BASH, "--norc", "-c", drive], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60, check=True)
    count, *names = proc.stdout.splitlines()
    assert count == "2" and sorted(names) == ["my archive 1.tar.gz", "my archive 2.tar.gz"]


@pytest.mark.parametrize("argv", [["completion", "bash"], ["table", "--results", "."]])
def test_writing_to_dev_full_is_one_line_not_a_traceback(tmp_path, argv):
    """Weak case: `mnistbench completion bash > /dev/full` and `mnistbench table > /dev/full`
    ended in a traceback; now exit 1 with one line naming the fix."""
    import sys
    from pathlib import Path

    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    if argv[0] == "table":
        from mnistbench.results import aggregate
        from tests.fakes import make_study

        make_study(tmp_path / "runs", gpu=False, devices=("cpu",), precisions=("fp32",),
                   batch_sizes=(64,), repeats=1, convergence_epochs=1)
        aggregate.aggregate(tmp_path / "runs", tmp_path)
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "mnistbench.cli", *argv], stdout=full,
                              stderr=subprocess.PIPE, text=True, cwd=tmp_path, timeout=120,
                              check=False)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert "cannot write" in proc.stderr and "No space left on device" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
