"""Tests of ``mnistbench table`` (mnistbench.results.table): the headline figures of an
aggregated study as Markdown or CSV, every environment one after the other or two side by
side, on a fake study and on the committed report/data."""

from __future__ import annotations

import csv
import io
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from mnistbench import cli
from mnistbench.core import untrusted
from mnistbench.results import table
from tests.fakes import cell_id, make_study

REPO = Path(__file__).resolve().parents[2]
PUBLISHED = REPO / "report" / "data"
OOM_CELL = cell_id("cuda", "fp32", "resident", 256, 1)


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    """A small aggregated fake study: alpha (a GPU; one cuda cell oom) and beta (no GPU:
    every cuda cell unavailable), sweep and convergence, 3 repeats."""
    root = tmp_path_factory.mktemp("table")
    make_study(root / "runs", envs=("alpha", "beta"), gpu={"beta": False},
               precisions=("fp32",), batch_sizes=(64, 256), repeats=3,
               convergence_epochs=2, overrides={OOM_CELL: ("oom", "out of memory")})
    assert cli.main(["aggregate", str(root / "runs"), "--out-dir", str(root)]) == 0
    return root


def run_table(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(["table", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def summary_rows(results: Path) -> list[dict]:
    with (results / "summary.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def medians(rows, env, **key) -> dict[str, float]:
    """The medians over the ok runs of one row, computed here from summary.csv."""
    runs = [r for r in rows if r["env"] == env and r["status"] == "ok"
            and all(r[k] == str(v) for k, v in key.items())]
    return {c: statistics.median(float(r[c]) for r in runs) for c in table.FIGURES} | {
        "runs": len(runs)}


def test_markdown_lists_every_environment_with_medians_of_the_ok_runs(study, capsys):
    code, out, err = run_table(capsys, "--results", str(study))
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == ("| env | experiment | device | precision | loader | batch | epoch s | "
                        "samples/s | final acc % | runs |")
    assert lines[1] == "|---|---|---|---|---|---:|---:|---:|---:|---|"
    body = [line for line in lines[2:] if line.startswith("| ")]
    # (2 envs) x (convergence: 2 devices x 2 loaders; sweep: 2 devices x 2 loaders x 2 sizes)
    assert len(body) == 2 * (4 + 8)
    assert lines[-1].startswith("Medians over each row's ok runs")
    rows = summary_rows(study)
    want = medians(rows, "alpha", experiment="sweep", device="cpu", loader="dataloader",
                   batch_size=64)
    expected = (f"| alpha | sweep | cpu | fp32 | dataloader | 64 | "
                f"{table.seconds(want['epoch_s_median'])} | {want['samples_per_s']:,.0f} | "
                f"{want['final_test_acc']:.2f} | 3 |")
    assert expected in body
    # alpha's oom repeat is left out of the medians and said beside the runs.
    assert any(line.startswith("| alpha | sweep | cuda | fp32 | resident | 256 |")
               and line.endswith("| 2 (1 oom) |") for line in body)
    # beta has no GPU: its cuda rows have no figures.
    assert ("| beta | sweep | cuda | fp32 | resident | 64 | – | – | – | 0 (3 unavailable) |"
            in body)
    # Environments one after the other; within one, convergence before sweep, cpu first.
    envs = [line.split(" | ")[0] for line in body]
    assert envs == sorted(envs)
    alpha = [line.split(" | ")[1:3] for line in body if line.startswith("| alpha")]
    assert alpha[0] == ["convergence", "cpu"] and alpha[-1] == ["sweep", "cuda"]


def test_two_environments_side_by_side_with_the_speedup(study, capsys):
    code, out, _ = run_table(capsys, "--results", str(study), "--env", "beta", "--env",
                             "alpha", "--experiment", "convergence")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == (
        "| experiment | device | precision | loader | batch | beta epoch s | beta samples/s | "
        "beta final acc % | beta runs | alpha epoch s | alpha samples/s | alpha final acc % | "
        "alpha runs | speed-up alpha vs beta |")
    body = [line for line in lines[2:] if line.startswith("| ")]
    assert len(body) == 4 and all(line.startswith("| convergence |") for line in body)
    rows = summary_rows(study)
    key = {"experiment": "convergence", "device": "cpu", "loader": "resident"}
    beta, alpha = medians(rows, "beta", **key), medians(rows, "alpha", **key)
    line = next(line for line in body if "| cpu | fp32 | resident |" in line)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[5] == table.seconds(beta["epoch_s_median"])
    assert cells[9] == table.seconds(alpha["epoch_s_median"])
    assert cells[-1] == f"{beta['epoch_s_median'] / alpha['epoch_s_median']:.2f}×"
    gpu = next(line for line in body if "| cuda | fp32 | resident |" in line)
    assert gpu.endswith("| 0 (3 unavailable) | " + gpu.split(" | ")[9] + " | "
                        + gpu.split(" | ")[10] + " | " + gpu.split(" | ")[11] + " | 3 | – |")


def test_csv_has_plain_numbers_and_one_column_per_figure(study, capsys):
    code, out, _ = run_table(capsys, "--results", str(study), "--format", "csv",
                             "--env", "alpha", "--env", "beta")
    assert code == 0
    records = list(csv.DictReader(io.StringIO(out)))
    assert list(records[0])[:5] == ["experiment", "device", "precision", "loader", "batch_size"]
    assert "speedup:beta/alpha" in records[0]
    rows = summary_rows(study)
    record = next(r for r in records if (r["experiment"], r["device"], r["loader"],
                                         r["batch_size"]) == ("sweep", "cuda", "resident", "256"))
    want = medians(rows, "alpha", experiment="sweep", device="cuda", loader="resident",
                   batch_size=256)
    assert float(record["alpha:epoch_s_median"]) == pytest.approx(want["epoch_s_median"],
                                                                  rel=1e-5)
    assert (record["alpha:runs"], record["alpha:not_ok"]) == ("2", "1 oom")
    assert (record["beta:epoch_s_median"], record["beta:runs"]) == ("", "0")
    # The oom override holds in every environment: beta's other repeats are unavailable.
    assert record["beta:not_ok"] == "1 oom; 2 unavailable"
    assert record["speedup:beta/alpha"] == ""


def test_busy_runs_are_counted(study, tmp_path, capsys):
    """A busy ok run stays in the medians and is said beside the runs."""
    rows = summary_rows(study)
    busy_cell = cell_id("cpu", "fp32", "resident", 64, 0)
    for row in rows:
        row["busy"] = str(row["env"] == "alpha" and row["cell"] == busy_cell
                          and row["experiment"] == "sweep")
    with (tmp_path / "summary.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    code, out, _ = run_table(capsys, "--results", str(tmp_path), "--env", "alpha",
                             "--experiment", "sweep")
    assert code == 0
    assert any("| sweep | cpu | fp32 | resident | 64 |" in line and line.endswith(
        "| 3 (1 busy) |") for line in out.splitlines())


@pytest.mark.parametrize(("args", "message"), [
    (["--env", "gamma"], "has no environment 'gamma'; it holds alpha, beta. Pass one"),
    (["--experiment", "tips"], "has no experiment 'tips'; it holds convergence, sweep"),
])
def test_unknown_names_are_one_paragraph(study, capsys, args, message):
    code, out, err = run_table(capsys, "--results", str(study), *args)
    assert code == 1 and out == ""
    assert err.startswith("mnistbench table: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_an_environment_named_twice_is_a_usage_error(study, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["table", "--results", str(study), "--env", "alpha", "--env", "alpha"])
    assert info.value.code == 2
    assert "--env names alpha more than once" in capsys.readouterr().err


def test_a_missing_or_damaged_table_names_the_fix(tmp_path, capsys):
    code, _, err = run_table(capsys, "--results", str(tmp_path))
    assert code == 1
    assert f"{tmp_path / 'summary.csv'} does not exist. Run `mnistbench aggregate" in err
    (tmp_path / "summary.csv").write_text("env,status\nalpha,ok\n")
    code, _, err = run_table(capsys, "--results", str(tmp_path))
    assert code == 1 and "lacks the column(s) experiment, device" in err
    header = ",".join(table.NEEDED)
    (tmp_path / "summary.csv").write_text(
        f"{header}\nalpha,ok,sweep,cpu,fp32,resident,64,nan,1,2\n")
    code, _, err = run_table(capsys, "--results", str(tmp_path))
    assert code == 1 and "line 2 (cell alpha/sweep/?)" in err
    assert 'epoch_s_median is "nan", expected a finite number 0 or more' in err


def test_markdown_cells_stay_in_their_column():
    """A pipe or newline in a value (an edited table) cannot open a column."""
    rows = [{"env": "a|b", "status": "ok", "experiment": "sweep", "device": "cpu",
             "precision": "fp32", "loader": "resident", "batch_size": "64",
             "epoch_s_median": "1", "samples_per_s": "2", "final_test_acc": "3",
             "tip": "x\ny"}]
    text = table.markdown(table.build(rows))
    line = text.splitlines()[2]
    assert line.startswith("| `a\\|b` | sweep |") and "| x y |" in line


def test_the_published_study_tabulates(capsys):
    """The committed report/data: every ok cell of summary.csv is counted in one row."""
    if not (PUBLISHED / "summary.csv").is_file():
        pytest.skip("no published study in report/data")
    rows = summary_rows(PUBLISHED)
    code, out, _ = run_table(capsys, "--results", str(PUBLISHED), "--format", "csv")
    assert code == 0
    records = list(csv.DictReader(io.StringIO(out)))
    assert sum(int(r["runs"]) for r in records) == sum(r["status"] == "ok" for r in rows)
    envs = sorted({r["env"] for r in rows})
    assert sorted({r["env"] for r in records}) == envs
    code, out, _ = run_table(capsys, "--results", str(PUBLISHED), "--env", envs[0], "--env",
                             envs[-1])
    assert code == 0 and f"speed-up {envs[-1]} vs {envs[0]}" in out.splitlines()[0]


def test_table_imports_neither_torch_nor_pandas():
    """The command runs where only the standard library is: torch and pandas blocked."""
    code = ("import sys\n"
            "for name in ('torch', 'pandas', 'numpy'): sys.modules[name] = None\n"
            "from mnistbench import cli\n"
            f"sys.exit(cli.main(['table', '--results', {str(PUBLISHED)!r}, '--format', "
            "'csv']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("env,experiment,")


def test_table_help_names_its_flags(capsys):
    with pytest.raises(SystemExit):
        cli.main(["table", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for text in ("--results", "--env ENV", "--experiment NAME", "--format {markdown,csv}",
                 "(default: results)", "(default: markdown)"):
        assert text in out
    json.dumps(out)  # plain text


#: Strings an archive or an edited table could carry: HTML, Markdown, spreadsheet formulas.
HOSTILE = ["<img src=x onerror=alert(1)>", "</table><script>x()</script>",
           '=HYPERLINK("http://evil.invalid","click")', "+1+cmd|' /C calc'!A0",
           "-2+3+cmd", "@SUM(1,1)", "\tTAB=1", "\rCR=1", "a|b", "`tick`", "**bold**",
           "[link](javascript:alert(1))", "line\n# heading", "_under_",
           "www.evil.invalid", "https://evil.invalid/x"]


def hostile_rows(text: str) -> list[dict[str, str]]:
    base = {"status": "ok", "experiment": "sweep", "device": "cpu", "precision": "fp32",
            "loader": "resident", "batch_size": "64", "epoch_s_median": "1",
            "samples_per_s": "2", "final_test_acc": "-3"}
    return [{**base, "env": text, "tip": text}, {**base, "env": "b", "tip": text}]


def outside_code_spans(line: str) -> str:
    """A Markdown line with its code spans (any fence length) taken out."""
    return re.sub(r"(`+)(?:(?!\1).)*?\1", "", line)


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_every_export_is_inert_over_hostile_strings(text):
    """Markdown (one env after the other, and side by side) shows every free-text value in
    a code span or with nothing Markdown or HTML reads (nor a bare URL GitHub links); CSV
    starts no text field with a formula prefix, and a negative number stays a number."""
    rows = hostile_rows(text)
    for built in (table.build(rows), table.build(rows, envs=(text, "b"))):
        out = table.markdown(built)
        rows_md, note = out.split("\n\n")
        lines = rows_md.splitlines()
        assert len(lines) == 2 + len(built.rows) * (1 if built.side_by_side else 2), out
        columns = lines[1].count("|")  # the rule line: no value in it
        for line in [*lines, note]:
            bare = outside_code_spans(line)
            for active in ("<", "[", "**", "# ", "\t", "\r", "=HYPERLINK", "www.", "://"):
                assert active not in bare, (line, active)
        for line in lines:  # no value opens or closes a column: a pipe in a span is escaped
            assert outside_code_spans(line).replace("\\|", "").count("|") == columns, line
        for record in csv.reader(io.StringIO(table.csv_text(built))):
            for field in record:
                if field.startswith(untrusted.FORMULA_PREFIXES):
                    assert re.fullmatch(r"-[0-9.e+-]+", field), field
    plain = list(csv.reader(io.StringIO(table.csv_text(table.build(rows)))))
    assert plain[1][-4] == "-3"  # final_test_acc: a negative number is a number


def test_csv_safe_follows_owasp():
    assert untrusted.csv_safe("=1+1") == "'=1+1"
    assert untrusted.csv_safe("@x") == "'@x" and untrusted.csv_safe("\tx") == "'\tx"
    assert untrusted.csv_safe("-1.5e3") == "-1.5e3" and untrusted.csv_safe("+2") == "+2"
    assert untrusted.csv_safe("-2+3") == "'-2+3" and untrusted.csv_safe("plain") == "plain"


def test_a_one_megabyte_reason_is_read_not_refused(tmp_path, capsys):
    """Weak case: a 1 MB reason field (a long traceback) made `table` refuse the file and say
    to rerun aggregate, which could not help; the table reads fields up to 16 MiB."""
    header = ",".join([*table.NEEDED, "cell", "reason"])
    (tmp_path / "summary.csv").write_text(
        f"{header}\nalpha,failed,sweep,cpu,fp32,resident,64,,,,c1,\"{'x' * (1 << 20)}\"\n"
        f"alpha,ok,sweep,cpu,fp32,resident,64,1.5,100,98.5,c2,\n")
    code, out, err = run_table(capsys, "--results", str(tmp_path))
    assert code == 0, err
    assert "| 1 (1 failed) |" in out, out
