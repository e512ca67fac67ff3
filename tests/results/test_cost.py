"""Tests of mnistbench.results.cost: the cost model file, the cost of a run and the break-even."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from mnistbench import cli
from mnistbench.results import aggregate, cost
from tests.fakes import make_study

DOCS = Path(__file__).resolve().parents[2] / "docs" / "report.md"


def _model(**changes) -> cost.CostModel:
    data = copy.deepcopy(cost.DEFAULT_MODEL)
    for key, value in changes.items():
        target = data
        *path, last = key.split(".")
        for part in path:
            target = target[part]
        target[last] = value
    return cost.validate(data, "test")


def test_default_model_is_valid_and_documented():
    """The built-in model validates and equals the YAML document in docs/report.md."""
    model = cost.load_model(None)
    assert model.currency == "EUR" and model.source == "built-in default"
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1
    assert yaml.safe_load(blocks[0]) == cost.DEFAULT_MODEL


def test_keys_left_out_take_the_schemas_defaults():
    """A model that gives only some keys gets every other one from the schema's defaults."""
    model = cost.validate({"price_per_kwh": 0.5, "devices": {"cuda": {"life_years": 3}}}, "x")
    assert model.price_per_kwh == 0.5 and model.devices["cuda"].life_years == 3.0
    assert model.currency == "EUR" and model.devices["cuda"].hardware_price == 3000.0
    assert model.devices["cpu"] == cost.validate({}).devices["cpu"]


def test_the_schema_is_the_only_definition_of_the_model():
    """The built-in model is the schema's defaults, and the workflow's config schema takes the
    cost model from the package's schema file (no second copy)."""
    assert cost.resolve({}) == cost.DEFAULT_MODEL
    config_schema = yaml.safe_load((DOCS.parents[1] / "workflow" / "schemas"
                                    / "config.schema.yaml").read_text(encoding="utf-8"))
    assert config_schema["properties"]["cost"]["$ref"].endswith(
        "src/mnistbench/results/cost_model.schema.yaml")


def test_unknown_key_lists_the_allowed_ones():
    """A misspelt key is an error listing every allowed key."""
    data = copy.deepcopy(cost.DEFAULT_MODEL)
    data["price_per_kWh"] = data.pop("price_per_kwh")
    with pytest.raises(cost.CostError) as info:
        cost.validate(data, "my.yaml")
    assert "price_per_kWh" in str(info.value) and "allowed keys: currency, price_per_kwh" in str(
        info.value)
    data = copy.deepcopy(cost.DEFAULT_MODEL)
    data["devices"]["tpu"] = data["devices"]["cpu"]
    with pytest.raises(cost.CostError, match="allowed keys: cpu, cuda"):
        cost.validate(data, "my.yaml")


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("devices.cuda.life_years", 0, "key devices.cuda.life_years: 0 is less than the minimum of "
     "0.01"),
    ("devices.cpu.life_years", 1e-300, "key devices.cpu.life_years: 1e-300 is less than the "
     "minimum of 0.01"),
    ("devices.cpu.hours_per_year", 1e-300, "key devices.cpu.hours_per_year: 1e-300 is less "
     "than the minimum of 1"),
    ("devices.cpu.hours_per_year", 9000, "maximum of 8784"),
    ("price_per_kwh", -0.1, "key price_per_kwh: -0.1 is less than the minimum of 0"),
    ("price_per_kwh", "cheap", "'cheap' is not of type 'number'"),
    ("price_per_kwh", float("nan"), "key price_per_kwh: nan should not be valid"),
    ("target_accuracy", 101, "key target_accuracy"),
    ("runs", 0, "key runs: 0 is less than the minimum of 1"),
    ("runs", True, "key runs: True is not of type 'integer'"),
    ("currency", "", "key currency"),
    ("currency", "  ", "key currency"),
])
def test_bad_values_are_named(key, value, expected):
    """Out-of-range, non-finite or mistyped values are errors naming the key and the rule."""
    with pytest.raises(cost.CostError, match=re.escape(expected)):
        _model(**{key: value})


def test_load_model_reads_yaml_and_json_and_explains_bad_files(tmp_path):
    """Models load from YAML and JSON; bad syntax or a missing file names the file."""
    yml = tmp_path / "cost.yaml"
    yml.write_text(yaml.safe_dump({**cost.DEFAULT_MODEL, "currency": "USD"}))
    assert cost.load_model(yml).currency == "USD"
    js = tmp_path / "cost.json"
    js.write_text(json.dumps({**cost.DEFAULT_MODEL, "runs": 7}))
    assert cost.load_model(js).runs == 7
    bad = tmp_path / "bad.yaml"
    bad.write_text("currency: [EUR\n")
    with pytest.raises(cost.CostError, match=f"{re.escape(str(bad))} is not valid YAML"):
        cost.load_model(bad)
    with pytest.raises(cost.CostError, match="cannot read the cost model"):
        cost.load_model(tmp_path / "absent.yaml")
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n- 2\n")
    with pytest.raises(cost.CostError, match="must be a mapping"):
        cost.load_model(listed)


@pytest.mark.parametrize(("name", "text", "words"), [
    ("deep.json", "[" * 5000 + "]" * 5000, "nested deeper than 64 levels"),
    ("deep.yaml", "a: " + "[" * 5000 + "]" * 5000 + "\n", "nests deeper than"),
    ("laughs.yaml", "\n".join(
        ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
        + [f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]"
           for a, b in zip("abcdefgh", "bcdefghi", strict=True)]),
     "expands to more than 200000 values"),
    ("secret.yaml", "currency: [SECRET\n", "is not valid YAML (line"),
])
def test_a_cost_model_too_deep_too_large_or_broken_is_one_paragraph(tmp_path, name, text,
                                                                    words):
    """Weak cases: a cost file nested 5000 deep (was a RecursionError traceback), a billion
    laughs, or bad syntax: a CostError naming the file and the fix, never its content."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(cost.CostError) as info:
        cost.load_model(path)
    assert str(path) in str(info.value) and words in str(info.value), str(info.value)
    assert "SECRET" not in str(info.value)


def test_a_cost_model_that_is_a_folder_or_empty_is_one_paragraph(tmp_path, capsys):
    """Weak cases of the sweep of issue 41: `report --cost-model FOLDER` ended in an
    IsADirectoryError traceback (the reader opened the folder before looking at what it
    is); an empty file, or one of comments only, said "got NoneType". Now each is one
    paragraph naming the file and the fix, exit 1."""
    folder = tmp_path / "models"
    folder.mkdir()
    empty, comments = tmp_path / "empty.yaml", tmp_path / "comments.yaml"
    empty.write_text("")
    comments.write_text("# prices to fill in\n")
    with pytest.raises(cost.CostError, match="not a regular file but a folder") as info:
        cost.load_model(folder)
    assert str(folder) in str(info.value) and "--cost-model" in str(info.value)
    for path in (empty, comments):
        with pytest.raises(cost.CostError, match=r"is empty \(no keys\)") as info:
            cost.load_model(path)
        assert str(path) in str(info.value) and "NoneType" not in str(info.value)
    assert cli.main(["report", "--results", str(tmp_path), "--cost-model", str(folder),
                     "--out", str(tmp_path / "index.html")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "cannot read the cost model" in err and not (tmp_path / "index.html").exists()


def test_a_write_off_of_1e_300_hours_is_refused_not_divided_by(tmp_path):
    """Weak case: 1e-300 years x 1e-300 hours underflowed to 0 and the report crashed with
    ZeroDivisionError; now the model is refused naming the key."""
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({"devices": {"cpu": {"life_years": 1e-300,
                                                        "hours_per_year": 1e-300}}}))
    with pytest.raises(cost.CostError, match=r"key devices\.cpu\.(life_years|hours_per_year)"):
        cost.load_model(path)


def _tables(cells: list[dict], epochs: list[dict] | None = None):
    base = {"env": "e", "experiment": "convergence", "status": "ok", "loader": "resident",
            "epochs": 3, "start_unix": float("nan"), "end_unix": float("nan"),
            "gpu_energy_j": float("nan"), "cpu_energy_j": float("nan")}
    summary = pd.DataFrame([{**base, **c} for c in cells])
    columns = ["env", "experiment", "cell", "epoch", "epoch_s", "test_acc"]
    return summary, pd.DataFrame(epochs or [], columns=columns)


def test_assumed_energy_uses_system_power():
    """Without counters, energy = system_power_w x run time, and every amount follows."""
    model = _model()
    summary, epochs = _tables([
        {"cell": "c0", "device": "cpu", "timed_s": 590.0, "overhead_s": 10.0},
        {"cell": "c1", "device": "cpu", "timed_s": 610.0, "overhead_s": 10.0},
        {"cell": "g0", "device": "cuda", "timed_s": 55.0, "overhead_s": 5.0},
    ])
    report = cost.compute(summary, epochs, model)
    cpu = next(r for r in report.rows if r.device == "cpu")
    assert cpu.n == 2 and cpu.run_s.value == pytest.approx(610.0)
    assert cpu.energy_wh.basis == cost.MIXED  # an assumed power times a measured time
    assert cpu.energy_wh.value == pytest.approx(180.0 * 610.0 / 3600.0)
    assert cpu.electricity.value == pytest.approx(cpu.energy_wh.value / 1000.0 * 0.30)
    assert cpu.hardware.value == pytest.approx(1200.0 / (4.0 * 2000.0) * 610.0 / 3600.0)
    assert cpu.waiting.value == pytest.approx(20.0 * 610.0 / 3600.0)
    total = cpu.electricity.value + cpu.hardware.value + cpu.waiting.value
    assert cpu.total.value == pytest.approx(total)
    assert cpu.total_n.value == pytest.approx(100 * total)
    assert cpu.run_s.basis == cost.MEASURED and cpu.hardware.basis == cost.MIXED


def test_measured_energy_adds_the_unmeasured_rest():
    """With counters, energy = (counted J / timed s + unmeasured W) x run time, tagged mixed;
    with unmeasured_power_w 0 it is tagged measured."""
    summary, epochs = _tables([
        {"cell": "g0", "device": "cuda", "timed_s": 50.0, "overhead_s": 10.0,
         "gpu_energy_j": 15_000.0, "cpu_energy_j": 2_500.0},
    ])
    row = cost.compute(summary, epochs, _model()).rows[0]
    power = (15_000.0 + 2_500.0) / 50.0 + 120.0
    assert row.energy_wh.value == pytest.approx(power * 60.0 / 3600.0)
    assert row.energy_wh.basis == cost.MIXED
    assert "gpu_energy_j + cpu_energy_j" in row.energy_note
    row = cost.compute(summary, epochs, _model(**{"devices.cuda.unmeasured_power_w": 0})
                       ).rows[0]
    assert row.energy_wh.basis == cost.MEASURED
    assert row.energy_wh.value == pytest.approx(350.0 * 60.0 / 3600.0)


def test_cpu_run_is_not_charged_for_an_idle_gpu():
    """A cpu cell counts the CPU package counter only, not the GPU board's idle energy."""
    summary, epochs = _tables([
        {"cell": "c0", "device": "cpu", "timed_s": 100.0, "overhead_s": 0.0,
         "gpu_energy_j": 2_000.0, "cpu_energy_j": 12_000.0},
    ])
    row = cost.compute(summary, epochs, _model()).rows[0]
    assert row.energy_wh.value == pytest.approx((120.0 + 60.0) * 100.0 / 3600.0)


def test_time_and_cost_to_target_accuracy():
    """The target is reached at the first epoch with test_acc >= target; never reached gives
    no cost."""
    summary, epochs = _tables(
        [{"cell": "c0", "device": "cpu", "timed_s": 30.0, "overhead_s": 4.0},
         {"cell": "g0", "device": "cuda", "timed_s": 3.0, "overhead_s": 2.0}],
        [{"env": "e", "experiment": "convergence", "cell": "c0", "epoch": e, "epoch_s": 10.0,
          "test_acc": acc} for e, acc in ((1, 97.0), (2, 98.2), (3, 99.0))]
        + [{"env": "e", "experiment": "convergence", "cell": "g0", "epoch": e, "epoch_s": 1.0,
            "test_acc": 95.0} for e in (1, 2, 3)])
    report = cost.compute(summary, epochs, _model())
    cpu = next(r for r in report.rows if r.device == "cpu")
    gpu = next(r for r in report.rows if r.device == "cuda")
    assert cpu.target_s.value == pytest.approx(4.0 + 20.0) and cpu.target_epoch == 2
    per_second = cpu.total.value / cpu.run_s.value
    assert cpu.target_cost.value == pytest.approx(per_second * 24.0)
    assert gpu.target_s.value is None and gpu.target_cost.value is None
    assert cost.time_to_target(epochs[epochs["cell"] == "c0"], 99.5) == (None, None)


def test_break_even_pays_back_the_extra_price():
    """Break-even = (cuda price - cpu price) / saving per run, rounded up; never when the GPU
    run is not cheaper; zero when the GPU machine costs no more."""
    summary, epochs = _tables([
        {"cell": "c0", "device": "cpu", "timed_s": 3600.0, "overhead_s": 0.0},
        {"cell": "g0", "device": "cuda", "timed_s": 360.0, "overhead_s": 0.0},
    ])
    model = _model()
    report = cost.compute(summary, epochs, model)
    (b,) = report.break_even
    cpu_el = 180.0 / 1000.0 * 0.30
    gpu_el = 600.0 * 0.1 / 1000.0 * 0.30
    assert b.extra_price == pytest.approx(1800.0)
    assert b.saving_electricity == pytest.approx(cpu_el - gpu_el)
    assert b.runs_electricity == math.ceil(1800.0 / (cpu_el - gpu_el))
    assert b.saving_with_waiting == pytest.approx(cpu_el - gpu_el + 20.0 - 2.0)
    assert b.runs_with_waiting == math.ceil(1800.0 / (cpu_el - gpu_el + 18.0))
    slow_gpu = _tables([
        {"cell": "c0", "device": "cpu", "timed_s": 100.0, "overhead_s": 0.0},
        {"cell": "g0", "device": "cuda", "timed_s": 400.0, "overhead_s": 0.0},
    ])
    (never,) = cost.compute(*slow_gpu, model).break_even
    assert math.isinf(never.runs_electricity) and math.isinf(never.runs_with_waiting)
    cheap = _model(**{"devices.cuda.hardware_price": 1000.0})
    assert cost.compute(summary, epochs, cheap).break_even[0].runs_electricity == 0


def test_cpu_only_and_empty_studies_explain_what_is_missing(tmp_path):
    """A CPU-only study costs the CPU and says why there is no break-even; a study without
    convergence cells says there is nothing to cost."""
    runs = tmp_path / "runs"
    make_study(runs, devices=("cpu",), experiments=("convergence",), repeats=1, energy=False)
    aggregate.aggregate(runs, tmp_path)
    tables = aggregate.load_tables(tmp_path)
    report = cost.compute(tables.summary, tables.epochs, _model())
    assert {r.device for r in report.rows} == {"cpu"} and report.break_even == []
    assert any("no ok GPU" in note for note in report.notes)
    assert all(r.energy_wh.basis == cost.MIXED for r in report.rows)
    none = cost.compute(tables.summary.iloc[0:0], tables.epochs, _model())
    assert none.rows == [] and "nothing to cost" in none.notes[0]


def test_model_rows_list_every_input():
    """as_rows() lists every top-level and per-device input for the report."""
    keys = [k for k, _, _ in _model().as_rows()]
    assert "price_per_kwh" in keys and "devices.cuda.hardware_price" in keys
    # every top-level key but devices and kinds, each device's keys, one row per priced kind
    assert len(keys) == (len(cost.TOP_KEYS) - 2 + 2 * len(cost.DEVICE_KEYS)
                         + len(_model().kinds))
