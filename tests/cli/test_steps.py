"""Tests of ``mnistbench peak`` and ``mnistbench cost-model`` (mnistbench.steps): the measured
limit and the resolved cost model written atomically as JSON, their usage errors, bad input
and unwritable outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mnistbench import cli, steps
from mnistbench.core import atomic, cpuruntime, schema
from mnistbench.results import cost

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tiny_peak(monkeypatch):
    """peak's kernels at tiny sizes, timed for 20 ms each."""
    from mnistbench.measure import peak

    monkeypatch.setattr(peak, "MIN_SECONDS", 0.02)
    monkeypatch.setitem(peak.MATMUL_N, "cpu", (64,))
    monkeypatch.setattr(peak, "CONV_BATCH", 2)
    return peak


def test_peak_writes_the_measured_limit(tmp_path, tiny_peak, capsys):
    out = tmp_path / "new" / "peak.json"
    code = cli.main(["peak", "--device", "cpu", "--precision", "fp32", "--precision", "bf16",
                     "--threads", "1", "--out", str(out)])
    assert code == 0
    assert capsys.readouterr().out.strip() == str(out)
    record = json.loads(out.read_text())
    assert record["device"] == "cpu" and record["threads"] == 1
    assert record["source"].startswith("measured")
    assert {(r["kernel"], r["precision"]) for r in record["rows"]} == {
        ("matmul", "fp32"), ("conv2", "fp32"), ("matmul", "bf16"), ("conv2", "bf16")}
    assert all(r["gflops"] > 0 and r["seconds"] >= 0.02 for r in record["rows"])
    assert tiny_peak.limit(record, "bf16") > 0
    assert [p.name for p in out.parent.iterdir()] == ["peak.json"]  # no temporary left


def test_peak_measures_fp32_by_default(tmp_path, tiny_peak, capsys):
    out = tmp_path / "peak.json"
    assert cli.main(["peak", "--out", str(out)]) == 0
    assert {r["precision"] for r in json.loads(out.read_text())["rows"]} == {"fp32"}


def test_peak_refuses_a_precision_the_device_lacks(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["peak", "--device", "cpu", "--precision", "fp16", "--out",
                  str(tmp_path / "p.json")])
    assert info.value.code == 2
    assert "precision 'fp16' is not supported on cpu; allowed on cpu: fp32, bf16" in (
        capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []


def test_peak_of_an_absent_device_exits_10_and_records_it(tmp_path, capsys, monkeypatch):
    """As train does: status unavailable with the reason, no rows, exit 10."""
    from mnistbench.measure import backends, peak
    from mnistbench.results import validate

    def absent(name):
        raise backends.DeviceUnavailable("no CUDA GPU is visible to torch")

    monkeypatch.setattr(peak.backends, "pick_device", absent)
    out = tmp_path / "cuda.json"
    code = cli.main(["peak", "--device", "cuda", "--out", str(out)])
    assert code == schema.EXIT_CODES["unavailable"]
    err = capsys.readouterr().err
    assert err.strip() == "mnistbench peak: cuda unavailable: no CUDA GPU is visible to torch"
    record = validate.read_peak(out)
    assert (record.status, record.reason, record.rows) == (
        "unavailable", "no CUDA GPU is visible to torch", [])


def test_a_failed_measurement_exits_12_and_records_the_error(tmp_path, capsys, monkeypatch):
    from mnistbench.measure import peak
    from mnistbench.results import validate

    def broken(*args, **kwargs):
        raise RuntimeError("oneDNN could not create a primitive")

    monkeypatch.setattr(peak, "_kernels", broken)
    out = tmp_path / "cpu.json"
    assert cli.main(["peak", "--out", str(out)]) == schema.EXIT_CODES["failed"]
    assert "Traceback" in capsys.readouterr().err  # the log says where
    record = validate.read_peak(out)
    assert record.status == "failed" and record.rows == []
    assert record.reason == "RuntimeError: oneDNN could not create a primitive"


def test_record_failure_writes_a_failed_record_without_torch(tmp_path):
    """The workflow's fallback when the measuring process crashed: no torch imported."""
    out = tmp_path / "peak" / "cpu.json"
    code = ("import sys; sys.modules['torch'] = None; from mnistbench import console; "
            f"sys.exit(console.main(['peak', '--out', {str(out)!r}, '--record-failure', "
            "'exit 1: see the log']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, cpuruntime.REEXEC_VAR: "1"}, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(out.read_text())
    assert (record["status"], record["reason"], record["device"], record["rows"]) == (
        "failed", "exit 1: see the log", "cpu", [])


def test_peak_into_a_folder_in_the_way_is_one_paragraph(tmp_path, tiny_peak, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("keep")
    code = cli.main(["peak", "--out", str(blocker / "peak.json")])
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mnistbench peak: error: cannot write the "
                                               "measured limit into")
    assert blocker.read_text() == "keep"


def test_peak_without_torch_names_the_pinned_requirements(tmp_path):
    code = ("import sys; sys.modules['torch'] = None; from mnistbench import console; "
            f"sys.exit(console.main(['peak', '--out', {str(tmp_path / 'p.json')!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, cpuruntime.REEXEC_VAR: "1"}, timeout=120,
                          check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("mnistbench peak: error: torch cannot be imported")
    assert "pip install -r envs/pip/torch.txt" in proc.stderr


# ---------------------------------------------------------------------------------------------
# cost-model

def test_cost_model_from_json_fills_every_default(tmp_path, capsys):
    """What the workflow's cost_model job writes: cost.resolve of the config key cost."""
    given = {"currency": "USD", "devices": {"cuda": {"hardware_price": 2500}}}
    out = tmp_path / "results" / "cost_model.json"
    code = cli.main(["cost-model", "--config-json", json.dumps(given), "--out", str(out)])
    assert code == 0
    assert capsys.readouterr().out.strip() == str(out)
    written = json.loads(out.read_text())
    assert written == cost.resolve(given, source="config key cost")
    assert written["currency"] == "USD" and written["devices"]["cuda"]["hardware_price"] == 2500
    assert written["devices"]["cpu"] == cost.DEFAULT_MODEL["devices"]["cpu"]
    assert cost.load_model(out).currency == "USD"  # what the report reads


def test_cost_model_of_nothing_is_the_built_in_model(tmp_path, capsys):
    out = tmp_path / "cost_model.json"
    assert cli.main(["cost-model", "--config-json", "{}", "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == cost.DEFAULT_MODEL


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_cost_model_from_a_file(tmp_path, capsys, suffix):
    source = tmp_path / f"model{suffix}"
    source.write_text(json.dumps({"runs": 7}) if suffix == ".json" else "runs: 7\n")
    out = tmp_path / "out.json"
    assert cli.main(["cost-model", "--config-json", str(source), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["runs"] == 7


def test_the_published_cost_model_resolves_to_itself(tmp_path, capsys):
    published = REPO / "report" / "data" / "cost_model.json"
    if not published.is_file():
        pytest.skip("no published study")
    out = tmp_path / "cost_model.json"
    assert cli.main(["cost-model", "--config-json", str(published), "--out", str(out)]) == 0
    resolved, kept = json.loads(out.read_text()), json.loads(published.read_text())
    # Every published value resolves to itself; a model published before the device kinds and
    # the cloud pricing (issue 42) gets their defaults, and nothing else is added.
    assert {key: resolved[key] for key in kept} == kept
    assert set(resolved) - set(kept) <= {"kinds", "pricing"}


@pytest.mark.parametrize(("text", "message"), [
    ('{"currency": 1}', "cost model config key cost: key currency: 1 is not of type 'string'"),
    ('{"nope": 1}', "cost model config key cost: key (top level): Additional properties"),
    ('{"runs": ', "cost model config key cost is not valid JSON"),
    ("missing.yaml", "--config-json 'missing.yaml' is neither a JSON object nor a readable "
     "file"),
])
def test_a_bad_cost_model_is_one_paragraph_and_writes_nothing(tmp_path, capsys, text, message):
    out = tmp_path / "cost_model.json"
    code = cli.main(["cost-model", "--config-json", text, "--source", "config key cost",
                     "--out", str(out)])
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mnistbench cost-model: error: ")
    assert message in err[0]
    assert not out.exists()


@pytest.mark.parametrize(("name", "content", "message"), [
    ("models", None, "cannot read the cost model {path}: not a regular file but a folder"),
    ("empty.yaml", "", "cost model {path} is empty (no keys)"),
    ("deep.json", "[" * 5000 + "]" * 5000, "cost model {path}: nested deeper than 64 levels"),
    ("deep.yaml", "[" * 5000 + "]" * 5000, "cost model {path} nests deeper than its parser"),
    ("inline", None, "cost model --config-json: nested deeper than 64 levels"),
])
def test_a_cost_model_file_that_is_a_folder_empty_or_deep_is_one_paragraph(
        tmp_path, capsys, name, content, message):
    """Weak cases of issue 41 (deep nesting in a cost file) for `cost-model --config-json`,
    the workflow's cost_model step: a file nested 5000 deep, or such inline JSON, ended in a
    RecursionError traceback; an empty file said "got NoneType"; a folder named only
    "Is a directory". Each is now one paragraph naming the file (through the cost model's
    one bounded reader) and the fix, and nothing is written."""
    path = tmp_path / name
    if name == "models":
        path.mkdir()
    elif content is not None:
        path.write_text(content)
    text = '{"a": ' + "[" * 5000 + "]" * 5000 + "}" if name == "inline" else str(path)
    out = tmp_path / "cost_model.json"
    assert cli.main(["cost-model", "--config-json", text, "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mnistbench cost-model: error: "), err
    assert message.format(path=path) in err[0] and "Traceback" not in err[0]
    assert "--cost-model" not in err[0]  # the fix names this command's flag
    assert not out.exists()


def test_an_unwritable_cost_model_leaves_the_old_one(tmp_path, capsys, monkeypatch):
    out = tmp_path / "cost_model.json"
    out.write_text('{"old": true}')

    def full(path, text):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(atomic, "write_text", full)
    assert cli.main(["cost-model", "--config-json", "{}", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err and "Free space on that disk" in err
    assert out.read_text() == '{"old": true}'


def test_steps_write_json_refuses_a_folder_as_the_target(tmp_path):
    (tmp_path / "x.json").mkdir()
    with pytest.raises(steps.StepError, match="it is a folder"):
        steps.write_json(tmp_path / "x.json", {}, "the cost model")
