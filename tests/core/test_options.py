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


def test_threads_workers_and_times_past_the_configs_caps_are_usage_errors(capsys):
    """Weak cases of the sweep of issue 41 (the `--width 1000` class: the config caps it,
    the flag did not): `train --threads 100000` crashed the process (SIGSEGV in torch),
    `--workers 100000` hung it starting workers, `--time-limit 1e308` and
    `--sample-interval 1e308` overflowed the clock (OverflowError tracebacks), and
    `--sample-interval 1e-300` busy-looped the sampler beside the timed work,
    `--warmup-steps 99999999999999999999` was an OverflowError traceback. Each is now
    exit 2 naming the flag and its range; `peak --threads` and `run-peak --threads` too."""
    from mnistbench import cli

    parser = options.train_parser()
    for flag, value, words in (
            ("--threads", "100000", "100000 is more than 1024, the most a cell of the study "
             "takes (config key threads caps it too): pass 0 to 1024"),
            ("--workers", "65", "65 is more than 64"),
            ("--time-limit", "1e308", "must be a finite number from 0 to 604800 s"),
            ("--time-limit", "nan", "got nan"),
            ("--sample-interval", "1e308", "must be a finite number from 0.01 to 3600 s"),
            ("--sample-interval", "1e-300", "got 1e-300"),
            ("--epochs", "1001", "1001 is more than 1000"),
            ("--warmup-steps", "99999999999999999999", "is more than 10000"),
            ("--max-steps", "1000001", "is more than 1000000")):
        with pytest.raises(SystemExit) as info:
            parser.parse_args(["--out", "x", flag, value])
        err = capsys.readouterr().err
        assert info.value.code == 2 and f"argument {flag}: " in err and words in err, err
    args = parser.parse_args(["--out", "x", "--threads", "1024", "--workers", "64",
                              "--time-limit", "604800", "--sample-interval", "0.05"])
    assert (args.threads, args.workers, args.time_limit) == (1024, 64, 604800.0)
    for argv in (["peak", "--out", "x", "--threads", "2000"],
                 ["run-peak", "--log", "l", "--device", "cpu", "--out", "x", "--threads",
                  "2000"]):
        with pytest.raises(SystemExit) as info:
            cli.main(argv)
        assert info.value.code == 2 and "2000 is more than 1024" in capsys.readouterr().err


def test_the_caps_of_threads_workers_and_time_limit_are_the_configs():
    """options.MAX_THREADS, MAX_WORKERS, MAX_TIME_LIMIT_S, MAX_EPOCHS, MAX_WARMUP_STEPS and
    MAX_STEPS are the config schema's maxima of threads, workers and $defs.time_limit,
    epochs, warmup_steps and max_steps: one number each."""
    spec = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    caps = {key: spec["properties"][key]["maximum"] for key in ("threads", "workers")}
    caps |= {key: spec["$defs"][key]["maximum"]  # each experiment's
             for key in ("time_limit", "epochs", "warmup_steps", "max_steps")}
    assert caps == {"threads": options.MAX_THREADS, "workers": options.MAX_WORKERS,
                    "time_limit": options.MAX_TIME_LIMIT_S, "epochs": options.MAX_EPOCHS,
                    "warmup_steps": options.MAX_WARMUP_STEPS, "max_steps": options.MAX_STEPS}


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
