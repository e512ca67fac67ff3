"""Tests of what ``mnistbench train`` reports (mnistbench.measure.entry): the result line on
stderr, the summary's path on stdout, ``--json``, ``--quiet``, the busy and disturbed
warnings, no report after a usage error, and the paragraph when torch is missing; and the
defaults in every subcommand's ``--help``."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mnistbench import cli
from mnistbench.cli import common
from mnistbench.core import cpuruntime, durations, options, schema
from mnistbench.measure import entry

#: A cell of a few steps (about a second on a CPU).
TINY = ["--max-steps", "2", "--test-limit", "64", "--warmup-steps", "0", "--batch-size", "32",
        "--sample-interval", "0.05"]


def train(tmp_path: Path, data: Path, *extra: str) -> tuple[int, Path]:
    """``mnistbench train`` of a tiny cell in-process; its exit code and summary path."""
    out = tmp_path / "cell"
    code = cli.main(["train", "--data", str(data), "--out", str(out), *TINY, *extra])
    return code, out / schema.SUMMARY_FILE


def test_train_ends_with_a_result_line_and_prints_the_summary_path(tmp_path, tiny_mnist,
                                                                   capsys):
    """Off a terminal too: the summary's path on stdout (as fetch prints its files), and on
    stderr one result line with the status, s/epoch, samples/s, accuracy and the path."""
    code, path = train(tmp_path, tiny_mnist)
    captured = capsys.readouterr()
    assert code == 0
    assert captured.out.splitlines() == [str(path)]
    summary = json.loads(path.read_text())
    lines = [line for line in captured.err.splitlines() if line.startswith("mnistbench train: ok:")]
    assert len(lines) == 1
    line = lines[0]
    results = summary["results"]
    assert f"{durations.seconds(results['epoch_s_median'])} s/epoch" in line
    assert f"{results['samples_per_s']:,.0f} samples/s" in line
    assert f"final test accuracy {results['final_test_acc']:.2f} %" in line
    assert line.endswith(f"; summary {path}")


def test_quiet_train_prints_nothing(tmp_path, tiny_mnist, capsys):
    """--quiet (what the workflow passes): no result line, no path, no warning of the
    report (the trainer's own warnings are the trainer's)."""
    code, path = train(tmp_path, tiny_mnist, "--quiet")
    captured = capsys.readouterr()
    assert code == 0 and path.is_file()
    assert captured.out == ""
    assert "mnistbench train: ok" not in captured.err and str(path) not in captured.err
    assert not [line for line in captured.err.splitlines() if line.startswith(
        "mnistbench train: warning: it was timed on a busy machine")]


@pytest.mark.parametrize("quiet", [False, True])
def test_json_prints_the_headline_as_one_object(tmp_path, tiny_mnist, capsys, quiet):
    """--json: one JSON object on stdout (instead of the path) with the status, exit code,
    the cell's settings and headline figures as the summary has them; with --quiet too."""
    code, path = train(tmp_path, tiny_mnist, "--json", *(["--quiet"] if quiet else []))
    captured = capsys.readouterr()
    assert code == 0
    lines = captured.out.splitlines()
    assert len(lines) == 1
    got = json.loads(lines[0])
    summary = json.loads(path.read_text())
    assert got["status"] == "ok" and got["exit_code"] == 0 and got["summary"] == str(path)
    assert set(got) >= {"reason", *entry.JSON_PARAMS, *entry.JSON_RESULTS}
    for key in ("epoch_s_median", "samples_per_s", "final_test_acc", "busy"):
        assert got[key] == summary["results"][key]
    for key in ("device", "precision", "loader", "batch_size", "cell"):
        assert got[key] == summary["params"][key]
    assert ("mnistbench train: ok:" in captured.err) is not quiet


def test_a_cell_that_cannot_run_reports_its_status(tmp_path, tiny_mnist, capsys):
    """An unavailable device (mps on this machine) writes its summary and exits 10; the
    result line names the status and the summary, with no figures."""
    if sys.platform == "darwin":
        pytest.skip("mps may be available here")
    code, path = train(tmp_path, tiny_mnist, "--device", "mps")
    captured = capsys.readouterr()
    assert code == schema.EXIT_CODES["unavailable"]
    assert captured.out.splitlines() == [str(path)]
    assert (f"mnistbench train: unavailable: no figures (the reason is above); summary {path}"
            in captured.err.splitlines())


def test_a_usage_error_reports_no_summary(tmp_path, tiny_mnist, capsys):
    """fp16 on a CPU exits 2 before the cell: no result line, no path, even where an earlier
    run's summary.json lies in --out."""
    out = tmp_path / "cell"
    out.mkdir()
    (out / schema.SUMMARY_FILE).write_text(json.dumps({"status": "ok", "results": {}}))
    code = cli.main(["train", "--data", str(tiny_mnist), "--out", str(out), "--precision",
                     "fp16", "--json"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert "summary" not in captured.err


def summary_with(**results) -> dict:
    return {"status": "ok", "reason": "", "params": {"epochs": 3, "device": "cpu"},
            "results": {"epoch_s_median": 1.5, "samples_per_s": 40000.0,
                        "final_test_acc": 98.5, **results}}


@pytest.mark.parametrize(("results", "expected"), [
    ({"busy": False, "disturbed_epochs": 0}, None),
    ({"busy": False}, None),  # a summary from before disturbed_epochs
    ({"busy": None}, None),  # no load was measured
    ({"busy": True, "others_load_mean": 41.6},
     "it was timed on a busy machine (other processes used 42 % of it on average)"),
    ({"busy": False, "disturbed_epochs": 2},
     "2 of 3 timed epoch(s) were disturbed (epochs.csv's disturbed column)"),
    ({"busy": True, "disturbed_epochs": 1}, "it was timed on a busy machine and 1 of 3"),
])
def test_a_busy_or_disturbed_cell_gets_one_warning_line(tmp_path, capsys, results, expected):
    path = tmp_path / schema.SUMMARY_FILE
    path.write_text(json.dumps(summary_with(**results)))
    entry.report(path)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("mnistbench train: ok: 1.50 s/epoch (median of ")
    assert err[0].endswith("40,000 samples/s, final test accuracy 98.50 %; summary "
                           f"{path}")
    warned = err[1:]
    if expected is None:
        assert warned == []
    else:
        assert len(warned) == 1 and warned[0].startswith("mnistbench train: warning: ")
        assert expected in warned[0] and "quiet machine" in warned[0]
    entry.report(path, quiet=True)
    assert capsys.readouterr() == ("", "")


def test_the_median_of_a_cell_with_disturbed_epochs_is_of_its_quiet_ones(tmp_path, capsys):
    path = tmp_path / schema.SUMMARY_FILE
    path.write_text(json.dumps(summary_with(disturbed_epochs=1)))
    entry.report(path)
    assert "1.50 s/epoch (median of the 2 quiet epochs of 3)" in capsys.readouterr().err
    path.write_text(json.dumps(summary_with(disturbed_epochs=3)))  # none quiet: all of them
    entry.report(path)
    assert "1.50 s/epoch (median of 3 epochs)" in capsys.readouterr().err


def test_a_summary_that_cannot_be_read_back_is_a_warning(tmp_path, capsys):
    path = tmp_path / schema.SUMMARY_FILE
    path.write_text("[1, 2")
    entry.report(path)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"mnistbench train: warning: cannot read back {path}")


def test_train_without_torch_names_the_pinned_requirements(tmp_path):
    """Installed without torch, `mnistbench train` prints one paragraph naming
    envs/pip/torch.txt and exits 1: no traceback, nothing written."""
    out = tmp_path / "cell"
    code = ("import sys; sys.modules['torch'] = None; from mnistbench import console; "
            f"sys.exit(console.main(['train', '--out', {str(out)!r}]))")
    env = {**os.environ, cpuruntime.REEXEC_VAR: "1"}  # no allocator re-exec: keep the block
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mnistbench train: error: torch cannot be "
                                                   "imported")
    assert "pip install -r envs/pip/torch.txt" in lines[0]
    assert proc.stdout == ""
    assert not out.exists()


def test_another_missing_module_is_not_called_torch(monkeypatch):
    """Only torch (or torchvision) missing gets the torch paragraph; anything else is a bug
    and keeps its traceback."""
    import importlib

    def missing(name):
        raise ModuleNotFoundError("No module named 'psutil'", name="psutil")

    monkeypatch.setattr(importlib, "import_module", missing)
    with pytest.raises(ModuleNotFoundError):
        common.import_measure("entry")


# --------------------------------------------------------------------------- --help defaults

def parsers(parser: argparse.ArgumentParser, name: str = "mnistbench"):
    """(name, parser) of ``parser`` and every subcommand under it."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from parsers(sub, f"{name} {sub_name}")


def shows_no_default(action: argparse.Action) -> bool:
    default = action.default
    return (default is argparse.SUPPRESS or default is None or default in ("", [], ())
            or (default is False and not isinstance(action, argparse.BooleanOptionalAction)))


def all_parsers():
    return [*parsers(cli.build_parser()), ("train parser", options.train_parser())]


def shown_defaults(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The options of ``parser`` (and optional positionals) that have a default to show."""
    return [action for action in parser._actions
            if not (shows_no_default(action) or isinstance(action, argparse._SubParsersAction))
            and (action.option_strings or action.nargs == "?")]


def default_text(action: argparse.Action) -> str:
    """How --help must write ``action``'s default: the flag in effect for an on/off flag,
    else its value."""
    if isinstance(action, argparse.BooleanOptionalAction):
        return action.option_strings[0] if action.default else action.option_strings[-1]
    return str(action.default)


def test_every_parser_formats_its_defaults():
    for name, parser in all_parsers():
        assert parser.formatter_class is options.DefaultsHelpFormatter, name


WITH_DEFAULTS = [(n, p) for n, p in all_parsers() if shown_defaults(p)]


@pytest.mark.parametrize(("name", "parser"), WITH_DEFAULTS, ids=[n for n, _ in WITH_DEFAULTS])
def test_every_help_shows_every_default(name, parser):
    """Every option that has a default says it in --help: "default: VALUE" (the flag in effect
    for an on/off flag), or "VALUE (default...)" where words explain it. Parsers with no
    default to show are left out."""
    formatter = parser._get_formatter()
    for action in shown_defaults(parser):
        assert action.help, f"{name} {action.dest} has no help"
        text = " ".join(formatter._expand_help(action).split())
        assert "default" in text, f"{name} {action.dest}: {text}"
        value = default_text(action)
        assert f"default: {value}" in text or f"{value} (default" in text, (
            f"{name} {action.dest} (default {value}): {text}")


def test_help_text_shows_the_defaults(capsys):
    for argv, expected in ((["train", "--help"], ["(default: 128)", "(default: resident)",
                                                  "(default: --no-pin-memory)",
                                                  "(default: --cudnn-benchmark)"]),
                           (["fetch", "--help"], ["(default: 2)", "(default: 30.0)"]),
                           (["report", "--help"], ["(default: results/report/index.html)"])):
        with pytest.raises(SystemExit) as info:
            cli.main(argv)
        assert info.value.code == 0
        out = " ".join(capsys.readouterr().out.split())
        for text in expected:
            assert text in out, (argv, text)
        assert "(default: None)" not in out and "(default: False)" not in out
