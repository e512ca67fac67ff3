"""Tests of mnistbench.results.validate, the one reader of a cell's files: strict JSON, every
schema field checked for type, finiteness and range, the counts of an ok cell against its
params, and its files present; a bad cell becomes a visible failed row that no statistic
uses, or (when it cannot be placed at all) one paragraph naming the file."""

from __future__ import annotations

import csv
import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from mnistbench.core import schema
from mnistbench.results import aggregate, validate
from tests.fakes import cell_id, make_study

CELL = cell_id("cpu", "fp32", "resident", 128, 0)


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    """A small CPU-only study: two convergence cells of 2 epochs and four sweep cells."""
    runs = tmp_path_factory.mktemp("validate") / "runs"
    make_study(runs, gpu=False, devices=("cpu",), precisions=("fp32",), batch_sizes=(64,),
               repeats=2, convergence_epochs=2)
    return runs


@pytest.fixture
def runs(study, tmp_path) -> Path:
    return Path(shutil.copytree(study, tmp_path / "runs"))


def folder_of(runs: Path, cell: str = CELL, experiment: str = "convergence") -> Path:
    return runs / "alpha" / experiment / cell


def set_value(folder: Path, where: str, value) -> None:
    """Set ``section.key`` of the cell's summary.json to ``value``; a ``Token`` is written as
    its text as it is (NaN, Infinity, 1e999: what json.dumps cannot write)."""
    path = folder / schema.SUMMARY_FILE
    data = json.loads(path.read_text())
    section, key = where.split(".")
    data[section][key] = "__TOKEN__" if isinstance(value, Token) else value
    text = json.dumps(data, indent=2)
    if isinstance(value, Token):
        text = text.replace('"__TOKEN__"', value.text)
    path.write_text(text)


class Token:
    def __init__(self, text: str) -> None:
        self.text = text


def edit_epochs(folder: Path, edit) -> None:
    """Rewrite the cell's epochs.csv through ``edit(rows)`` (dict rows, values as text)."""
    path = folder / schema.EPOCHS_FILE
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    edit(rows)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(schema.EPOCH_COLUMNS))
        writer.writeheader()
        writer.writerows(rows)


def invalid_row(runs: Path, tmp_path: Path, folder: Path) -> dict:
    """Aggregate and return the summary row of ``folder``'s cell, having checked that it is a
    failed, invalid row with empty results and no epoch or resource rows."""
    out = tmp_path / "tables"
    aggregate.aggregate(runs, out)
    with (out / "summary.csv").open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["cell"] == folder.name
                and r["experiment"] == folder.parent.name]
    assert len(rows) == 1
    row = rows[0]
    assert row["status"] == "failed", row["reason"]
    assert row["reason"].startswith("invalid result (recorded status ")
    assert all(row[k] == "" for k in schema.RESULT_FIELDS)
    for table in ("epochs.csv", "resources.csv"):
        with (out / table).open(newline="") as handle:
            assert not any(r["cell"] == folder.name and r["experiment"] == folder.parent.name
                           for r in csv.DictReader(handle))
    return row


def test_the_fake_study_is_valid(study):
    """Every cell the fakes write (ok, unavailable) passes: the checks refuse only bad
    values."""
    cells = [validate.read_cell(p.parent) for p in study.glob("*/*/*/summary.json")]
    assert cells and all(c.valid for c in cells), [c.problems for c in cells if c.problems]
    assert {c.status for c in cells} == {"ok"}


def test_every_schema_field_has_a_spec():
    """A field added to the schema gets a spec (by its unit, or its own)."""
    for section, fields in validate._TABLES.items():
        assert set(validate.SPECS[section]) == set(fields)


@pytest.mark.parametrize(("where", "token"), [
    ("results.samples_per_s", "NaN"),
    ("timing.timed_s", "Infinity"),
    ("results.final_test_loss", "-Infinity"),
    ("results.epoch_s_median", "1e999"),
])
def test_a_non_json_number_makes_the_cell_invalid(runs, tmp_path, where, token):
    """NaN, Infinity, -Infinity and 1e999 (json.loads takes them, JSON has none of them)
    make the cell invalid, the reason naming the file, the field and the token."""
    folder = folder_of(runs)
    set_value(folder, where, Token(token))
    row = invalid_row(runs, tmp_path, folder)
    assert f"summary.json {where} is {token}, which is not JSON" in row["reason"]
    assert "\n" not in row["reason"]


@pytest.mark.parametrize(("where", "value", "expected"), [
    ("results.samples_per_s", "fast", "a finite number 0 or more"),
    ("results.final_test_acc", "97.5", "a finite number 0 to 100"),
    ("params.lr", True, "a finite number above 0"),
    ("params.epochs", 2.0, "a whole number 1 or more"),
    ("params.pin_memory", "no", "true or false"),
    ("env.hostname", ["a", "b"], "a JSON string or scalar"),
    ("env.gpu_count", "1", "a whole number 0 or more"),
    ("timing.started_at", "yesterday", "an ISO 8601 date-time"),
    ("results.busy", 1, "true or false"),
])
def test_a_wrong_type_makes_the_cell_invalid(runs, tmp_path, where, value, expected):
    """A string in a numeric field, a boolean as a number, a float as a count, a list as
    text: never read as empty, always an invalid cell naming field, value and type."""
    folder = folder_of(runs)
    set_value(folder, where, value)
    row = invalid_row(runs, tmp_path, folder)
    assert f"summary.json {where} is {json.dumps(value)}, expected {expected}" in row["reason"]
    section, key = where.split(".")
    if section != "results":
        assert row[key] == ""  # the bad value is not in the table


@pytest.mark.parametrize(("where", "value"), [
    ("timing.warmup_s", -1.0),
    ("timing.overhead_s", -0.5),
    ("results.samples_per_s", -3.0),
    ("results.final_test_acc", 140.0),
    ("results.best_test_acc", -1.0),
    ("results.gpu_util_mean", 101.0),
    ("results.peak_rss_mb", -2.0),
    ("results.cpu_energy_j", -10.0),
    ("results.final_train_loss", -0.1),
    ("params.lr", 0.0),
    ("params.train_limit", 70_000),
    ("params.test_limit", 20_000),
    ("params.sample_interval", 0),
    ("params.workers", -1),
    ("env.memory_gb", -4.0),
])
def test_a_value_out_of_range_makes_the_cell_invalid(runs, tmp_path, where, value):
    """Negative times, rates, memory and energy; accuracies and GPU use outside 0-100;
    a zero learning rate; more training or test samples than MNIST has."""
    folder = folder_of(runs)
    set_value(folder, where, value)
    row = invalid_row(runs, tmp_path, folder)
    assert f"summary.json {where} is {json.dumps(value)}, expected " in row["reason"]


def test_an_ok_cell_without_a_headline_figure_is_invalid(runs, tmp_path):
    """An ok cell whose final accuracy is null lacks what makes it ok."""
    folder = folder_of(runs)
    set_value(folder, "results.final_test_acc", None)
    row = invalid_row(runs, tmp_path, folder)
    assert "results.final_test_acc is empty, but an ok cell has one" in row["reason"]


@pytest.mark.parametrize(("case", "message"), [
    ("more epochs asked", "epochs.csv has 2 epoch rows, but params.epochs is 3"),
    ("numbering", "epochs.csv numbers its epochs 1, 3, expected 1 to 2 in order"),
    ("steps disagree", "results.steps_per_epoch is 7, but epochs.csv epoch 1 has"),
    ("best past the end", "results.best_epoch is 5, past params.epochs 2"),
    ("best below final", "is below results.final_test_acc"),
    ("samples", "samples in 1 steps, more than steps x params.batch_size 128"),
    ("max steps", "more than params.max_steps 1"),
    ("ends before it starts", "timing.end_unix 1.0 is before timing.start_unix"),
])
def test_counts_that_disagree_with_the_params_make_the_cell_invalid(runs, tmp_path, case,
                                                                    message):
    """The epoch rows of an ok cell are numbered 1..params.epochs, their steps and samples
    fit the batch size and max_steps, and its results agree with them."""
    folder = folder_of(runs)
    if case == "more epochs asked":
        set_value(folder, "params.epochs", 3)
    elif case == "numbering":
        edit_epochs(folder, lambda rows: rows[1].update(epoch="3"))
    elif case == "steps disagree":
        set_value(folder, "results.steps_per_epoch", 7)
    elif case == "best past the end":
        set_value(folder, "results.best_epoch", 5)
    elif case == "best below final":
        set_value(folder, "results.best_test_acc", 1.0)
    elif case == "samples":
        edit_epochs(folder, lambda rows: [r.update(steps="1") for r in rows])
        set_value(folder, "results.steps_per_epoch", 1)
    elif case == "max steps":
        set_value(folder, "params.max_steps", 1)
    else:
        set_value(folder, "timing.end_unix", 1.0)
    row = invalid_row(runs, tmp_path, folder)
    assert message in row["reason"]


@pytest.mark.parametrize(("column", "value", "message"), [
    ("test_acc", "nan", "column test_acc is 'nan', expected a finite number 0 to 100"),
    ("train_s", "slow", "column train_s is 'slow', expected a finite number 0 or more"),
    ("test_acc", "101", "column test_acc is '101'"),
    ("steps", "2.5", "column steps is '2.5', expected a whole number 0 or more"),
    ("epoch_s", "", "column epoch_s is empty"),
    ("samples_per_s", "1_000", "column samples_per_s is '1_000'"),
    ("eval_s", "inf", "column eval_s is 'inf'"),
])
def test_a_bad_epoch_row_makes_the_cell_invalid(runs, tmp_path, column, value, message):
    """Every value of an epoch row is a finite number in its column's range (an empty
    samples_per_s only); words, nan, inf and digit groups are named with their line."""
    folder = folder_of(runs)
    edit_epochs(folder, lambda rows: rows[1].update({column: value}))
    row = invalid_row(runs, tmp_path, folder)
    assert f"epochs.csv line 3 {message}" in row["reason"]


@pytest.mark.parametrize(("column", "value"), [
    ("gpu_util_pct", "150"), ("rss_mb", "-1"), ("t_s", ""), ("cpu_energy_j", "NaN")])
def test_a_bad_resource_row_makes_the_cell_invalid(runs, tmp_path, column, value):
    """The resource sampler's rows are checked as the epoch rows are."""
    folder = folder_of(runs)
    path = folder / schema.RESOURCES_FILE
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    rows[0][column] = value
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(schema.RESOURCE_COLUMNS))
        writer.writeheader()
        writer.writerows(rows)
    row = invalid_row(runs, tmp_path, folder)
    assert f"resources.csv line 2 column {column} is " in row["reason"]


@pytest.mark.parametrize(("name", "fault", "message"), [
    ("resources.csv", "missing", "resources.csv is missing, but an ok cell has one"),
    ("resources.csv", "empty", "resources.csv is empty, but an ok cell has its header"),
    ("epochs.csv", "empty", "epochs.csv is empty, but an ok cell has its header"),
    ("epochs.csv", "header only", "epochs.csv has 0 epoch rows, but params.epochs is 2"),
    ("epochs.csv", "cut",
     f"epochs.csv line 3 has 4 fields, expected {len(schema.EPOCH_COLUMNS)}"),
    ("epochs.csv", "folder", "cannot read epochs.csv: not a regular file but a folder"),
    ("resources.csv", "binary", "cannot read resources.csv: not UTF-8 text (byte 0)"),
])
def test_an_ok_cell_needs_its_three_files_whole(runs, tmp_path, name, fault, message):
    """An ok cell has summary.json, epochs.csv and resources.csv, each non-empty and whole."""
    folder = folder_of(runs)
    path = folder / name
    if fault == "missing":
        path.unlink()
    elif fault == "empty":
        path.write_text("")
    elif fault == "header only":
        path.write_text(",".join(schema.EPOCH_COLUMNS) + "\n")
    elif fault == "cut":
        text = path.read_text().splitlines()
        path.write_text("\n".join([*text[:2], ",".join(text[2].split(",")[:4])]) + "\n")
    elif fault == "folder":
        path.unlink()
        path.mkdir()
    else:
        path.write_bytes(b"\xff\xfe\x00garbage")
    row = invalid_row(runs, tmp_path, folder)
    assert message in row["reason"]


def test_a_fifo_in_place_of_a_cell_file_never_hangs(runs, tmp_path):
    """A FIFO named epochs.csv makes the cell invalid (opening it would block for ever); a
    FIFO named summary.json is an error naming it. Neither read blocks."""
    folder = folder_of(runs)
    (folder / "epochs.csv").unlink()
    os.mkfifo(folder / "epochs.csv")
    done: list[object] = []
    worker = threading.Thread(target=lambda: done.append(validate.read_cell(folder)),
                              daemon=True)
    worker.start()
    worker.join(10)
    assert done, "read_cell blocked on a FIFO"
    assert "cannot read epochs.csv: not a regular file but a FIFO" in done[0].why()
    (folder / "summary.json").unlink()
    os.mkfifo(folder / "summary.json")
    with pytest.raises(aggregate.AggregateError, match="not a regular file but a FIFO"):
        aggregate.aggregate(runs, tmp_path / "out")


def test_a_summary_that_is_a_folder_names_the_file(runs, tmp_path):
    """A folder named summary.json is one paragraph naming it, not a traceback."""
    folder = folder_of(runs)
    (folder / "summary.json").unlink()
    (folder / "summary.json").mkdir()
    with pytest.raises(aggregate.AggregateError) as info:
        aggregate.aggregate(runs, tmp_path / "out")
    assert str(folder / "summary.json") in str(info.value)
    assert "not a regular file but a folder" in str(info.value)


def test_a_non_json_token_in_the_identity_cannot_be_placed(runs, tmp_path):
    """A NaN batch size leaves the cell without an identity: refused naming the file."""
    folder = folder_of(runs)
    set_value(folder, "params.batch_size", Token("NaN"))
    with pytest.raises(aggregate.AggregateError, match=r"params\.batch_size is None"):
        aggregate.aggregate(runs, tmp_path / "out")


def test_an_invalid_cell_lists_its_problems_and_how_many_more(runs, tmp_path):
    """Several bad values: the reason lists the first four and counts the rest."""
    folder = folder_of(runs)
    for key in ("startup_s", "data_load_s", "warmup_s", "timed_s", "overhead_s"):
        set_value(folder, f"timing.{key}", -1)
    cell = validate.read_cell(folder)
    assert len(cell.problems) == 5 and cell.why().endswith("; and 1 more")
    assert cell.table_status == "failed" and not cell.valid


def test_a_failed_cell_keeps_its_status_and_partial_epochs(runs, tmp_path):
    """A cell the trainer wrote as failed after one epoch (a diverged loss in epoch 2) is
    valid: fewer epoch rows than params.epochs are right for it."""
    folder = folder_of(runs)
    data = json.loads((folder / "summary.json").read_text())
    data["status"], data["reason"] = "failed", "the training loss became nan in epoch 2"
    data["results"] = dict.fromkeys(schema.RESULT_FIELDS)
    (folder / "summary.json").write_text(json.dumps(data))
    edit_epochs(folder, lambda rows: rows.pop())
    cell = validate.read_cell(folder)
    assert cell.valid, cell.problems
    assert cell.table_status == "failed" and len(cell.epochs) == 1


@pytest.mark.parametrize("value", ["fast", "inf", "nan", "True"])
def test_load_tables_refuses_a_word_in_a_numeric_column(study, tmp_path, value):
    """The report's reader of the tables: a word, inf or nan in a numeric column of an
    edited summary.csv is an error naming the file, the line, the cell and the value, never
    an empty value that drops out of the statistics."""
    aggregate.aggregate(study, tmp_path)
    path = tmp_path / "summary.csv"
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    rows[2]["samples_per_s"] = value
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(aggregate.AggregateError) as info:
        aggregate.load_tables(tmp_path)
    cell = "/".join(rows[2][k] for k in schema.ID_COLUMNS)
    assert str(info.value).startswith(
        f'{path} line 4 (cell {cell}): samples_per_s is "{value}", expected a finite number '
        "0 or more")


#: Edits of an aggregated summary.csv that no cell can give: column -> (value, words).
IMPOSSIBLE_ROWS = {
    "accuracy 250 %": ("final_test_acc", "250", 'final_test_acc is "250", expected a finite '
                       "number 0 to 100"),
    "-1e6 samples/s": ("samples_per_s", "-1e6", 'samples_per_s is "-1e6", expected a finite '
                       "number 0 or more"),
    "-5 s epochs": ("epoch_s_median", "-5", 'epoch_s_median is "-5", expected a finite number '
                    "0 or more"),
    "a tpu device": ("device", "tpu", "device is \"tpu\", expected one of 'cpu', 'cuda'"),
    "an fp64 precision": ("precision", "fp64", 'precision is "fp64", expected one of'),
    "a <b>warp</b> loader": ("loader", "<b>warp</b>", 'loader is "<b>warp</b>", expected one'),
    "an unknown implementation": ("implementation", "=cmd()", "implementation is \"=cmd()\""),
    "an unknown compile mode": ("compile", "fastest", 'compile is "fastest", expected one of'),
    "an unknown tip": ("tip", "<img src=x>", 'tip is "<img src=x>", expected one of'),
    "a 1e300 GFLOP/s limit": ("limit_gflops", "1e300", 'limit_gflops is "1e300", expected a '
                              "finite number 0 to 1e+07"),
    "an ok cpu row at tf32": ("precision", "tf32", 'precision is "tf32", which cpu does not '
                              "run (it runs fp32, bf16)"),
    "an ok cpu row at fp16": ("precision", "fp16", 'precision is "fp16", which cpu does not'),
    "a cpu limit past what its cores can do": (
        "limit_gflops", "5e5", "limit_gflops is 500000 GFLOP/s, above 266240 GFLOP/s, the "
        "most 20 logical CPU cores can do"),
    "a cpu rate past what its cores can do": (
        "achieved_gflops", "3e5", "achieved_gflops is 300000 GFLOP/s, above 266240"),
    "an empty env": ("env", "", 'env is "", expected the name of a folder'),
    "an unknown status": ("status", "great", 'status is "great", expected one of'),
}


def edit_summary(path: Path, line: int, column: str, value: str) -> dict:
    """Set ``column`` of the row on ``line`` of the CSV table ``path``; that row, edited."""
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    rows[line - 2][column] = value
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return rows[line - 2]


@pytest.mark.parametrize("case", sorted(IMPOSSIBLE_ROWS))
def test_every_reader_of_the_tables_refuses_a_row_no_cell_can_give(study, tmp_path, case,
                                                                   capsys):
    """An aggregated summary.csv edited to a value no cell can give (accuracy 250 %, -1e6
    samples/s, -5 s epochs, a tpu device, a limit of 1e300 GFLOP/s, ...) is refused by the
    report's reader (load_tables) and by `mnistbench table`, naming the file, the line, the
    cell, the field and the fix; nothing is printed."""
    from mnistbench import cli

    column, value, words = IMPOSSIBLE_ROWS[case]
    aggregate.aggregate(study, tmp_path)
    path = tmp_path / "summary.csv"
    edit_summary(path, 3, column, value)
    with pytest.raises(aggregate.AggregateError) as info:
        aggregate.load_tables(tmp_path)
    message = str(info.value)
    assert message.startswith(f"{path} line 3 (cell ") and words in message, message
    assert "run `mnistbench aggregate RUNS --out-dir FOLDER` again" in message
    capsys.readouterr()
    code = cli.main(["table", "--results", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and words in err and "Traceback" not in err, err


@pytest.mark.parametrize(("column", "value", "words"), [
    ("rss_mb", "-5000", 'rss_mb is "-5000", expected a finite number 0 or more'),
    ("gpu_util_pct", "250", 'gpu_util_pct is "250", expected a finite number 0 to 100'),
    ("device", "tpu", 'device is "tpu", expected one of'),
])
def test_the_report_refuses_a_resources_row_no_cell_can_give(study, tmp_path, column, value,
                                                             words):
    """resources.csv is range-checked like the other two tables (it was read unchecked: a
    -5000 MiB memory drew into the report's charts)."""
    aggregate.aggregate(study, tmp_path)
    path = tmp_path / "resources.csv"
    edit_summary(path, 2, column, value)
    with pytest.raises(aggregate.AggregateError) as info:
        aggregate.load_tables(tmp_path)
    message = str(info.value)
    assert message.startswith(f"{path} line 2 (cell ") and words in message, message


@pytest.mark.parametrize("name", ["summary.csv", "epochs.csv", "resources.csv"])
def test_the_readers_of_the_tables_follow_no_link_and_open_no_fifo(study, tmp_path, name,
                                                                  capsys):
    """Item 1 of issue 41: an aggregated table replaced by a symbolic link to a secret (a
    publication's data/ is anyone's input) is refused by the report's reader (load_tables)
    and, for summary.csv, by `mnistbench table`, naming the link; nothing of its target is
    printed or rendered (both followed it). A FIFO in its place is refused at once."""
    import os

    from mnistbench import cli

    out = tmp_path / "tables"
    aggregate.aggregate(study, out)
    secret = tmp_path / "secret.csv"
    text = (out / name).read_text().replace("alpha", "SECRET", 1)
    secret.write_text(text)
    (out / name).unlink()
    (out / name).symlink_to(secret)
    with pytest.raises(aggregate.AggregateError) as info:
        aggregate.load_tables(out)
    message = str(info.value)
    assert f"cannot read {out / name}: a symbolic link, which is not followed" in message
    assert "SECRET" not in message
    (out / name).unlink()
    os.mkfifo(out / name)
    with pytest.raises(aggregate.AggregateError, match="not a regular file but a FIFO"):
        aggregate.load_tables(out)
    if name == "summary.csv":
        (out / name).unlink()
        (out / name).symlink_to(secret)
        capsys.readouterr()
        code = cli.main(["table", "--results", str(out)])
        got, err = capsys.readouterr()
        assert code == 1 and got == "" and "SECRET" not in err, err
        assert "a symbolic link, which is not followed" in err and "Traceback" not in err


def test_a_cell_with_settings_that_cannot_have_run_is_refused_or_failed(runs):
    """A summary.json with a tpu device, an fp64 precision or a loader `<b>warp</b>` cannot
    be placed (the aggregate refuses, naming the file); one with an implementation, compile
    mode or tip outside its list, or ok at a precision its device does not run (cpu tf32),
    is invalid: filed failed, never a finding."""
    folder = folder_of(runs)
    original = (folder / schema.SUMMARY_FILE).read_text()
    for key, value in (("device", "tpu"), ("precision", "fp64"), ("loader", "<b>warp</b>")):
        (folder / schema.SUMMARY_FILE).write_text(original)
        set_value(folder, f"params.{key}", value)
        with pytest.raises(validate.CellError) as info:
            validate.read_cell(folder)
        assert f"params.{key} is \"{value}\", expected one of" in str(info.value)
        assert str(folder / schema.SUMMARY_FILE) in str(info.value)
    for key, value in (("implementation", "fast"), ("compile", "<b>x</b>"), ("tip", "=1+1")):
        (folder / schema.SUMMARY_FILE).write_text(original)
        set_value(folder, f"params.{key}", value)
        cell = validate.read_cell(folder)
        assert cell.table_status == "failed"
        assert f"params.{key} is \"{value}\", expected one of" in cell.why()
    # A precision of the list that the cell's device does not run (train refuses it before
    # it runs): an ok cpu cell at tf32 or fp16 is invalid; an unavailable one is a result.
    for value in ("tf32", "fp16"):
        (folder / schema.SUMMARY_FILE).write_text(original)
        set_value(folder, "params.precision", value)
        cell = validate.read_cell(folder)
        assert cell.table_status == "failed", value
        assert f'params.precision is "{value}", which cpu does not run (it runs fp32, bf16)' \
            in cell.why()
    # A training rate no CPU of the cell's cores can reach (20 logical: 266,240 GFLOP/s).
    (folder / schema.SUMMARY_FILE).write_text(original)
    set_value(folder, "results.achieved_gflops", 3e5)
    assert "results.achieved_gflops is 300000 GFLOP/s, above 266240 GFLOP/s" in \
        validate.read_cell(folder).why()
    (folder / schema.SUMMARY_FILE).write_text(original)
    data = json.loads(original)
    data["params"]["precision"], data["status"], data["reason"] = "tf32", "unavailable", "no"
    (folder / schema.SUMMARY_FILE).write_text(json.dumps(data))
    assert "which cpu does not run" not in validate.read_cell(folder).why()


def test_a_gpu_runs_no_faster_than_a_stated_multiple_of_its_datasheet_peak(runs, study,
                                                                           tmp_path):
    """Item 3 of issue 41: a GPU's limit or training rate is bounded by 1.5x its datasheet
    peak where the GPU is known (its fastest dense tensor-core rate), else by 10 PFLOP/s. The
    cell reader fails such a cell; a table row of it is refused by every reader."""
    from mnistbench.results import rows

    multiple = validate.GPU_DATASHEET_MULTIPLE
    assert multiple == 1.5
    assert validate.gpu_ceiling_gflops("NVIDIA H200") == multiple * 989e3
    assert validate.gpu_ceiling_gflops("NVIDIA H100 80GB HBM3") == multiple * 989e3
    assert validate.gpu_ceiling_gflops("NVIDIA A100-SXM4-80GB") == multiple * 312e3
    assert validate.gpu_ceiling_gflops("NVIDIA A10") == multiple * 125e3  # not the A100's
    assert validate.gpu_ceiling_gflops("NVIDIA L40S") == multiple * 362e3  # not the L4's
    assert validate.gpu_ceiling_gflops("NVIDIA GeForce RTX 4090") == multiple * 330e3
    assert validate.gpu_ceiling_gflops("Mystery Accelerator 9000") is None
    assert validate.gpu_ceiling_gflops("") is None
    folder = folder_of(runs)
    original = (folder / schema.SUMMARY_FILE).read_text()
    for gpu, gflops, refused in (("NVIDIA H200", 2e6, True), ("NVIDIA H200", 6.3e4, False),
                                 ("Mystery Accelerator 9000", 2e6, False)):
        (folder / schema.SUMMARY_FILE).write_text(original)
        set_value(folder, "params.device", "cuda")
        set_value(folder, "env.gpu_name", gpu)
        set_value(folder, "results.achieved_gflops", gflops)
        words = (f"results.achieved_gflops is {gflops:g} GFLOP/s, above 1.4835e+06 GFLOP/s, "
                 "1.5x the datasheet peak of the NVIDIA H200")
        assert (words in validate.read_cell(folder).why()) is refused, (gpu, gflops)
    aggregate.aggregate(study, tmp_path)
    with (tmp_path / "summary.csv").open(newline="", encoding="utf-8") as handle:
        row = next(csv.DictReader(handle))
    row.update(device="cuda", gpu_name="NVIDIA H200", limit_gflops="5e6")
    assert any(p.startswith("limit_gflops is 5e+06 GFLOP/s, above 1.4835e+06 GFLOP/s, 1.5x "
                            "the datasheet peak of the NVIDIA H200")
               for p in rows.row_problems("summary", row))
    row.update(gpu_name="Mystery Accelerator 9000")
    assert not any("datasheet" in p for p in rows.row_problems("summary", row))


def test_loads_strict_names_the_token_and_where():
    """The strict JSON reader of manifests and summaries names the path of a bad token."""
    with pytest.raises(ValueError, match=r"files\.a\.bytes is NaN, which is not JSON"):
        validate.loads_strict('{"files": {"a": {"bytes": NaN}}}')
    with pytest.raises(ValueError, match=r"x\[1\] is 1e999"):
        validate.loads_strict('{"x": [1, 1e999]}')
    assert validate.loads_strict('{"x": [1, 2.5e3]}') == {"x": [1, 2500.0]}


def test_a_cell_file_that_is_a_symbolic_link_is_never_followed(runs, tmp_path):
    """A summary.json linked to a file elsewhere (a secret, another cell) cannot be placed:
    the aggregate refuses naming it; an epochs.csv linked elsewhere makes the cell invalid.
    Neither link is followed, and nothing of its target is quoted."""
    folder = folder_of(runs)
    secret = tmp_path / "secret"
    secret.write_text("SECRET-LINE\n")
    summary = folder / schema.SUMMARY_FILE
    target = tmp_path / "summary.json"
    summary.rename(target)
    summary.symlink_to(target)
    with pytest.raises(aggregate.AggregateError) as info:
        aggregate.aggregate(runs, tmp_path / "out")
    assert f"cannot read {summary}: a symbolic link, which is not followed" in str(info.value)
    summary.unlink()
    target.rename(summary)
    epochs = folder / schema.EPOCHS_FILE
    epochs.unlink()
    epochs.symlink_to(secret)
    cell = validate.read_cell(folder)
    assert cell.table_status == "failed"
    assert "cannot read epochs.csv: a symbolic link, which is not followed" in cell.why()
    assert "SECRET" not in cell.why()
