"""Tests of mnistbench.core.options, the options of `mnistbench train`: the width cap."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mnistbench.core import options, study

REPO = Path(__file__).resolve().parents[2]


def test_train_width_past_the_cap_is_a_usage_error(capsys):
    """Weak case: `train --width 1000` passed although the config caps the width at 16; now
    exit 2 naming the flag, the cap and the fix."""
    parser = options.train_parser()
    assert parser.parse_args(["--out", "x", "--width", "16"]).width == 16
    for value in ("1000", "17", "0"):
        with pytest.raises(SystemExit) as info:
            parser.parse_args(["--out", "x", "--width", value])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert "--width" in err and "Traceback" not in err
    with pytest.raises(SystemExit):
        parser.parse_args(["--out", "x", "--width", "1000"])
    assert "wider than 16, the widest network the study trains" in capsys.readouterr().err


def test_train_names_and_tip_that_no_result_may_hold_are_usage_errors(capsys):
    """Weak case of the sweep of issue 41 (the MNISTBENCH_ENV class, on train's flags):
    `train --env ../x`, `--experiment 'a b'`, `--cell ../c` or `--tip '<b>'` ran the cell
    and recorded the name, which the aggregate then refused (or filed failed). Now exit 2
    naming the flag, the value and a name to pass; every cell of the default study still
    parses."""
    parser = options.train_parser()
    for flag, value, words in (("--env", "../x", "pass 'x'"),
                               ("--env", "日本語", "pass a name such as 'lab-gpu'"),
                               ("--env", "", "pass a name such as 'lab-gpu'"),
                               ("--experiment", "a b", "pass 'a-b'"),
                               ("--cell", "../c", "pass 'c'"),
                               ("--tip", "<b>", "is not a tip of the study; pass one of")):
        with pytest.raises(SystemExit) as info:
            parser.parse_args(["--out", "x", flag, value])
        err = capsys.readouterr().err
        assert info.value.code == 2 and f"argument {flag}: {value!r}" in err, err
        assert words in err and "Traceback" not in err
    args = parser.parse_args(["--out", "x", "--env", "lab-gpu", "--tip", "workers=4"])
    assert (args.env, args.tip) == ("lab-gpu", "workers=4")
    for tip in study.TIP_NAMES:
        assert parser.parse_args(["--out", "x", "--tip", tip]).tip == tip


def test_the_width_cap_is_the_configs():
    """options.MAX_WIDTH and the config schema's $defs.width maximum are one number."""
    spec = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    assert spec["$defs"]["width"]["maximum"] == options.MAX_WIDTH


def test_compile_modes_are_the_train_flags_choices():
    parser = options.train_parser()
    assert parser.parse_args(["--out", "x", "--compile", "max-autotune"]).compile == \
        "max-autotune"
    with pytest.raises(SystemExit):
        parser.parse_args(["--out", "x", "--compile", "fastest"])
    assert options.COMPILE_MODES == ("default", "reduce-overhead", "max-autotune")
