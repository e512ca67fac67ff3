"""Tests of mnistbench.results.aggregate: tidy tables from the cells of a study."""

from __future__ import annotations

import csv
import errno
import json
import shutil
from pathlib import Path

import pytest

from mnistbench import cli
from mnistbench.core import atomic, schema
from mnistbench.report import blog
from mnistbench.results import aggregate
from tests.fakes import cell_id, make_study

SMALL = {"repeats": 2, "batch_sizes": (64, 1024), "convergence_epochs": 3}


def _rows(path: Path) -> list[dict]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def _header(path: Path) -> list[str]:
    with path.open(encoding="utf-8", newline="") as handle:
        return next(csv.reader(handle))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """A small study with one GPU machine."""
    root = tmp_path_factory.mktemp("study") / "runs"
    make_study(root, **SMALL)
    return root


@pytest.fixture
def runs_copy(runs, tmp_path) -> Path:
    """A private copy of the small study that a test may damage."""
    return Path(shutil.copytree(runs, tmp_path / "runs"))


def test_writes_the_four_tables_with_schema_columns(runs, tmp_path):
    """summary.csv, epochs.csv, resources.csv and columns.csv appear with the schema's columns."""
    paths = aggregate.aggregate(runs, tmp_path / "out")
    assert [p.name for p in paths] == ["summary.csv", "epochs.csv", "resources.csv",
                                       "columns.csv"]
    assert _header(paths[0]) == schema.summary_columns()
    assert _header(paths[1]) == [*schema.ID_COLUMNS, *aggregate.KEY_PARAMS,
                                 *schema.EPOCH_COLUMNS]
    assert _header(paths[2]) == [*schema.ID_COLUMNS, *aggregate.KEY_PARAMS,
                                 *schema.RESOURCE_COLUMNS]
    cells = sorted(p.parent for p in runs.glob("*/*/*/summary.json"))
    assert len(_rows(paths[0])) == len(cells)


def test_summary_row_flattens_every_block(runs, tmp_path):
    """One summary row carries the cell's params, results, timing and env values."""
    aggregate.aggregate(runs, tmp_path)
    cid = cell_id("cuda", "fp32", "resident", 128, 1)
    source = json.loads((runs / "alpha" / "convergence" / cid / "summary.json").read_text())
    row = next(r for r in _rows(tmp_path / "summary.csv") if r["cell"] == cid)
    assert row["status"] == "ok" and row["experiment"] == "convergence"
    assert float(row["epoch_s_median"]) == pytest.approx(source["results"]["epoch_s_median"])
    assert float(row["timed_s"]) == pytest.approx(source["timing"]["timed_s"])
    assert row["gpu_name"] == source["env"]["gpu_name"]
    assert row["batch_size"] == "128" and row["repeat"] == "1"


def test_epoch_rows_carry_key_params(runs, tmp_path):
    """Each epoch row has the cell's id and key params in front, one row per timed epoch."""
    aggregate.aggregate(runs, tmp_path)
    rows = _rows(tmp_path / "epochs.csv")
    cid = cell_id("cpu", "fp32", "dataloader", 128, 0)
    mine = [r for r in rows if r["cell"] == cid and r["experiment"] == "convergence"]
    assert [r["epoch"] for r in mine] == ["1", "2", "3"]
    assert {(r["device"], r["precision"], r["loader"], r["batch_size"], r["repeat"])
            for r in mine} == {("cpu", "fp32", "dataloader", "128", "0")}
    resources = [r for r in _rows(tmp_path / "resources.csv") if r["cell"] == cid]
    assert resources and {r["env"] for r in resources} == {"alpha"}


def test_columns_csv_gives_every_unit(runs, tmp_path):
    """columns.csv lists every column of the three tables with the schema's unit."""
    aggregate.aggregate(runs, tmp_path)
    rows = _rows(tmp_path / "columns.csv")
    by_file = {}
    for r in rows:
        by_file.setdefault(r["file"], {})[r["name"]] = r
    assert list(by_file["summary.csv"]) == schema.summary_columns()
    assert list(by_file["epochs.csv"]) == aggregate.epoch_columns()
    assert list(by_file["resources.csv"]) == aggregate.resource_columns()
    assert by_file["summary.csv"]["samples_per_s"]["unit"] == "samples/s"
    assert by_file["epochs.csv"]["epoch_s"]["unit"] == "s"
    assert by_file["resources.csv"]["rss_mb"]["unit"] == "MiB"
    assert all(r["description"] for r in rows)


def test_non_ok_cells_keep_status_reason_and_empty_results(tmp_path):
    """Failed, oom and unavailable cells become rows with their reason and empty results."""
    runs = tmp_path / "runs"
    make_study(runs, gpu=False, experiments=("sweep",), repeats=1, batch_sizes=(64,),
               overrides={cell_id("cpu", "fp32", "resident", 64, 0): ("oom", "out of memory"),
                          cell_id("cpu", "bf16", "resident", 64, 0): ("failed", "boom")})
    aggregate.aggregate(runs, tmp_path / "out")
    rows = {r["cell"]: r for r in _rows(tmp_path / "out" / "summary.csv")}
    assert rows[cell_id("cpu", "fp32", "resident", 64, 0)]["status"] == "oom"
    assert rows[cell_id("cpu", "bf16", "resident", 64, 0)]["reason"] == "boom"
    gpu = rows[cell_id("cuda", "fp16", "dataloader", 64, 0)]
    assert gpu["status"] == "unavailable" and "CUDA" in gpu["reason"]
    assert gpu["epoch_s_median"] == "" and gpu["samples_per_s"] == ""
    epoch_cells = {r["cell"] for r in _rows(tmp_path / "out" / "epochs.csv")}
    assert cell_id("cpu", "fp32", "resident", 64, 0) not in epoch_cells
    assert cell_id("cpu", "fp32", "dataloader", 64, 0) in epoch_cells


def test_incomplete_cell_is_skipped_with_a_warning(runs_copy, tmp_path, capsys):
    """A cell folder without summary.json is skipped and named on stderr."""
    victim = runs_copy / "alpha" / "sweep" / cell_id("cpu", "fp32", "resident", 64, 0)
    (victim / "summary.json").unlink()
    aggregate.aggregate(runs_copy, tmp_path / "out")
    assert "skipping incomplete cell" in capsys.readouterr().err
    cells = {r["cell"] for r in _rows(tmp_path / "out" / "summary.csv")}
    assert victim.name not in cells and len(cells) > 10


def test_corrupt_summary_names_the_file_and_writes_nothing(runs_copy, tmp_path):
    """A truncated summary.json is an error naming the file and the fix; no table is written."""
    victim = runs_copy / "alpha" / "sweep" / cell_id("cuda", "bf16", "dataloader", 1024, 1)
    text = (victim / "summary.json").read_text()
    (victim / "summary.json").write_text(text[: len(text) // 2])
    with pytest.raises(aggregate.AggregateError) as info:
        aggregate.aggregate(runs_copy, tmp_path / "out")
    message = str(info.value)
    assert str(victim / "summary.json") in message and "delete that cell folder" in message
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def _edit_summary(folder: Path, edit) -> Path:
    path = folder / "summary.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    return path


def test_schema_version_mismatch_is_explained(runs_copy, tmp_path):
    """A summary from another schema version is rejected, naming both versions."""
    folder = runs_copy / "alpha" / "convergence" / cell_id("cpu", "fp32", "resident", 128, 0)
    path = _edit_summary(folder, lambda d: d.update(schema_version=99))
    with pytest.raises(aggregate.AggregateError, match="schema_version 99") as info:
        aggregate.aggregate(runs_copy, tmp_path / "out")
    assert str(path) in str(info.value)
    assert f"schema versions 1 to {schema.SCHEMA_VERSION}" in str(info.value)


def test_older_schema_version_reads_later_fields_as_empty(runs_copy, tmp_path):
    """A version-1 summary (written before time_limit existed) merges with that field empty,
    while a current-version summary lacking it is rejected."""
    assert schema.ADDED_IN["time_limit"] > 1
    folder = runs_copy / "alpha" / "convergence" / cell_id("cpu", "fp32", "resident", 128, 0)
    _edit_summary(folder, lambda d: (d.update(schema_version=1), d["params"].pop("time_limit")))
    aggregate.aggregate(runs_copy, tmp_path / "out")
    rows = [r for r in _rows(tmp_path / "out" / "summary.csv")
            if r["cell"] == folder.name and r["env"] == "alpha"]
    assert len(rows) == 1 and rows[0]["time_limit"] == "" and rows[0]["status"] == "ok"
    _edit_summary(folder, lambda d: d.update(schema_version=schema.SCHEMA_VERSION))
    with pytest.raises(aggregate.AggregateError, match="params lacks time_limit"):
        aggregate.aggregate(runs_copy, tmp_path / "out2")


def test_unknown_and_missing_fields_are_rejected(runs_copy, tmp_path):
    """A field the schema does not know, or a missing param, names the key and the file."""
    folder = runs_copy / "alpha" / "sweep" / cell_id("cpu", "bf16", "resident", 64, 0)
    _edit_summary(folder, lambda d: d["results"].update(flops=1.0))
    with pytest.raises(aggregate.AggregateError, match="unknown results key"):
        aggregate.aggregate(runs_copy, tmp_path / "out")
    _edit_summary(folder, lambda d: (d["results"].pop("flops"), d["params"].pop("loader")))
    with pytest.raises(aggregate.AggregateError, match="params lacks loader"):
        aggregate.aggregate(runs_copy, tmp_path / "out")


def test_bad_status_is_rejected(runs_copy, tmp_path):
    """A status outside schema.STATUSES is an error listing the allowed ones."""
    folder = runs_copy / "alpha" / "sweep" / cell_id("cpu", "bf16", "resident", 64, 0)
    _edit_summary(folder, lambda d: d.update(status="crashed"))
    with pytest.raises(aggregate.AggregateError, match="ok, oom, unavailable, failed"):
        aggregate.aggregate(runs_copy, tmp_path / "out")


def test_cell_in_the_wrong_folder_is_rejected(runs_copy, tmp_path):
    """Params that disagree with the RUNS/ENV/EXPERIMENT/CELL folder are an error."""
    folder = runs_copy / "alpha" / "sweep" / cell_id("cpu", "bf16", "resident", 64, 0)
    _edit_summary(folder, lambda d: d["params"].update(env="elsewhere"))
    with pytest.raises(aggregate.AggregateError, match="lives in folder 'alpha'"):
        aggregate.aggregate(runs_copy, tmp_path / "out")


def _invalid_row(runs: Path, out: Path, folder: Path) -> dict:
    """Aggregate ``runs`` and return the summary row of ``folder``'s cell, having checked
    that it is filed as failed with an invalid-result reason and has no epoch or resource
    rows (an invalid cell is visible but never a finding)."""
    aggregate.aggregate(runs, out)
    env, experiment, cell = folder.parts[-3:]
    rows = [r for r in _rows(out / "summary.csv")
            if (r["env"], r["experiment"], r["cell"]) == (env, experiment, cell)]
    assert len(rows) == 1
    row = rows[0]
    assert row["status"] == "failed" and row["reason"].startswith("invalid result")
    assert "delete that cell folder" in row["reason"]
    assert all(row[k] == "" for k in schema.RESULT_FIELDS)
    for table in ("epochs.csv", "resources.csv"):
        assert cell not in {r["cell"] for r in _rows(out / table)
                            if (r["env"], r["experiment"]) == (env, experiment)}
    return row


def test_damaged_csv_header_names_the_file(runs_copy, tmp_path, capsys):
    """An epochs.csv whose header disagrees with the schema makes its cell invalid: a failed
    row whose reason names the file and the missing columns, warned about on stderr."""
    folder = runs_copy / "alpha" / "convergence" / cell_id("cuda", "fp32", "resident", 128, 0)
    (folder / "epochs.csv").write_text("epoch,seconds\n1,2.0\n")
    row = _invalid_row(runs_copy, tmp_path / "out", folder)
    assert "epochs.csv has an unexpected header (missing: steps" in row["reason"]
    assert "(recorded status ok)" in row["reason"]
    err = capsys.readouterr().err
    assert f"{folder} is invalid and kept out of every statistic" in err


def test_ok_cell_without_epochs_is_damaged(runs_copy, tmp_path):
    """An ok cell that lost its epochs.csv is invalid, not silently empty."""
    folder = runs_copy / "alpha" / "convergence" / cell_id("cpu", "fp32", "resident", 128, 1)
    (folder / "epochs.csv").unlink()
    row = _invalid_row(runs_copy, tmp_path / "out", folder)
    assert "epochs.csv is missing, but an ok cell has one" in row["reason"]


def test_empty_or_missing_runs_folder_is_explained(tmp_path):
    """An empty runs folder and a missing one are clear errors."""
    (tmp_path / "runs").mkdir()
    with pytest.raises(aggregate.AggregateError, match="nothing to aggregate"):
        aggregate.aggregate(tmp_path / "runs", tmp_path / "out")
    with pytest.raises(aggregate.AggregateError, match="does not exist"):
        aggregate.aggregate(tmp_path / "nope", tmp_path / "out")
    (tmp_path / "runs" / "a" / "sweep" / "c1").mkdir(parents=True)
    with pytest.raises(aggregate.AggregateError, match="all incomplete"):
        aggregate.aggregate(tmp_path / "runs", tmp_path / "out")


def test_results_from_two_machines_merge(tmp_path):
    """Copying another machine's runs/ENV folder in and rerunning gives one combined table."""
    here, there = tmp_path / "here", tmp_path / "there"
    make_study(here, envs=("alpha",), experiments=("convergence",), repeats=2)
    make_study(there, envs=("alpha", "beta"), experiments=("convergence",), repeats=2,
               gpu={"beta": False})
    shutil.rmtree(there / "alpha")
    aggregate.aggregate(here, tmp_path / "out")
    alone = len(_rows(tmp_path / "out" / "summary.csv"))
    shutil.copytree(there / "beta", here / "beta")
    aggregate.aggregate(here, tmp_path / "out")
    rows = _rows(tmp_path / "out" / "summary.csv")
    assert len(rows) == 2 * alone
    assert {r["env"] for r in rows} == {"alpha", "beta"}
    beta_gpu = [r for r in rows if r["env"] == "beta" and r["device"] == "cuda"]
    assert {r["status"] for r in beta_gpu} == {"unavailable"}
    first = (tmp_path / "out" / "summary.csv").read_bytes()
    aggregate.aggregate(here, tmp_path / "out")
    assert (tmp_path / "out" / "summary.csv").read_bytes() == first


def test_load_tables_keeps_text_as_text(tmp_path):
    """Host names such as "NA" stay text and result columns are numeric when read back."""
    runs = tmp_path / "runs"
    make_study(runs, experiments=("convergence",), repeats=1, hostnames={"alpha": "NA"})
    aggregate.aggregate(runs, tmp_path)
    tables = aggregate.load_tables(tmp_path)
    assert set(tables.summary["hostname"]) == {"NA"}
    assert tables.summary["epoch_s_median"].dtype.kind == "f"
    assert tables.epochs["test_acc"].dtype.kind == "f"
    assert set(tables.resources["stage"]) <= {"setup", "warmup", "train", "done"}
    (tmp_path / "epochs.csv").unlink()
    with pytest.raises(aggregate.AggregateError, match="mnistbench aggregate"):
        aggregate.load_tables(tmp_path)


def test_blog_cells_fall_back_to_the_sweep(tmp_path):
    """Without convergence cells the headline uses sweep cells at batch 128, fp32."""
    runs = tmp_path / "runs"
    make_study(runs, experiments=("sweep",), repeats=1, batch_sizes=(64, 128))
    aggregate.aggregate(runs, tmp_path)
    cells, source = blog.blog_cells(aggregate.load_tables(tmp_path).summary)
    assert "sweep" in source
    assert set(cells["batch_size"]) == {128} and set(cells["precision"]) == {"fp32"}


def test_cli_aggregate_reports_errors_as_one_paragraph(runs, tmp_path, capsys):
    """`mnistbench aggregate` prints the written paths, and exits 1 with the error otherwise."""
    assert cli.main(["aggregate", str(runs), "--out-dir", str(tmp_path / "out")]) == 0
    assert "summary.csv" in capsys.readouterr().out
    assert cli.main(["aggregate", str(tmp_path / "missing")]) == 1
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_500_cells_aggregate(tmp_path):
    """A 500-cell study aggregates to 500 rows (in how many seconds, against the 10 s target:
    benchmarks/bench_report.py)."""
    runs = tmp_path / "runs"
    cells = make_study(runs, repeats=5)
    assert len(cells) == 500
    aggregate.aggregate(runs, tmp_path / "out")
    assert len(_rows(tmp_path / "out" / "summary.csv")) == 500


@pytest.mark.parametrize(("key", "value"), [
    ("precision", None), ("loader", ""), ("device", None), ("device", "  "),
    ("batch_size", None), ("repeat", "0"),
])
def test_cell_without_a_key_param_is_rejected_naming_the_file(runs_copy, tmp_path, key,
                                                              value):
    """A cell whose device, precision, loader, batch size or repeat is null or empty (which
    would crash the report's charts) is an error naming its summary.json and the key."""
    folder = runs_copy / "alpha" / "sweep" / cell_id("cpu", "bf16", "resident", 64, 0)
    path = _edit_summary(folder, lambda d: d["params"].update({key: value}))
    with pytest.raises(aggregate.AggregateError) as info:
        aggregate.aggregate(runs_copy, tmp_path / "out")
    message = str(info.value)
    assert message.startswith(f"{path}: params.{key} is {value!r}, but every cell needs ")
    assert "delete that cell folder" in message and "\n" not in message
    assert not (tmp_path / "out").exists()


def _denied(*args, dir=None, **kwargs):
    """What mkstemp does in a read-only folder (root ignores permissions, so tests fake it)."""
    raise PermissionError(errno.EACCES, "Permission denied", str(dir))


@pytest.mark.parametrize("fault", ["read-only", "full"])
def test_unwritable_out_dir_is_one_paragraph_and_keeps_the_old_tables(runs, tmp_path,
                                                                      monkeypatch, capsys,
                                                                      fault):
    """A read-only or full --out-dir exits 1 with one paragraph naming the folder and the
    fix; the tables already there are left whole and no temporary file remains."""
    out = tmp_path / "out"
    aggregate.aggregate(runs, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    if fault == "read-only":
        monkeypatch.setattr(atomic.tempfile, "mkstemp", _denied)
    else:
        real = aggregate.write_rows

        def full(path, columns, rows):
            if "resources" in path.name:  # the third of four files
                path.write_text("partial")
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
            return real(path, columns, rows)

        monkeypatch.setattr(aggregate, "write_rows", full)
    capsys.readouterr()
    assert cli.main(["aggregate", str(runs), "--out-dir", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"mnistbench aggregate: error: cannot write the aggregated tables into {out}: ")
    fix = ("Make the folder writable" if fault == "read-only"
           else "Free space on that disk, or pass --out-dir")
    assert fix in err[0] and "was written" in err[0]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_new_out_dir_that_cannot_be_filled_is_removed(runs, tmp_path, monkeypatch, capsys):
    """A full disk under a new --out-dir leaves neither tables nor the folders it made."""
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.tempfile, "mkstemp", full)
    with pytest.raises(aggregate.AggregateError, match="No space left on device"):
        aggregate.aggregate(runs, tmp_path / "new" / "out")
    assert list(tmp_path.iterdir()) == []


def test_out_dir_under_a_file_names_the_file(runs, tmp_path):
    """An --out-dir whose parent is a file is an error naming that file."""
    (tmp_path / "file").write_text("keep")
    with pytest.raises(aggregate.AggregateError) as info:
        aggregate.aggregate(runs, tmp_path / "file" / "out")
    assert f"{tmp_path / 'file'} is a file, not a folder. Pass --out-dir a folder" in str(
        info.value)
    assert (tmp_path / "file").read_text() == "keep"


def test_load_tables_rejects_a_cell_without_precision(runs, tmp_path):
    """A summary.csv row with an empty precision (an edited table) is an error naming the
    file and the cell, not a TypeError in the charts."""
    aggregate.aggregate(runs, tmp_path)
    rows = _rows(tmp_path / "summary.csv")
    rows[3]["precision"] = ""
    with (tmp_path / "summary.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(aggregate.AggregateError) as info:
        aggregate.load_tables(tmp_path)
    cell = "/".join(rows[3][k] for k in schema.ID_COLUMNS)
    assert str(info.value).startswith(f"{tmp_path / 'summary.csv'} line 5 (cell {cell}): "
                                      "precision is empty")
    assert "run `mnistbench aggregate RUNS --out-dir FOLDER` again" in str(info.value)


# --------------------------------------------------------------------------- hardware labels

@pytest.mark.parametrize(("row", "label"), [
    ({"device": "cpu", "cpu_model": "AMD EPYC 7B13", "cpu_capability": "AVX2",
      "cpu_flags": "avx2"}, "AMD EPYC 7B13 · AVX2"),
    ({"device": "cpu", "cpu_model": "Intel Xeon Platinum 8480+", "cpu_capability": "AVX512",
      "cpu_flags": "avx2 avx512f avx512_bf16 amx_tile amx_bf16"},
     "Intel Xeon Platinum 8480+ · AVX512 (avx512_bf16, amx_bf16)"),
    ({"device": "cpu", "cpu_model": "Neoverse-V2", "cpu_capability": "SVE256",
      "cpu_flags": "sve sve2 bf16"}, "Neoverse-V2 · SVE256 (bf16)"),
    ({"device": "cpu", "cpu_model": "Old CPU"}, "Old CPU"),
    ({"device": "cpu", "cpu_model": float("nan")}, "unknown CPU"),
    ({"device": "cuda", "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_backend": "cuda",
      "cpu_capability": "AVX512"}, "NVIDIA H100 80GB HBM3 · CUDA"),
    ({"device": "cuda", "gpu_name": "AMD Instinct MI300X", "gpu_backend": "rocm"},
     "AMD Instinct MI300X · ROCm/HIP"),
    ({"device": "xpu", "gpu_name": "Intel(R) Data Center GPU Max 1550", "gpu_backend": "xpu"},
     "Intel(R) Data Center GPU Max 1550 · Intel XPU"),
    ({"device": "mps", "gpu_name": "", "gpu_backend": ""}, "Apple MPS (no device)"),
])
def test_hardware_label(row, label):
    """A cpu cell is labelled by CPU model, ISA and bf16 flags; an accelerator cell by GPU and
    backend (ROCm/HIP for a cuda cell on AMD); older summaries by the model alone."""
    assert aggregate.hardware_label(row) == label


@pytest.mark.slow
def test_same_cpu_model_with_another_isa_is_other_hardware(tmp_path):
    """Two environments that differ only in ISA (the same CPU model name, one with AVX512 and
    AMX) get different hardware labels in summary.csv and show side by side in the report,
    each with its own rows: never pooled."""
    from mnistbench.report import render as report
    from tests.fakes import MACHINES

    base = MACHINES[1]
    machines = {"avx2": base,
                "avx512": base.isa("AVX512", "avx2 avx512f avx512_bf16 amx_tile amx_bf16")}
    runs = tmp_path / "runs"
    make_study(runs, envs=tuple(machines), machines=machines, gpu=False, devices=("cpu",),
               experiments=("convergence",), repeats=2, convergence_epochs=2,
               hostnames={"avx2": "node", "avx512": "node"})
    aggregate.aggregate(runs, tmp_path / "results")
    rows = _rows(tmp_path / "results" / "summary.csv")
    labels = {r["env"]: {r["hardware"]} for r in rows}
    assert labels == {"avx2": {f"{base.cpu_model} · AVX2"},
                      "avx512": {f"{base.cpu_model} · AVX512 (avx512_bf16, amx_bf16)"}}
    bf16 = {r["env"]: r["cpu_bf16"] for r in rows}
    assert bf16 == {"avx2": "emulated", "avx512": "native"}
    tables = aggregate.load_tables(tmp_path / "results")
    assert tables.summary.groupby("hardware").size().to_dict() == {
        next(iter(labels["avx2"])): 4, next(iter(labels["avx512"])): 4}
    html = report.render_report(tmp_path / "results",
                                tmp_path / "report" / "index.html").read_text()
    for (label,) in labels.values():
        assert label in html


def test_a_table_path_that_is_a_fifo_is_refused_and_kept(runs, tmp_path, capsys):
    """An --out-dir whose summary.csv is a FIFO (or any non-regular file) exits 1 naming it;
    the FIFO stays and no table or staged file is written."""
    import os
    import stat

    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "summary.csv")
    assert cli.main(["aggregate", str(runs), "--out-dir", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"cannot write the aggregated tables to {out / 'summary.csv'}: it is a FIFO" in err
    assert stat.S_ISFIFO(os.lstat(out / "summary.csv").st_mode)
    assert [p.name for p in out.iterdir()] == ["summary.csv"]


def test_a_file_named_for_a_folder_or_a_folder_for_a_file_says_so(tmp_path, capsys):
    """Weak case of the sweep of issue 41: `aggregate notes.txt` said "runs folder notes.txt
    does not exist", `table --results R` and `report --results R` with R/summary.csv a
    folder said it "does not exist" (it does: it is a folder), and a dangling link read as
    missing. Each now says what is there, with the same fix."""
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for runs, words in ((notes, "is a regular file, not a folder"),
                        (tmp_path / "dangling", "is a symbolic link to nothing"),
                        (tmp_path / "nowhere", "does not exist")):
        assert cli.main(["aggregate", str(runs), "--out-dir", str(tmp_path / "out")]) == 1
        err = capsys.readouterr().err
        assert f"runs folder {runs} {words}. Run the study first" in err, err
    results = tmp_path / "results"
    (results / "summary.csv").mkdir(parents=True)
    with pytest.raises(aggregate.AggregateError) as info:
        aggregate.load_tables(results)
    assert f"cannot read {results / 'summary.csv'}: not a regular file but a folder" in str(
        info.value)
    assert cli.main(["table", "--results", str(results)]) == 1
    err = capsys.readouterr().err
    assert f"cannot read {results / 'summary.csv'}: not a regular file but a folder" in err, err
    assert notes.read_text() == "mine" and not (tmp_path / "out").exists()
