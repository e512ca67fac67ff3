"""mnistbench publish against a hostile or damaged report/ and config (issue 41): `--check`
follows no symbolic link and quotes nothing it refused, `--keep-published` treats the old
manifest as data and checks every kept row again, and a config is read bounded and checked
against the workflow's schema. The fixtures are test_publish.py's."""

# ruff: noqa: F811 - the fixtures of test_publish.py, imported, are the tests' arguments
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from mnistbench import cli, publish
from tests import fakes
from tests.fakes import make_study
from tests.publish.test_publish import (  # noqa: F401 - fixtures
    ENV,
    FAKE,
    charts_once,
    git,
    project,
    reaggregate,
    run_publish,
    set_env_field,
    set_measured_here,
    snapshot,
)

SECRET = "root:$6$SECRET-HASH-LINE:19000:0:99999:7:::"

BILLION_LAUGHS = "\n".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]"
       for a, b in zip("abcdefgh", "bcdefghi", strict=True)]
) + "\n"


def check(capsys) -> tuple[int, str, str]:
    code = cli.main(["publish", "--check"])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", ["index.html", "README.md", "data/summary.csv"])
def test_publish_check_follows_no_link_and_quotes_nothing_it_refused(project, capsys, name):
    """Security case 1: a file of report/ replaced by a symbolic link to a secret (the first
    line of /etc/shadow, say) is named as a link and never read: no line of it is printed,
    the report is not rendered from it, and the check fails with one paragraph per
    problem, no traceback."""
    run_publish()
    secret = project / "shadow"
    secret.write_text(SECRET + "\nsecond line\n")
    target = project / "report" / name
    target.unlink()
    target.symlink_to(secret)
    code, out, err = check(capsys)
    assert code == 1 and "Traceback" not in err
    assert "SECRET" not in out + err and "second line" not in out + err
    assert f"{name}" in err and "symbolic link" in err and "not read" in err, err
    assert "the report was not rendered again" in err
    # A link that stays inside report/ is not followed either.
    target.unlink()
    (project / "report" / "copy").write_text("x")
    target.symlink_to(project / "report" / "copy")
    code, out, err = check(capsys)
    assert code == 1 and f"report/{name} is a symbolic link, which is not followed" in err, err


def test_publish_check_quotes_nothing_of_an_index_that_fails_its_checksum(project, capsys):
    """A report/index.html that is a regular file but not the one published (a hard link to
    a secret is one; here a copy) fails its checksum; the render comparison then says where
    it differs, never a line of it (it quoted the first differing line)."""
    run_publish()
    index = project / "report" / "index.html"
    index.write_text(SECRET + "\nsecond line\n")
    code, out, err = check(capsys)
    assert code == 1 and "Traceback" not in err
    assert "report/index.html does not match its SHA-256" in err
    assert "is not what report/data renders to now: they differ from line 1 (not quoted" in err
    assert "SECRET" not in out + err and "second line" not in out + err


def test_publish_check_refuses_a_fifo_without_hanging(project, capsys):
    """A FIFO in place of index.html is named, never opened for reading (that would hang)."""
    import os

    run_publish()
    (project / "report" / "index.html").unlink()
    os.mkfifo(project / "report" / "index.html")
    started = time.monotonic()
    code, _, err = check(capsys)
    assert code == 1 and time.monotonic() - started < 30
    assert "report/index.html is not a regular file but a FIFO" in err, err


def test_publish_check_on_an_edited_table_lists_every_problem_without_a_traceback(
        project, capsys):
    """Weak case: an edited summary.csv (accuracy 250 %) gives the checksum problem and why
    the report does not render, each one paragraph, exit 1, no traceback."""
    run_publish()
    path = project / "report" / "data" / "summary.csv"
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    row = lines[1].split(",")
    row[header.index("final_test_acc")] = "250"
    lines[1] = ",".join(row)
    path.write_text("\n".join(lines) + "\n")
    code, _, err = check(capsys)
    assert code == 1 and "Traceback" not in err
    assert "report/data/summary.csv does not match its SHA-256" in err
    assert 'final_test_acc is "250", expected a finite number 0 to 100' in err


def keep_a_lent_machine(project: Path) -> None:
    """Publish this machine's cells and a lent machine's, then lose the lent machine's
    folders (only its publication is left)."""
    import shutil

    runs = project / "results" / "runs"
    make_study(runs, envs=("lent-gpu",), machines={"lent-gpu": fakes.MACHINES[1]}, **FAKE)
    set_env_field(runs, "git_revision", git(project, "rev-parse", "HEAD"))
    set_measured_here(runs, project)
    reaggregate(project)
    run_publish()
    shutil.rmtree(runs / "lent-gpu")
    reaggregate(project)


def test_keep_published_reads_no_config_the_old_manifest_names(project, capsys):
    """Security case 2: the old manifest names config files outside report/ (a credentials
    file that is no YAML, one that is): --keep-published keeps their names as published and
    opens neither; nothing of them is quoted."""
    keep_a_lent_machine(project)
    creds = project / "credentials"
    creds.write_text("[default]\naws_secret_access_key = SECRET-KEY: : :\n\t- [\n")
    parses = project / "parses.yaml"
    parses.write_text("seed: 7\n")
    path = project / "report" / "data" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["env_configfiles"] = {"lent-gpu": [str(creds), str(parses)]}
    path.write_text(json.dumps(manifest))
    creds.chmod(0)  # reading it would fail: it is not read
    parses.chmod(0)
    result = run_publish(keep_published=True)
    assert result.manifest["env_configfiles"]["lent-gpu"] == [str(creds), str(parses)]
    assert "SECRET" not in json.dumps(result.manifest)
    assert "SECRET" not in (project / "report" / "README.md").read_text()


@pytest.mark.parametrize(("column", "value", "words"), [
    ("final_test_acc", "250", 'final_test_acc is "250", expected a finite number 0 to 100'),
    ("samples_per_s", "-1e6", 'samples_per_s is "-1e6", expected a finite number 0 or more'),
    ("epoch_s_median", "-5", 'epoch_s_median is "-5", expected a finite number 0 or more'),
    ("device", "tpu", 'device is "tpu", expected one of'),
])
def test_keep_published_checks_every_kept_row_again(project, column, value, words):
    """Bad case: kept rows edited to values no cell gives are refused at the next publish,
    naming the file, the line and the fix; report/ stays as it was."""
    keep_a_lent_machine(project)
    path = project / "report" / "data" / "summary.csv"
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    number = next(i for i, line in enumerate(lines) if line.startswith("lent-gpu,"))
    row = lines[number].split(",")
    row[header.index(column)] = value
    lines[number] = ",".join(row)
    path.write_text("\n".join(lines) + "\n")
    before = path.read_text()
    with pytest.raises(publish.PublishError) as info:
        run_publish(keep_published=True)
    message = str(info.value)
    assert message.startswith("--keep-published: ") and words in message, message
    assert f"summary.csv line {number + 1} (cell lent-gpu/" in message
    assert "publish without --keep-published" in message
    assert path.read_text() == before


@pytest.mark.parametrize(("name", "column", "value", "words"), [
    ("epochs.csv", "epoch_s", "-5", 'epoch_s is "-5", expected a finite number 0 or more'),
    ("resources.csv", "rss_mb", "-1e6", 'rss_mb is "-1e6", expected a finite number 0 or'),
])
def test_keep_published_checks_every_kept_epoch_and_resource_row_again(project, name, column,
                                                                      value, words):
    """The kept rows of epochs.csv and resources.csv are checked at every publish too
    (resources.csv's were carried unchecked); report/ stays as it was."""
    keep_a_lent_machine(project)
    path = project / "report" / "data" / name
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    number = next(i for i, line in enumerate(lines) if line.startswith("lent-gpu,"))
    row = lines[number].split(",")
    row[header.index(column)] = value
    lines[number] = ",".join(row)
    path.write_text("\n".join(lines) + "\n")
    before = snapshot(project / "report")
    with pytest.raises(publish.PublishError) as info:
        run_publish(keep_published=True)
    message = str(info.value)
    assert words in message and f"{name} line {number + 1} (cell lent-gpu/" in message, message
    assert snapshot(project / "report") == before


def test_keep_published_refuses_a_same_named_environment_from_other_hardware(project):
    """An environment of the results named as a published one but measured on other
    hardware (another CPU model and GPU, from its cells' provenance) is refused with one
    paragraph naming both and the fix (pack --as, --config env=NAME): it was replaced with
    no word, losing a lent machine's results. The same hardware publishes again."""
    import shutil

    keep_a_lent_machine(project)
    runs = project / "results" / "runs"
    report = project / "report"
    before = snapshot(report)
    # The lent machine's name given to cells of this machine (alpha's hardware).
    shutil.copytree(runs / ENV, runs / "lent-gpu")
    for path in (runs / "lent-gpu").glob("*/*/summary.json"):
        data = json.loads(path.read_text())
        data["params"]["env"] = "lent-gpu"
        path.write_text(json.dumps(data))
    reaggregate(project)
    with pytest.raises(publish.PublishError) as info:
        run_publish(keep_published=True)
    message = str(info.value)
    assert "environment 'lent-gpu'" in message and "from other hardware" in message, message
    assert f"cpu_model {fakes.MACHINES[1].cpu_model!r} published" in message, message
    assert f"{fakes.MACHINES[0].cpu_model!r} in the results" in message, message
    assert "gpu_name" in message and "\n" not in message
    assert "mnistbench pack ENV --as NAME" in message and "--config env=NAME" in message
    assert snapshot(report) == before
    # The same hardware under the same name is the same environment: it publishes again.
    shutil.rmtree(runs / "lent-gpu")
    reaggregate(project)
    run_publish(keep_published=True)


def test_keep_published_follows_no_link_in_report(project):
    """A kept table replaced by a symbolic link is refused naming it; nothing is read."""
    keep_a_lent_machine(project)
    secret = project / "secret.csv"
    secret.write_text("SECRET\n")
    table = project / "report" / "data" / "epochs.csv"
    table.unlink()
    table.symlink_to(secret)
    with pytest.raises(publish.PublishError) as info:
        run_publish(keep_published=True)
    assert "epochs.csv: a symbolic link, which is not followed" in str(info.value)
    assert "SECRET" not in str(info.value)


def test_a_billion_laughs_config_is_refused_at_once(project, capsys):
    """Bad case: a YAML 'billion laughs' config (9^9 values through aliases) is refused in
    well under a second, naming the file and what it expands to."""
    bomb = project / "laughs.yaml"
    bomb.write_text(BILLION_LAUGHS)
    started = time.monotonic()
    with pytest.raises(publish.PublishError) as info:
        publish.load_config([bomb])
    assert time.monotonic() - started < 1.0
    assert f"the config {bomb} expands to more than 200000 values" in str(info.value)


@pytest.mark.parametrize(("text", "words"), [
    ("a: &a [*a]\n", "holds itself"),
    ("x: " + "[" * 200 + "]" * 200 + "\n", "nests deeper than 64 levels"),
    ("seed: [unclosed\npassword: SECRET\n", "is not valid YAML (line"),
    ("- a list\n", "is not a mapping"),
])
def test_a_bad_config_is_one_paragraph_naming_the_file(project, text, words):
    """Weak cases: a config that holds itself, nests too deep, does not parse or is no
    mapping: one paragraph naming the file and the fix, never its content."""
    bad = project / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(publish.PublishError) as info:
        publish.load_config([bad])
    assert str(bad) in str(info.value) and words in str(info.value), str(info.value)
    assert "SECRET" not in str(info.value)


@pytest.mark.parametrize(("kind", "words"), [
    ("folder", "not a regular file but a folder"),
    ("yaml", "is not valid YAML (line"),
    ("key", "invalid config key devices.0 in"),
])
def test_a_bad_env_configfile_names_its_own_flag_as_the_fix(project, kind, words):
    """Weak case: an --env-configfile that is a folder, does not parse or holds a key the
    schema refuses names that file and `--env-configfile ENV=FILE` as the fix (the message
    named --configfile, which the user had right)."""
    bad = project / "gpu-env.yaml"
    if kind == "folder":
        bad.mkdir()
    else:
        bad.write_text("devices: [\n" if kind == "yaml" else "devices: [tpu]\n")
    with pytest.raises(publish.PublishError) as info:
        publish.load_config([Path("config/config.yaml")], env="lab", env_files=[bad])
    message = str(info.value)
    assert str(bad) in message and words in message, message
    if kind != "key":
        assert "--env-configfile lab=FILE" in message and "(--configfile" not in message


def test_env_configfile_is_validated_against_the_workflows_schema(project, capsys):
    """Weak case: --env-configfile with a key the workflow refuses (a device it does not
    know) is refused naming the key and the file, before anything is published."""
    bad = project / "other.yaml"
    bad.write_text(yaml.safe_dump({"devices": ["tpu"]}))
    code = cli.main(["publish", f"--env-configfile={ENV}={bad}"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert "invalid config key devices" in err and str(bad) in err, err
    assert not (project / "report").exists()
