"""The command's modules (mnistbench.cli): every subcommand module is listed in COMMANDS and
runs the commands it registers, and the subcommands that write files, and only those, turn
SIGTERM and SIGHUP into their clean-up."""

from __future__ import annotations

import argparse
from pathlib import Path

from mnistbench import cli

#: The subcommands whose interruption runs an error's clean-up (the package docstring's list).
CLEANS_UP = {"fetch", "aggregate", "report", "pack", "unpack", "import", "publish", "peak",
             "cost-model"}


def subcommands(parser: argparse.ArgumentParser,
                name: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every leaf subcommand under ``parser`` (``docker run`` too) by its name."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                found.update(subcommands(sub, f"{name} {sub_name}".strip()))
    return found or {name: parser}


def test_every_subcommand_module_is_registered():
    """A module of cli/ but the shared one is in COMMANDS (a module left out adds no
    subcommand), once."""
    folder = Path(cli.__file__).parent
    modules = {p.stem for p in folder.glob("*.py") if not p.stem.startswith("_")} - {"common"}
    listed = [m.__name__.rpartition(".")[2] for m in cli.COMMANDS]
    assert sorted(listed) == sorted(modules)
    assert len(set(listed)) == len(listed)


def test_each_module_runs_the_subcommands_it_registers():
    """The command of each subcommand is a function of the module that registered it, and
    each module registers at least one."""
    for module in cli.COMMANDS:
        parser = argparse.ArgumentParser()
        module.register(parser.add_subparsers())
        found = subcommands(parser)
        assert found, module.__name__
        for name, sub in found.items():
            func = sub.get_default("func")
            assert func.__module__ == module.__name__, (name, func)


def test_only_the_subcommands_that_write_files_clean_up_on_a_signal():
    whole = cli.build_parser()
    leaves = subcommands(whole)
    assert set(leaves) >= CLEANS_UP | {"train", "env", "docker run", "estimate", "completion"}
    cleaning = {name for name, sub in leaves.items() if sub.get_default("cleans_up")}
    assert cleaning == CLEANS_UP
    assert whole.get_default("cleans_up") is False


def run_into_dev_full(argv: list[str], cwd: Path, *, unbuffered: bool):
    """``python -m mnistbench.cli ARGV > /dev/full``, with Python's stdout unbuffered (a write
    fails at once) or buffered (the write fails at the flush, where Python's own flush at
    exit printed "Exception ignored" and exited 120)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    with open("/dev/full", "w") as full:
        return subprocess.run([sys.executable, "-m", "mnistbench.cli", *argv], stdout=full,
                              stderr=subprocess.PIPE, text=True, cwd=cwd, env=env,
                              timeout=120, check=False)


def test_every_print_to_a_full_disk_is_one_line_not_a_traceback(tmp_path):
    """Weak case of issue 41 (/dev/full as output): `env-name`, `env`, `aggregate` (which
    prints the tables' paths), `--help`, `--version` and a subcommand's `--help` into
    /dev/full ended in an OSError traceback from print, or in "Exception ignored" and exit
    120, or (argparse swallows the error) exit 0 with nothing written. Now each is exit 1
    with one line naming stdout, the system's reason and the fix."""
    import pytest

    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    from tests.fakes import make_study

    make_study(tmp_path / "runs", gpu=False, devices=("cpu",), precisions=("fp32",),
               batch_sizes=(64,), repeats=1, convergence_epochs=1)
    cases = [["env-name"], ["env"], ["aggregate", "runs", "--out-dir", "results"],
             ["--help"], ["--version"], ["table", "--help"]]
    for argv in cases:
        for unbuffered in (True, False):
            proc = run_into_dev_full(argv, tmp_path, unbuffered=unbuffered)
            what = f"{argv} unbuffered={unbuffered}: {proc.stderr}"
            assert proc.returncode == 1, what
            assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
            assert len(proc.stderr.strip().splitlines()) == 1, what
            assert "cannot write the output to stdout: No space left on device" in proc.stderr
            assert "redirect it to a file on a disk with room" in proc.stderr
    # the aggregate's tables were written before its paths could not be printed
    assert (tmp_path / "results" / "summary.csv").is_file()


def test_stdout_still_works_as_a_stream_for_a_command(capsys, tmp_path):
    """The guard around stdout passes writes through: a command's output arrives whole, and
    sys.stdout is the stream it was after the command."""
    import sys

    before = sys.stdout
    assert cli.main(["env-name"]) == 0
    assert capsys.readouterr().out.strip()
    assert sys.stdout is before


def test_an_empty_path_is_a_usage_error_never_the_current_folder(tmp_path, capsys,
                                                                  monkeypatch):
    """Weak case of the sweep of issue 41: an empty path (`--dest ""`, an unset shell
    variable) was read as the current folder without a word: `fetch --dest ""` wrote MNIST
    into it, `aggregate ""` aggregated it, `lock-file ""` told the user to remove `.`. Every
    path option and argument of every subcommand now refuses it: exit 2 naming the
    option, before anything is read or written."""
    import pytest

    monkeypatch.chdir(tmp_path)
    cases = [["fetch", "--dest", ""], ["aggregate", ""], ["lock-file", " "],
             ["report", "--out", ""], ["pack", "--out", "", "alpha"], ["unpack", ""],
             ["table", "--results", ""], ["publish", "--check", "--report", ""],
             ["env", "--collect-env", ""], ["estimate", "--plan", ""],
             ["cost-model", "--config-json", "{}", "--out", ""],
             ["peak", "--out", "", "--record-failure", "x"],
             ["train", "--out", ""], ["train", "--out", "cell", "--data", ""]]
    for argv in cases:
        with pytest.raises(SystemExit) as info:
            cli.main(argv)
        err = capsys.readouterr().err
        assert info.value.code == 2, argv
        assert "is empty" in err and "give a path (. for the current folder)" in err, err
    assert list(tmp_path.iterdir()) == []
    # every option that takes a path completes file names, and takes this type
    for name, parser in subcommands(cli.build_parser()).items():
        for action in parser._actions:
            assert action.type is not Path, f"{name} {action.option_strings}: type=Path"
