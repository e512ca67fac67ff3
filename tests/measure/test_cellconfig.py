"""Tests for mnistbench.measure.cellconfig: a cell's settings refused up front (exit 2,
nothing written), the parameters it records, and the seeds of its random streams."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from mnistbench import cli
from mnistbench.core import network, options, schema
from mnistbench.core.devices import Loader, UnsupportedCombination
from mnistbench.measure import cellconfig, train
from mnistbench.measure.cellconfig import InvalidSetting, TrainConfig
from tests.measure.cells import TINY, run


def test_stream_seeds_are_distinct_and_deterministic() -> None:
    """One seed gives three different, reproducible stream seeds; another seed, others."""
    a, b = cellconfig.stream_seeds(0), cellconfig.stream_seeds(0)
    assert a == b and len(set(a.values())) == 3
    assert not set(a.values()) & set(cellconfig.stream_seeds(1).values())


@pytest.mark.parametrize(("changes", "error", "message"), [
    ({"device": "tpu"}, UnsupportedCombination, "unknown device 'tpu'; allowed: cpu, cuda"),
    ({"loader": "disk"}, UnsupportedCombination,
     "unknown loader 'disk'; allowed: dataloader, resident"),
    ({"compile": "fast"}, UnsupportedCombination, "unknown compile mode 'fast'; allowed: "
     "(empty: eager), default, reduce-overhead, max-autotune"),
    ({"lr": 0.0}, InvalidSetting, "lr must be a finite number above 0, got 0.0; pass --lr"),
    ({"time_limit": -1.0}, InvalidSetting, "time_limit must be a finite number 0 or more"),
    ({"implementation": options.GRAPH_IMPLEMENTATION, "loader": "dataloader"},
     UnsupportedCombination, "--implementation tuned-graph needs --loader resident"),
])
def test_validate_names_the_setting_and_what_is_allowed(changes, error, message) -> None:
    """Each setting out of its range raises naming it and the allowed values; the defaults
    pass."""
    settings = TrainConfig(out=Path("unused"))
    settings.validate()
    with pytest.raises(error, match=re.escape(message)):
        replace(settings, **changes).validate()


def test_params_record_the_loader_by_its_name_and_the_dataloaders_flags_where_they_apply():
    """A cell's recorded loader is its plain name in the summary's JSON (Loader's value); a
    resident cell records the DataLoader's flags as null, a dataloader cell as given."""
    resident = TrainConfig(out=Path("runs/lab/adhoc/c1"), env="lab").params()
    assert set(resident) == set(schema.PARAM_FIELDS)
    assert json.loads(json.dumps(resident))["loader"] == "resident" == Loader.RESIDENT
    assert resident["cell"] == "c1" and resident["loader_threads"] == 0
    assert resident["workers"] is None and resident["pin_memory"] is None
    loader = TrainConfig(out=Path("x"), env="lab", loader=Loader.DATALOADER).params()
    assert json.loads(json.dumps(loader))["loader"] == "dataloader"
    assert loader["workers"] == 0 and loader["loader_threads"] == 1


@pytest.mark.parametrize(("flag", "value"), [
    ("--lr", "inf"), ("--lr", "nan"), ("--lr", "-inf"), ("--time-limit", "nan"),
    ("--time-limit", "inf"), ("--sample-interval", "inf"), ("--sample-interval", "nan"),
])
def test_cli_rejects_non_finite_numbers(tmp_path, capsys, flag, value) -> None:
    """A NaN or infinite --lr, --time-limit or --sample-interval is a usage error (exit 2)
    naming the flag, and nothing is written."""
    out = tmp_path / "cell"
    with pytest.raises(SystemExit) as info:
        cli.main(["train", "--out", str(out), f"{flag}={value}"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and "must be a finite number" in err
    assert not out.exists()


@pytest.mark.parametrize(("setting", "value"), [
    ("lr", float("inf")), ("lr", float("nan")), ("time_limit", float("nan")),
    ("sample_interval", float("inf")),
])
def test_config_rejects_non_finite_numbers(tmp_path, tiny_mnist, capsys, setting,
                                           value) -> None:
    """TrainConfig (the fork server's and Python callers' way in) refuses the same values:
    exit 2 naming the setting, and nothing is written."""
    out = tmp_path / "cell"
    code = train.run_cell(TrainConfig(out=out, data=tiny_mnist, **{**TINY, setting: value}))
    assert code == 2
    assert f"{setting} must be a finite number" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--batch-size", "4096", "--train-limit", "1024"],
     "--batch-size 4096 is larger than the 1024 training samples the cell uses "
     "(--train-limit 1024): each step would hold 1024 samples while the cell recorded 4096; "
     "pass --batch-size 1024 or less, or a --train-limit of 4096 or more"),
    (["--batch-size", "65536"],
     "--batch-size 65536 is larger than the 60000 training samples the cell uses (all 60000 "
     "of MNIST)"),
    (["--train-limit", "70000"],
     "argument --train-limit: must be 60000 or less (MNIST has 60000 training samples; 0: "
     "all), got 70000"),
    (["--test-limit", "10001"], "argument --test-limit: must be 10000 or less"),
])
def test_a_batch_or_limit_beyond_mnist_is_a_usage_error(tmp_path, capsys, args, message):
    """A batch larger than the training samples the cell uses (it would be recorded as the
    batch while each step held fewer), and limits above MNIST's splits, exit 2 naming the
    numbers; nothing is created."""
    out = tmp_path / "cell"
    try:
        code = cli.main(["train", "--out", str(out), "--quiet", *args])
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_limits_beyond_mnist_given_to_the_api_are_usage_errors(tmp_path, tiny_mnist,
                                                               capsys) -> None:
    """The trainer's API refuses them too (exit 2, nothing written)."""
    for settings, message in (({"train_limit": 70_000}, "--train-limit 70000: MNIST has 60000"),
                              ({"test_limit": 20_000}, "--test-limit 20000: MNIST has 10000"),
                              ({"batch_size": 512, "train_limit": 256},
                               "--batch-size 512 is larger than the 256 training samples")):
        out = tmp_path / "cell"
        assert train.run_cell(TrainConfig(out=out, data=tiny_mnist,
                                          **{**TINY, **settings})) == 2
        assert message in capsys.readouterr().err
        assert not out.exists()


@pytest.mark.slow
def test_dataloader_flags_on_a_resident_cell_are_recorded_as_not_applicable(tmp_path,
                                                                            tiny_mnist):
    """The workflow passes --workers and --pin-memory to every cell: a resident cell, which
    has no DataLoader, records them as null (not applicable), a dataloader cell as given;
    an evaluation batch above the test samples is recorded as the test samples."""
    code, resident, _ = run(tmp_path, tiny_mnist, name="resident", workers=2, pin_memory=True,
                            eval_batch_size=1000)
    assert code == 0
    assert resident["params"]["workers"] is None and resident["params"]["pin_memory"] is None
    assert resident["params"]["eval_batch_size"] == TINY["test_limit"]
    code, loader, _ = run(tmp_path, tiny_mnist, name="loader", loader="dataloader")
    assert code == 0
    assert loader["params"]["workers"] == 0 and loader["params"]["pin_memory"] is False


@pytest.mark.slow
def test_a_wider_network_trains_and_records_its_width_and_flops(tmp_path, tiny_mnist) -> None:
    """--width 2 doubles the convolutions' channels: the cell records the width and the
    FLOPs of a training sample at that width."""
    args = options.train_parser().parse_args(["--width", "2", "--data", "d", "--out", "o"])
    assert args.width == 2 and TrainConfig.from_namespace(args).width == 2
    code, summary, _ = run(tmp_path, tiny_mnist, width=2, max_steps=2, quiet=True)
    assert code == 0 and summary["params"]["width"] == 2
    assert summary["results"]["train_flops_per_sample"] == network.train_flops(2)
