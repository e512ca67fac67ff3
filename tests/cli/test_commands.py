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
