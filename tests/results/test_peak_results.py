"""Tests of a study's measured limits as results (runs/{env}/peak/{device}.json, the workflow's
peak step): the strict reader (mnistbench.results.validate.read_peak), the aggregate's join of
every ok cell with its environment's limit of its device (summary.csv limit_*), and the
limits travelling with their environment through ``pack`` and ``unpack``."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from mnistbench.core import schema
from mnistbench.results import aggregate, archive, validate
from tests.fakes import make_study

ENV = "alpha"

#: A measured limit as `mnistbench peak` writes it (mnistbench.measure.peak.measure).
PEAK = {
    "status": "ok", "reason": "", "device": "cpu", "threads": 2, "torch": "2.6.0",
    "source": "measured: each kernel timed here after warm-up (mnistbench.measure.peak)",
    "rows": [
        {"kernel": "matmul", "precision": "fp32", "shape": "1024x1024 @ 1024x1024",
         "gflops": 200.0, "calls": 32, "seconds": 0.31},
        {"kernel": "conv2", "precision": "fp32",
         "shape": "batch 128, 32->64 ch, 3x3 on 26x26", "gflops": 250.0, "calls": 36,
         "seconds": 0.31},
        {"kernel": "matmul", "precision": "bf16", "shape": "1024x1024 @ 1024x1024",
         "gflops": 400.0, "calls": 68, "seconds": 0.31},
    ],
}
UNAVAILABLE = {"status": "unavailable", "reason": "no CUDA GPU is visible to torch",
               "device": "cuda", "threads": None, "torch": None,
               "source": "not measured: unavailable", "rows": []}


def write_peak(runs: Path, record: dict, env: str = ENV, name: str | None = None) -> Path:
    """``record`` as runs/{env}/peak/{its device}.json (or ``name``)."""
    path = runs / env / schema.PEAK_DIR / (name or schema.peak_file(record["device"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record), encoding="utf-8")
    return path


def small_study(runs: Path, env: str = ENV) -> None:
    """A fake study: cpu and cuda cells (cuda unavailable), fp32 and bf16, one repeat."""
    make_study(runs, envs=(env,), gpu=False, devices=("cpu", "cuda"),
               precisions=("fp32", "bf16"), loaders=("resident",), batch_sizes=(64,),
               repeats=1, convergence_epochs=2)


def summary_rows(runs: Path, out: Path) -> dict[tuple[str, str, str], dict]:
    """summary.csv of aggregating ``runs``, by (env, experiment, cell), as load_tables reads
    it (numbers as numbers, empty as None)."""
    aggregate.aggregate(runs, out)
    frame = aggregate.load_tables(out).summary
    rows = frame.astype(object).where(frame.notna(), None).to_dict("records")
    return {(r["env"], r["experiment"], r["cell"]): r for r in rows}


# --------------------------------------------------------------------------- the join
def test_each_ok_cell_is_set_against_its_devices_limit_at_its_precision(tmp_path):
    """An ok cpu cell gets the highest GFLOP/s measured at its precision, the kernel that gave
    it, its achieved share in % and the file it came from; cuda cells (unavailable, with an
    unavailable limit) get none; the columns are described with their units."""
    runs = tmp_path / "runs"
    small_study(runs)
    write_peak(runs, PEAK)
    write_peak(runs, UNAVAILABLE)
    rows = summary_rows(runs, tmp_path / "out")
    fp32 = rows[(ENV, "sweep", "cpu-fp32-resident-b64-r0")]
    assert fp32["limit_gflops"] == 250.0
    assert fp32["limit_kernel"] == "conv2 batch 128, 32->64 ch, 3x3 on 26x26"
    assert fp32["limit_share_pct"] == pytest.approx(fp32["achieved_gflops"] / 250.0 * 100)
    assert fp32["limit_source"] == f"measured: runs/{ENV}/peak/cpu.json, 2 threads"
    bf16 = rows[(ENV, "sweep", "cpu-bf16-resident-b64-r0")]
    assert (bf16["limit_gflops"], bf16["limit_kernel"]) == (400.0, "matmul 1024x1024 @ "
                                                                     "1024x1024")
    for key, row in rows.items():
        if row["device"] == "cuda":
            assert row["status"] == "unavailable"
            assert all(row[c] is None for c in schema.LIMIT_FIELDS), key
    columns = {r["name"]: r for r in aggregate.column_rows() if r["file"] == "summary.csv"}
    assert (columns["limit_gflops"]["unit"], columns["limit_share_pct"]["unit"]) == (
        "GFLOP/s", "%")
    assert schema.summary_columns()[-len(schema.LIMIT_FIELDS):] == list(schema.LIMIT_FIELDS)


def test_no_limit_a_precision_not_measured_or_another_environment_leaves_them_empty(tmp_path):
    """A cell without a peak file, at a precision its limit lacks, or of another environment
    than the limit's has its limit columns empty, and the aggregate succeeds."""
    runs = tmp_path / "runs"
    small_study(runs)
    small_study(runs, env="beta")
    fp32_only = copy.deepcopy(PEAK)
    fp32_only["rows"] = fp32_only["rows"][:2]
    write_peak(runs, fp32_only)
    rows = summary_rows(runs, tmp_path / "out")
    assert rows[(ENV, "sweep", "cpu-fp32-resident-b64-r0")]["limit_gflops"] == 250.0
    assert rows[(ENV, "sweep", "cpu-bf16-resident-b64-r0")]["limit_gflops"] is None
    assert all(r["limit_source"] is None for k, r in rows.items() if k[0] == "beta")
    assert all(r["limit_gflops"] is None for r in summary_rows(
        _without_peaks(runs, tmp_path), tmp_path / "out2").values())


def _without_peaks(runs: Path, tmp_path: Path) -> Path:
    import shutil

    copy_ = Path(shutil.copytree(runs, tmp_path / "bare"))
    for folder in copy_.glob(f"*/{schema.PEAK_DIR}"):
        shutil.rmtree(folder)
    return copy_


def test_a_cell_without_an_achieved_figure_gets_the_limit_but_no_share():
    peak = validate.Peak(path=Path("p"), status="ok", reason="", device="cpu", threads=1,
                         torch="2.6", source="measured", rows=PEAK["rows"])
    row = {"env": ENV, "device": "cpu", "precision": "fp32", "status": "ok",
           "achieved_gflops": None}
    got = aggregate.limit_columns(row, {(ENV, "cpu"): peak})
    assert got == {"limit_gflops": 250.0,
                   "limit_kernel": "conv2 batch 128, 32->64 ch, 3x3 on 26x26",
                   "limit_share_pct": None,
                   "limit_source": f"measured: runs/{ENV}/peak/cpu.json, 1 thread",
                   "limit_note": None}
    assert aggregate.limit_columns({**row, "status": "failed"}, {(ENV, "cpu"): peak}) == (
        dict.fromkeys(schema.LIMIT_FIELDS))


@pytest.mark.parametrize(("math", "says"), [
    ({"math_tf32_cudnn": True, "math_tf32_matmul": False}, "TF32 was on in an fp32 cell"),
    ({"math_tf32_cudnn": False, "math_conv_kernels":
      "sm90_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc"},
     "its convolution kernels ran TF32"),
    ({"math_tf32_cudnn": False, "math_conv_kernels": "winograd_nonfused_fprop; sgemm_128x64"},
     "Winograd or FFT convolutions"),
    ({"math_tf32_cudnn": False, "math_conv_kernels": "cudnn_conv_fprop_direct"},
     "the cell recorded no TF32 nor Winograd/FFT"),
    ({}, "recorded no math settings (older schema)"),
])
def test_a_cell_past_its_limit_is_flagged_with_the_reason_it_recorded(math, says):
    """A share above 100 % carries limit_note: past the limit, and why, from the math the
    cell recorded; at or below 100 % no note."""
    peak = validate.Peak(path=Path("p"), status="ok", reason="", device="cpu", threads=1,
                         torch="2.6", source="measured", rows=PEAK["rows"])
    row = {"env": ENV, "device": "cpu", "precision": "fp32", "status": "ok",
           "achieved_gflops": 300.0, **math}
    note = aggregate.limit_columns(row, {(ENV, "cpu"): peak})["limit_note"]
    assert note.startswith("past 100 % of the measured limit: ") and says in note
    below = {**row, "achieved_gflops": 250.0}
    assert aggregate.limit_columns(below, {(ENV, "cpu"): peak})["limit_note"] is None


def test_a_table_written_before_the_limit_columns_reads_them_empty(tmp_path):
    """summary.csv of an older mnistbench, without limit_*, loads with them empty."""
    runs = tmp_path / "runs"
    small_study(runs)
    aggregate.aggregate(runs, tmp_path / "out")
    path = tmp_path / "out" / "summary.csv"
    lines = path.read_text().splitlines()
    width = len(schema.LIMIT_FIELDS)
    path.write_text("\n".join(",".join(line.split(",")[:-width]) for line in lines) + "\n")
    summary = aggregate.load_tables(tmp_path / "out").summary
    assert summary["limit_gflops"].isna().all()


# --------------------------------------------------------------------------- strict reading
def _changed(**changes) -> dict:
    record = copy.deepcopy(PEAK)
    for key, value in changes.items():
        if key.startswith("row_"):
            record["rows"][0][key[4:]] = value
        else:
            record[key] = value
    return record


BAD = {
    "not json": ("{", "cannot read the measured limit"),
    "nan": ('{"gflops": NaN}', "which is not JSON"),
    "a list": ("[]", "not a JSON object but list"),
    "a key missing": (json.dumps({k: v for k, v in PEAK.items() if k != "torch"}),
                      "missing key(s) torch"),
    "an unknown key": (json.dumps({**PEAK, "peak": 1}), "unknown key(s) peak"),
    "an unknown status": (json.dumps(_changed(status="done")), "status is \"done\""),
    "another device": (json.dumps(_changed(device="cuda")), "the file's name says 'cpu'"),
    "a datasheet": (json.dumps(_changed(source="datasheet: 1 TFLOP/s")),
                    "never taken from a datasheet"),
    "no threads": (json.dumps(_changed(threads=0)), "threads is 0"),
    "no rows": (json.dumps(_changed(rows=[])), "status is ok but rows is empty"),
    "a negative rate": (json.dumps(_changed(row_gflops=-1.0)), "rows[0].gflops is -1.0"),
    "a boolean count": (json.dumps(_changed(row_calls=True)), "rows[0].calls is true"),
    "fp16 on a cpu": (json.dumps(_changed(row_precision="fp16")),
                      "rows[0].precision is \"fp16\", expected a precision cpu runs"),
    "a kernel and shape twice": (
        json.dumps(_changed(row_kernel="conv2", row_shape=PEAK["rows"][1]["shape"])),
        "times conv2 batch 128, 32->64 ch, 3x3 on 26x26 at fp32 again"),
    "an extra row key": (json.dumps({**PEAK, "rows": [{**PEAK["rows"][0], "x": 1}]}),
                         "rows[0] holds"),
    "unavailable with rows": (json.dumps({**UNAVAILABLE, "device": "cpu",
                                          "rows": PEAK["rows"]}), "expected none"),
    "a limit of 1e300 GFLOP/s": (json.dumps(_changed(row_gflops=1e300)),
                                 "rows[0].gflops is 1e+300, above 1e+07 GFLOP/s"),
    "a limit past what the CPU's cores can do": (
        json.dumps(_changed(row_gflops=5e5)),
        "gflops is 500000 GFLOP/s, above 266240 GFLOP/s, the most 20 logical CPU cores can do"),
    "nested 5000 deep": ("[" * 5000 + "]" * 5000, "nested deeper than 64 levels"),
    "failed without a reason": (json.dumps({**UNAVAILABLE, "device": "cpu",
                                            "status": "failed", "reason": ""}),
                                "a limit not measured says why"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_measured_limit_fails_the_aggregate_naming_the_file(tmp_path, case):
    """The aggregate refuses a limit that is not a record of the schema, naming the file, the
    field and the fix; no table is written."""
    text, words = BAD[case]
    runs = tmp_path / "runs"
    small_study(runs)
    path = runs / ENV / schema.PEAK_DIR / "cpu.json"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(aggregate.AggregateError) as caught:
        aggregate.aggregate(runs, tmp_path / "out")
    message = str(caught.value)
    assert str(path) in message and words in message, message
    assert "mnistbench peak" in message
    assert not (tmp_path / "out").exists()


def test_a_json_file_named_after_no_device_is_refused(tmp_path):
    runs = tmp_path / "runs"
    small_study(runs)
    write_peak(runs, PEAK, name="gpu.json")
    (runs / ENV / schema.PEAK_DIR / ".cpu.json.tmp").write_text("{")  # hidden: not read
    with pytest.raises(aggregate.AggregateError, match=r"gpu.json names none"):
        aggregate.aggregate(runs, tmp_path / "out")


def test_read_peak_reads_a_record_of_every_status(tmp_path):
    ok = validate.read_peak(write_peak(tmp_path, PEAK), "cpu")
    assert (ok.status, ok.threads, len(ok.rows)) == ("ok", 2, 3)
    assert ok.limit("bf16")["gflops"] == 400.0 and ok.limit("fp16") is None
    absent = validate.read_peak(write_peak(tmp_path, UNAVAILABLE), "cuda")
    assert absent.status == "unavailable" and absent.limit("fp32") is None
    assert set(validate.read_peaks(tmp_path)) == {(ENV, "cpu"), (ENV, "cuda")}
    assert validate.read_peaks(tmp_path / "none") == {}


# --------------------------------------------------------------------------- pack and unpack
def test_the_measured_limits_travel_with_their_environment(tmp_path):
    """pack carries runs/{env}/peak/*.json (listed in the manifest), unpack lands them byte
    for byte, and the other machine's aggregate joins them."""
    runs_a = tmp_path / "a" / "runs"
    small_study(runs_a)
    write_peak(runs_a, PEAK)
    write_peak(runs_a, UNAVAILABLE)
    (runs_a / ENV / schema.PEAK_DIR / "notes.txt").write_text("mine\n")
    logged: list[str] = []
    packed = archive.pack(runs_a, ENV, tmp_path / "a.tar.gz", log=logged.append)
    assert any("notes.txt" in line for line in logged)
    runs_b = tmp_path / "b" / "runs"
    result = archive.unpack(packed, runs_b)
    assert result.env == ENV
    peaks = runs_b / ENV / schema.PEAK_DIR
    assert sorted(p.name for p in peaks.iterdir()) == ["cpu.json", "cuda.json"]
    assert (peaks / "cpu.json").read_bytes() == (runs_a / ENV / "peak" / "cpu.json").read_bytes()
    rows = summary_rows(runs_b, tmp_path / "out")
    assert rows[(ENV, "sweep", "cpu-fp32-resident-b64-r0")]["limit_gflops"] == 250.0


def test_pack_and_unpack_refuse_a_bad_measured_limit(tmp_path):
    """A damaged limit is not packed; an archive whose limit is damaged (its manifest
    matching) or named after no device is refused, naming the member."""
    from tests.results.test_archive import member, read_members, write_members

    runs = tmp_path / "runs"
    small_study(runs)
    path = write_peak(runs, PEAK)
    good = archive.pack(runs, ENV, tmp_path / "good.tar.gz")
    path.write_text(json.dumps(_changed(row_gflops=0)))
    with pytest.raises(archive.ArchiveError, match=r"rows\[0\].gflops is 0"):
        archive.pack(runs, ENV, tmp_path / "bad.tar.gz")
    members = read_members(good)
    index = next(i for i, (m, _) in enumerate(members) if m.name.endswith("peak/cpu.json"))
    members[index] = (members[index][0], json.dumps(_changed(threads="two")).encode())
    with pytest.raises(archive.ArchiveError) as caught:
        archive.unpack(write_members(tmp_path / "t.tar.gz", members), tmp_path / "b")
    assert "a measured limit is refused" in str(caught.value)
    assert "threads is \"two\"" in str(caught.value)
    assert not (tmp_path / "b" / ENV).exists()
    # Bad case of issue 41: a limit of 1e300 GFLOP/s from an archive.
    members[index] = (members[index][0], json.dumps(_changed(row_gflops=1e300)).encode())
    with pytest.raises(archive.ArchiveError) as caught:
        archive.unpack(write_members(tmp_path / "e.tar.gz", members), tmp_path / "b")
    assert "rows[0].gflops is 1e+300, above 1e+07 GFLOP/s" in str(caught.value)
    assert not (tmp_path / "b" / ENV).exists()
    stray = write_members(tmp_path / "s.tar.gz",
                          [*read_members(good), member(f"runs/{ENV}/peak/gpu.json")])
    with pytest.raises(archive.ArchiveError, match=r"is not a file of the results"):
        archive.unpack(stray, tmp_path / "c")


def test_a_limit_that_cells_ran_far_past_is_refused_with_the_fix(tmp_path, capsys):
    """A measured limit that a cell's training beat by more than LIMIT_SLACK (here: timed far
    too low) is no limit: every cell of that env, device and precision gets no limit and no
    share, its limit_source says why and how to measure again, the aggregate warns; another
    precision's limit stays."""
    runs = tmp_path / "runs"
    small_study(runs)
    record = copy.deepcopy(PEAK)
    for row in record["rows"]:
        row["gflops"] = 1e-6 if row["precision"] == "fp32" else 1e4
    write_peak(runs, record)
    rows = summary_rows(runs, tmp_path / "out")
    fp32 = [r for r in rows.values() if r["device"] == "cpu" and r["precision"] == "fp32"]
    assert fp32 and all(r["limit_gflops"] is None and r["limit_share_pct"] is None
                        for r in fp32)
    assert all(r["limit_source"].startswith("refused: cell ") and "the fp32 limit" in r[
        "limit_source"] and f"runs/{ENV}/peak/cpu.json" in r["limit_source"]
        and "delete that file and rerun the study" in r["limit_source"] for r in fp32)
    bf16 = rows[(ENV, "sweep", "cpu-bf16-resident-b64-r0")]
    assert bf16["limit_gflops"] == 1e4 and bf16["limit_source"].startswith("measured: ")
    assert "is no limit" in capsys.readouterr().err


def test_a_peak_folder_linked_elsewhere_is_refused_never_walked_as_cells(tmp_path):
    """Weak case: runs/ENV/peak as a symbolic link to a folder of other cells was walked as
    cells of an experiment 'peak'; now the aggregate refuses naming the link and the fix, and
    writes nothing. A peak/ folder with sub-folders is never read as cells either."""
    runs = tmp_path / "runs"
    small_study(runs)
    elsewhere = tmp_path / "elsewhere"
    small_study(elsewhere, env="other")
    (runs / ENV / schema.PEAK_DIR).symlink_to(elsewhere / "other" / "sweep")
    with pytest.raises(aggregate.AggregateError) as info:
        aggregate.aggregate(runs, tmp_path / "out")
    message = str(info.value)
    assert f"{runs / ENV / schema.PEAK_DIR} is a symbolic link" in message
    assert "is not followed" in message or "does not follow" in message
    assert not (tmp_path / "out").exists()
    (runs / ENV / schema.PEAK_DIR).unlink()
    shutil.copytree(elsewhere / "other" / "sweep", runs / ENV / schema.PEAK_DIR)
    rows = summary_rows(runs, tmp_path / "out2")
    assert all(experiment != schema.PEAK_DIR for _, experiment, _ in rows)


def test_a_cell_folder_linked_elsewhere_is_refused(tmp_path):
    """A cell or experiment folder that is a symbolic link is refused naming it (a reader of
    runs/ reads only what lies in it); the fix is to move the folder in."""
    runs = tmp_path / "runs"
    small_study(runs)
    elsewhere = tmp_path / "elsewhere"
    (runs / ENV / "sweep").rename(elsewhere)
    (runs / ENV / "sweep").symlink_to(elsewhere)
    with pytest.raises(aggregate.AggregateError) as info:
        aggregate.aggregate(runs, tmp_path / "out")
    assert f"{runs / ENV / 'sweep'} is a symbolic link (to {elsewhere})" in str(info.value)
    assert "Move the folder it points to into its place" in str(info.value)


def test_a_limit_timed_at_several_shapes_per_kernel_is_read_and_the_best_taken(tmp_path):
    """mnistbench peak times each kernel at several shapes (issue 39): each shape is a row,
    and the limit of a precision is the best of them all."""
    bigger = {**PEAK["rows"][0], "shape": "2048x2048 @ 2048x2048", "gflops": 320.0}
    path = write_peak(tmp_path / "runs", {**PEAK, "rows": [*PEAK["rows"], bigger]})
    peak = validate.read_peak(path)
    assert peak.limit("fp32")["shape"] == "2048x2048 @ 2048x2048"
