"""Tests of ``mnistbench publish`` (mnistbench.publish): the publication in ``report/`` (data,
manifest, README, the report rendered from that data), the refusals (missing, failed and stale
cells, out-of-date tables) and their waivers, and the check that the published report renders
again from its own data: on a publication made here from fake data, and on the committed
``report/`` of this repository once it exists."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from mnistbench import __version__, cli, publish
from mnistbench.core import atomic, provenance, schema
from mnistbench.publish import rendering
from mnistbench.report import render as report
from mnistbench.results import aggregate, archive, cost
from tests import fakes
from tests.fakes import make_study

REPO = Path(__file__).resolve().parents[2]
ENV = "alpha"
#: The study of the fake results: the config's matrix is exactly the cells make_study writes.
STUDY = {"devices": ["cpu"], "experiments": {
    "convergence": {"repeats": 1, "loaders": ["resident"], "epochs": 2},
    "sweep": {"repeats": 1, "loaders": ["resident"], "batch_sizes": [64],
              "precisions": ["fp32"]},
    "tips": {"enabled": False}, "scale": {"enabled": False},
    "headline": {"enabled": False}, "threads": {"enabled": False}}}
FAKE = {"devices": ("cpu",), "precisions": ("fp32",), "loaders": ("resident",),
        "batch_sizes": (64,), "repeats": 1, "convergence_epochs": 2}
GIT_ID = ["-c", "user.name=test", "-c", "user.email=test@example.org"]
GIT_DATE = "2026-01-01T00:00:00Z"
#: The charts drawn for each distinct set of tables in this test process (charts_once).
CHARTS: dict[str, dict[str, bytes | None]] = {}


@pytest.fixture(autouse=True)
def charts_once(monkeypatch, tmp_path_factory):
    """Each distinct set of tables has its charts drawn once per test session, not at every
    publish (about 2.5 s each): the charts are a function of the tables (a publication renders
    again to the same bytes: test_published_report_renders_again_from_its_own_data), so the
    same fake study published again gets the same PNGs. Tables that differ are drawn anew.
    pytest-xdist's workers of one session share them through a folder of that session."""
    draw = report.draw_charts
    shared = None
    if os.environ.get("PYTEST_XDIST_WORKER"):  # basetemp: <the session's folder>/popen-gwN
        shared = tmp_path_factory.getbasetemp().parent / "charts-once"
        shared.mkdir(exist_ok=True)

    def drawn_once(tables: aggregate.Tables) -> dict[str, bytes | None]:
        key = hashlib.sha256(b"\0".join(
            frame.to_csv(index=False).encode()
            for frame in (tables.summary, tables.epochs, tables.resources))).hexdigest()
        path = None if shared is None else shared / f"{key}.json"
        if key not in CHARTS and path is not None and path.is_file():
            CHARTS[key] = {name: None if png is None else base64.b64decode(png)
                           for name, png in json.loads(path.read_text()).items()}
        if key not in CHARTS:
            CHARTS[key] = draw(tables)
            if path is not None:
                atomic.write_text(path, json.dumps(
                    {name: None if png is None else base64.b64encode(png).decode()
                     for name, png in CHARTS[key].items()}))
        return CHARTS[key]

    monkeypatch.setattr(report, "draw_charts", drawn_once)


def git(root: Path, *args: str) -> str:
    """``git ARGS`` in ``root``, its commits dated alike: the same files give the same
    revision in every test, so the fake study's tables (its cells record the revision) are
    the same too and their charts are drawn once (charts_once)."""
    env = {**os.environ, "GIT_AUTHOR_DATE": GIT_DATE, "GIT_COMMITTER_DATE": GIT_DATE}
    return subprocess.run(["git", *GIT_ID, *args], cwd=root, capture_output=True, text=True,
                          check=True, timeout=60, env=env).stdout.strip()


def set_env_field(runs: Path, key: str, value, where=lambda path: True) -> None:
    """Set ``env.KEY`` in every summary.json under ``runs`` that ``where`` picks."""
    for path in runs.glob(f"*/*/*/{schema.SUMMARY_FILE}"):
        if where(path):
            data = json.loads(path.read_text())
            data["env"][key] = value
            path.write_text(json.dumps(data))


#: The fake checkout's trainer (measuring code) and bench rule.
TRAINER = Path("src/mnistbench/measure/train.py")
TRAINER_CODE = '"""The trainer."""\n\n\ndef epoch(steps):\n    return steps * 2\n'
BENCH_RULE = "rule bench:\n    shell:\n        \"mnistbench train --threads 2\"\n"


def set_measured_here(runs: Path, root: Path) -> None:
    """Give every cell under ``runs`` the code and workflow digests of the checkout ``root``
    (as if it had measured them)."""
    code, workflow = publish.current_digests(root)
    set_env_field(runs, "code_digest", code)
    set_env_field(runs, "workflow_digest", workflow)


def reaggregate(root: Path) -> None:
    aggregate.aggregate(root / "results" / "runs", root / "results")


@pytest.fixture()
def project(tmp_path, monkeypatch) -> Path:
    """A git checkout (the measured code: src/mnistbench, envs/pip; the config and its schema)
    with the current results of a small fake study measured at its HEAD; the current
    folder."""
    root = tmp_path / "project"
    for sub in ("measure", "report"):
        (root / "src" / "mnistbench" / sub).mkdir(parents=True)
    (root / TRAINER).write_text(TRAINER_CODE)
    (root / "src" / "mnistbench" / "report" / "render.py").write_text("# the report\n")
    (root / "workflow" / "rules").mkdir(parents=True)
    (root / provenance.BENCH_RULES).write_text(BENCH_RULE)
    (root / "envs" / "pip").mkdir(parents=True)
    (root / "envs" / "pip" / "base.txt").write_text("numpy==1\n")
    (root / "envs" / "pip" / "torch.txt").write_text("torch==1\n")
    (root / "config").mkdir()
    (root / "config" / "config.yaml").write_text(yaml.safe_dump(STUDY))
    shutil.copytree(REPO / "workflow" / "schemas", root / "workflow" / "schemas")
    (root / ".gitignore").write_text("results/\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "the code")
    runs = root / "results" / "runs"
    make_study(runs, envs=(ENV,), **FAKE)
    set_env_field(runs, "git_revision", git(root, "rev-parse", "HEAD"))
    set_measured_here(runs, root)
    reaggregate(root)
    (root / "results" / "cost_model.json").write_text(json.dumps(cost.DEFAULT_MODEL))
    monkeypatch.chdir(root)
    return root


def run_publish(**kwargs) -> publish.Publication:
    return publish.publish(Path("results"), Path("report"), **kwargs)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def rewrite_published(root: Path, name: str, text: str) -> None:
    """Replace a published file and its checksum in the manifest (an edit the checksums
    cannot see, so only the re-render can)."""
    path = root / "report" / name
    path.write_text(text, encoding="utf-8")
    manifest_path = root / "report" / "data" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["files"][name]["sha256"] = sha256(path)
    manifest["files"][name]["bytes"] = path.stat().st_size
    manifest_path.write_text(json.dumps(manifest))


# --------------------------------------------------------------------------- the publication
@pytest.mark.slow
def test_publish_writes_data_manifest_readme_and_the_report(project):
    """report/ gets the four tables and the cost model as in results/, a manifest with the
    environments' hardware, dates, revision, cells per status and every file's checksum, a
    README saying what was measured where and how to add a machine, and index.html."""
    result = run_publish()
    out = project / "report"
    for name in (*publish.TABLES, publish.COST_MODEL):
        assert (out / "data" / name).read_bytes() == (project / "results" / name).read_bytes()
    manifest = json.loads((out / "data" / "manifest.json").read_text())
    assert manifest == json.loads(json.dumps(result.manifest))
    assert manifest["format"] == publish.FORMAT and manifest["mnistbench"] == __version__
    assert manifest["git_revision"] == git(project, "rev-parse", "HEAD")
    assert manifest["cells"] == {"total": 2, "by_status": {"ok": 2, "oom": 0,
                                                            "unavailable": 0, "failed": 0}}
    (env,) = manifest["environments"]
    summary = (out / "data" / "summary.csv").read_text()
    assert env["env"] == ENV and env["hardware"]["cpu_model"] in summary
    assert env["hardware"]["hostname"] and env["measured_devices"] == ["cpu"]
    assert manifest["dates"]["first_started_at"] <= manifest["dates"]["last_ended_at"]
    assert env["first_started_at"] == manifest["dates"]["first_started_at"]
    assert manifest["checks"]["waived"] == [] and manifest["checks"]["stale"] == []
    assert manifest["render"] == {"results": "report/data",
                                  "cost_model": "report/data/cost_model.json",
                                  "command": "make study && make publish"}
    listed = {f"data/{n}" for n in (*publish.TABLES, publish.COST_MODEL)} | {"index.html",
                                                                             "README.md"}
    assert set(manifest["files"]) == listed
    for name, entry in manifest["files"].items():
        assert entry == {"bytes": (out / name).stat().st_size, "sha256": sha256(out / name)}
    readme = (out / "README.md").read_text()
    for text in (f"| `{ENV}` |", "No GPU has been measured yet", "mnistbench unpack",
                 "mnistbench pack", "make study && make publish", "labelled reference"):
        assert text in readme, text
    assert "report/data" in (out / "index.html").read_text()
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []


@pytest.mark.slow
def test_published_report_renders_again_from_its_own_data(project):
    """verify() passes on a fresh publication; it ignores only the generation stamp, and it
    reports a report that its data no longer renders to, and a changed data file."""
    run_publish()
    assert publish.verify(Path("report")) == []
    index = (project / "report" / "index.html").read_text()
    stamps = publish.STAMP.findall(index)
    assert stamps, "the report carries no generation stamp"
    rewrite_published(project, "index.html", index.replace(stamps[0], "2000-01-01T00:00:00+00:00"))
    assert publish.verify(Path("report")) == []
    tampered = index.replace("report/data", "other/data", 1)
    rewrite_published(project, "index.html", tampered)
    (problem,) = publish.verify(Path("report"))
    assert "index.html is not what report/data renders to now" in problem
    assert "line " in problem
    with (project / "report" / "data" / "summary.csv").open("a") as handle:
        handle.write("\n")
    problems = publish.verify(Path("report"))
    assert any("summary.csv does not match its SHA-256" in p for p in problems)


def test_strip_stamp_masks_only_date_times():
    """The generation stamp (an ISO 8601 date-time with zone) is masked; dates and other
    numbers are not."""
    html = "<p>Generated 2026-12-03T06:56:10+00:00 on 2026-12-03: 58.7 s</p>"
    assert publish.strip_stamp(html) == "<p>Generated <generated_at> on 2026-12-03: 58.7 s</p>"


@pytest.mark.slow
def test_committed_publication_renders_from_its_own_data(monkeypatch):
    """The committed report/index.html is what report/data renders to (but for its
    generation stamp), and every file matches the manifest's checksums."""
    tracked = subprocess.run(["git", "ls-files", "report/index.html", "report/data"],
                             cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    if tracked.returncode != 0 or "report/index.html" not in tracked.stdout.split():
        pytest.skip("report/ is not committed yet: the lead publishes the real runs with "
                    "`make publish` and commits report/ (docs/publish.md)")
    monkeypatch.chdir(REPO)
    assert publish.verify(Path("report")) == []


# --------------------------------------------------------------------------- refusals
def test_publish_refuses_an_invalid_cell_as_failed_naming_what_is_wrong(project):
    """A cell whose summary.json says 140 % accuracy is a failed row of the tables, and
    publish refuses it as failed naming the cell, the field and the value."""
    runs = project / "results" / "runs"
    path = next(runs.glob(f"{ENV}/sweep/*/{schema.SUMMARY_FILE}"))
    data = json.loads(path.read_text())
    data["results"]["final_test_acc"] = 140.0
    path.write_text(json.dumps(data))
    reaggregate(project)
    with pytest.raises(publish.PublishError) as info:
        run_publish()
    message = str(info.value)
    assert f"1 failed: {ENV}/sweep/{path.parent.name} (invalid: summary.json " \
           "results.final_test_acc is 140.0, expected a finite number 0 to 100)" in message
    assert not (project / "report").exists()


@pytest.mark.slow
def test_publish_refuses_missing_cells_and_records_a_waiver(project):
    """A cell of the config's study that never ran is refused, naming it, and nothing is
    written; --allow-missing needs a reason, and the manifest and README record both."""
    shutil.rmtree(project / "results" / "runs" / ENV / "sweep" / "cpu-fp32-resident-b64-r0")
    reaggregate(project)
    with pytest.raises(publish.PublishError) as info:
        run_publish()
    message = str(info.value)
    assert "1 missing: alpha/sweep/cpu-fp32-resident-b64-r0" in message
    assert "--allow-missing" in message
    assert not (project / "report").exists()
    with pytest.raises(publish.PublishError, match="--reason"):
        run_publish(allow_missing=True)
    result = run_publish(allow_missing=True, reason="the sweep runs next week")
    checks = result.manifest["checks"]
    assert checks["waived"] == ["missing"] and checks["reason"] == "the sweep runs next week"
    assert checks["missing"] == [{"cell": "alpha/sweep/cpu-fp32-resident-b64-r0",
                                  "why": "a cell of the study's config never ran"}]
    readme = (project / "report" / "README.md").read_text()
    assert "Published despite the checks" in readme and "the sweep runs next week" in readme


def test_publish_counts_an_incomplete_cell_as_missing(project):
    """A cell folder without summary.json (killed, or still running) is missing."""
    (project / "results" / "runs" / ENV / "sweep" / "cpu-fp32-resident-b512-r0").mkdir()
    with pytest.raises(publish.PublishError, match="incomplete: its folder has no summary"):
        run_publish()


def test_publish_refuses_failed_cells(tmp_path, project):
    """A cell with status failed is refused; oom and unavailable cells are results."""
    runs = project / "results" / "runs"
    shutil.rmtree(runs)
    make_study(runs, envs=(ENV,), overrides={
        "cpu-fp32-resident-b64-r0": ("failed", "boom"),
        "cpu-fp32-resident-b128-r0": ("oom", "out of memory")}, **FAKE)
    set_env_field(runs, "git_revision", git(project, "rev-parse", "HEAD"))
    set_measured_here(runs, project)
    reaggregate(project)
    with pytest.raises(publish.PublishError) as info:
        run_publish()
    assert "1 failed: alpha/sweep/cpu-fp32-resident-b64-r0 (status failed)" in str(info.value)
    assert "oom" not in str(info.value).split("Fix:")[0]


def test_stale_cells_are_those_measured_by_other_code(project):
    """Stale: the measuring code or the bench rule changed since the cell was measured (by
    digest), no digest recorded, another mnistbench version, an older schema version. An
    untracked file, a README, report or comment-only edit, a layout change of the bench rule
    and an uncommitted (-dirty) checkout leave the cells current."""
    runs = project / "results" / "runs"
    cells, _ = publish.read_cells(runs)
    assert publish.stale_reasons(cells, project)[0] == []
    (project / "scratch-note.txt").write_text("untracked\n")
    (project / "README.md").write_text("# edited\n")
    (project / "src" / "mnistbench" / "report" / "render.py").write_text("# a new report\n")
    (project / TRAINER).write_text("# a comment\n" + TRAINER_CODE.replace(
        '"""The trainer."""', '"""The trainer, documented."""') + "# another comment\n")
    (project / provenance.BENCH_RULES).write_text("# a comment\n" + BENCH_RULE.replace(
        "    shell:", "      shell:"))
    dirty = [publish.CellInfo(c.key, c.status, c.schema_version, c.device,
                              {**c.env, "git_revision": "0" * 40 + "-dirty"}) for c in cells]
    assert publish.stale_reasons(dirty, project)[0] == []
    (project / TRAINER).write_text(TRAINER_CODE.replace("steps * 2", "steps * 3"))
    stale, how = publish.stale_reasons(cells, project)
    assert len(stale) == 2 and "measured by other code (code digest" in stale[0].why
    assert "env.code_digest" in how
    (project / TRAINER).write_text(TRAINER_CODE)
    (project / provenance.BENCH_RULES).write_text(BENCH_RULE.replace("2", "4"))
    stale, _ = publish.stale_reasons(cells, project)
    assert len(stale) == 2 and "started by another bench rule" in stale[0].why
    (project / provenance.BENCH_RULES).write_text(BENCH_RULE)
    by_hand = [publish.CellInfo(c.key, c.status, c.schema_version, c.device,
                                {**c.env, "workflow_digest": ""}) for c in cells]
    assert publish.stale_reasons(by_hand, project)[0] == []  # e.g. scripts/gpu-check's cells
    unknown = [publish.CellInfo(c.key, c.status, c.schema_version, c.device,
                                {**c.env, "code_digest": ""}) for c in cells]
    assert "no code digest recorded" in publish.stale_reasons(unknown, project)[0][0].why
    older = [publish.CellInfo(c.key, c.status, schema.SCHEMA_VERSION - 1, c.device,
                              {**c.env, "mnistbench": "0.0.1"}) for c in cells]
    why = publish.stale_reasons(older, project)[0][0].why
    assert f"schema version {schema.SCHEMA_VERSION - 1}" in why and "mnistbench 0.0.1" in why


def test_publish_refuses_stale_cells_unless_allowed(project):
    """A code change after the measurements refuses the publication naming the changed file;
    --allow-stale with a reason publishes and records the stale cells."""
    (project / TRAINER).write_text(TRAINER_CODE.replace("steps * 2", "steps"))
    git(project, "commit", "-qam", "faster")
    with pytest.raises(publish.PublishError) as info:
        run_publish()
    assert "2 stale" in str(info.value) and "measured by other code" in str(info.value)
    result = run_publish(allow_stale=True, reason="the change does not touch timing")
    assert len(result.manifest["checks"]["stale"]) == 2
    assert publish.verify(Path("report")) == []


def test_publish_refuses_tables_out_of_date_with_the_runs(project):
    """results/*.csv that are not what aggregating results/runs gives now (a cell rerun since)
    are refused, with the command that brings them up to date."""
    set_env_field(project / "results" / "runs", "hostname", "renamed")
    with pytest.raises(publish.PublishError) as info:
        run_publish()
    assert "summary.csv is out of date" in str(info.value)
    assert "mnistbench aggregate results/runs --out-dir results" in str(info.value)


@pytest.mark.slow
def test_a_failed_render_leaves_the_previous_publication(project, monkeypatch):
    """When the report does not render, report/ keeps its previous data, report and README,
    and no staging folder is left."""
    run_publish()
    before = snapshot(project / "report")

    def broken(*args, **kwargs):
        raise report.ReportError("the template is broken")

    monkeypatch.setattr(report, "render_report", broken)
    monkeypatch.setattr(report, "write_report", broken)
    with pytest.raises(publish.PublishError, match="the template is broken"):
        run_publish()
    assert snapshot(project / "report") == before
    assert sorted(p.name for p in (project / "report").iterdir()) == [
        "README.md", "data", "index.html"]


def republish_changed(project: Path) -> None:
    """Change the results (one cell rerun: another hostname), so a second publish differs."""
    set_env_field(project / "results" / "runs", "hostname", "rerun-host")
    reaggregate(project)


@pytest.mark.slow
def test_publish_stages_the_whole_publication_before_the_swap(project, monkeypatch):
    """When the swap begins (the first rename in report/), the new data with its manifest,
    index.html and README.md are all staged, and report/ is still the old publication."""
    run_publish()
    before = snapshot(project / "report")
    republish_changed(project)
    seen: list[tuple] = []
    real = os.rename

    def rename(src, dst):
        if not seen:
            stage = Path(src).parent
            seen.append((snapshot(project / "report"),
                         sorted(p.name for p in (stage / "data").iterdir()),
                         (stage / "index.html").is_file(), (stage / "README.md").is_file()))
        return real(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    run_publish()
    monkeypatch.setattr(os, "rename", real)
    old, staged, index, readme = seen[0]
    assert {k: v for k, v in old.items() if not k.startswith(".publish-")} == before
    assert "manifest.json" in staged and index and readme
    assert snapshot(project / "report") != before


@pytest.mark.slow
@pytest.mark.parametrize("when", ["render", "after data", "after README"])
def test_an_interrupted_publish_leaves_the_previous_publication(project, monkeypatch, capsys,
                                                                when):
    """SIGTERM while the report renders, right after the new data/ went in, or right after the
    new README.md did: `mnistbench publish` exits 143 and report/ is the previous
    publication byte for byte, with no staging folder."""
    run_publish()
    before = snapshot(project / "report")
    republish_changed(project)

    stopped: list[int] = []

    def stop():
        if not stopped:  # once: the clean-up renames too
            stopped.append(1)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)

    if when == "render":
        real_render = rendering.render_staged
        monkeypatch.setattr(rendering, "render_staged",
                            lambda *a, **k: (real_render(*a, **k), stop()))
    else:
        real_rename, real_replace = os.rename, os.replace

        def rename(src, dst):
            real_rename(src, dst)
            if when == "after data" and Path(dst).name == "data":
                stop()

        def replace(src, dst):
            real_replace(src, dst)
            if when == "after README" and Path(dst).name == "README.md":
                stop()

        monkeypatch.setattr(os, "rename", rename)
        monkeypatch.setattr(os, "replace", replace)
    assert cli.main(["publish"]) == 143
    monkeypatch.undo()
    assert "mnistbench publish: interrupted by SIGTERM" in capsys.readouterr().err
    assert snapshot(project / "report") == before
    assert sorted(p.name for p in (project / "report").iterdir()) == [
        "README.md", "data", "index.html"]


def test_a_killed_publish_leaves_a_staging_folder_the_next_one_removes(project):
    """The staging folder of a publish killed outright (SIGKILL) is removed by the next."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    host = atomic.owner_prefix("").split("-")[0]
    leftover = project / "report" / f".publish-{host}-{proc.pid}-abc"
    (leftover / "data").mkdir(parents=True)
    run_publish()
    assert not leftover.exists()


@pytest.mark.slow
def test_round_trip_measure_on_a_pack_unpack_on_b_publish_shows_both(tmp_path, project):
    """Machine A's results, packed there and unpacked here, are published beside this
    machine's: the manifest and the report list both environments, and the report still
    renders from its own data."""
    runs_a = tmp_path / "machine-a" / "runs"
    make_study(runs_a, envs=("beta",), machines={"beta": fakes.MACHINES[1]}, **FAKE)
    set_env_field(runs_a, "git_revision", git(project, "rev-parse", "HEAD"))
    set_measured_here(runs_a, project)
    packed = archive.pack(runs_a, "beta", tmp_path / "beta.tar.gz")
    archive.unpack(packed, project / "results" / "runs")
    reaggregate(project)
    result = run_publish()
    envs = {e["env"]: e for e in result.manifest["environments"]}
    assert sorted(envs) == [ENV, "beta"] and result.manifest["cells"]["total"] == 4
    assert envs["beta"]["hardware"]["cpu_model"] == fakes.MACHINES[1].cpu_model
    index = (project / "report" / "index.html").read_text()
    assert fakes.MACHINES[0].cpu_model in index and fakes.MACHINES[1].cpu_model in index
    readme = (project / "report" / "README.md").read_text()
    assert f"| `{ENV}` |" in readme and "| `beta` |" in readme
    assert publish.verify(Path("report")) == []


@pytest.mark.slow
def test_an_environment_with_a_study_of_its_own_is_checked_against_its_config(project):
    """An environment that measured part of the matrix (here: no sweep) is refused as missing
    cells under the study's config, published clean with --env-configfile naming its own
    config (recorded in the manifest, README and command), and a name without cells is an
    error."""
    runs = project / "results" / "runs"
    make_study(runs, envs=("beta",), machines={"beta": fakes.MACHINES[1]}, **FAKE)
    set_env_field(runs, "git_revision", git(project, "rev-parse", "HEAD"))
    set_measured_here(runs, project)
    shutil.rmtree(runs / "beta" / "sweep")
    reaggregate(project)
    own = Path("config") / "container.yaml"
    (project / own).write_text(yaml.safe_dump({"experiments": {"sweep": {"enabled": False}}}))
    with pytest.raises(publish.PublishError, match="1 missing: beta/sweep/cpu-fp32-resident"):
        run_publish()
    with pytest.raises(publish.PublishError, match="names gamma, which has no cells"):
        run_publish(env_configfiles={"gamma": [own]})
    result = run_publish(env_configfiles={"beta": [own]})
    manifest = result.manifest
    assert manifest["checks"]["missing"] == [] and manifest["checks"]["waived"] == []
    assert manifest["env_configfiles"] == {"beta": ["config/container.yaml"]}
    envs = {e["env"]: e for e in manifest["environments"]}
    assert envs["beta"]["configfiles"] == ["config/config.yaml", "config/container.yaml"]
    assert envs[ENV]["configfiles"] == ["config/config.yaml"]
    assert manifest["command"] == (
        "make study && .venv/bin/snakemake --cores all --configfile config/container.yaml && "
        ".venv/bin/mnistbench publish --env-configfile=beta=config/container.yaml")
    readme = (project / "report" / "README.md").read_text()
    assert "`beta` measured a study of its own" in readme
    assert "`config/container.yaml` on top" in readme
    assert "Published despite" not in readme
    assert publish.verify(Path("report")) == []


def test_reproduce_command_gives_snakemake_its_configfiles_after_one_flag():
    """Snakemake gets a study's config files after one --configfile (a repeated flag keeps
    only the last), a SLURM environment's study runs through profiles/slurm, and publish gets
    every config file it must read, one flag each."""
    command = publish.reproduce_command(
        [Path("config/config.yaml"), Path("config/quick.yaml")],
        {"slurm-main": [Path("config/container.yaml"), Path("config/slurm.yaml")]},
        {"slurm-main": {"slurm": {"partitions": {"cpu": ["main"], "cuda": []}}}})
    assert command.split(" && ") == [
        ".venv/bin/snakemake --cores all --configfile config/quick.yaml",
        ".venv/bin/snakemake --profile profiles/slurm --configfile config/quick.yaml "
        "config/container.yaml config/slurm.yaml",
        ".venv/bin/mnistbench publish --configfile config/config.yaml --configfile "
        "config/quick.yaml --env-configfile=slurm-main=config/container.yaml "
        "--env-configfile=slurm-main=config/slurm.yaml"]
    assert publish.reproduce_command([Path("config/config.yaml")]) == \
        "make study && make publish"


# --------------------------------------------------------------------------- the study's cells
def test_expected_cells_follow_the_config_and_each_environments_devices(project):
    """With devices auto an environment that recorded a GPU is expected to have cuda cells,
    one without a GPU only cpu cells; a configfile given later overrides an earlier one."""
    cells, _ = publish.read_cells(project / "results" / "runs")
    quick = project / "config" / "more.yaml"
    quick.write_text(yaml.safe_dump({"devices": "auto",
                                     "experiments": {"sweep": {"batch_sizes": [64, 128]}}}))
    config = publish.load_config([Path("config/config.yaml"), quick])
    assert config["experiments"]["sweep"]["batch_sizes"] == [64, 128]
    assert config["experiments"]["sweep"]["loaders"] == ["resident"]  # from config.yaml
    assert config["seed"] == 0  # the schema's default
    no_gpu = [publish.CellInfo(c.key, c.status, c.schema_version, c.device,
                               {**c.env, "gpu_name": "", "gpu_count": 0}) for c in cells]
    gpu = [publish.CellInfo(c.key, c.status, c.schema_version, c.device,
                            {**c.env, "gpu_name": "NVIDIA H200", "gpu_count": 1})
           for c in cells]
    assert {k[2] for k in publish.expected_cells(config, no_gpu)} == {
        "cpu-fp32-resident-b128-r0", "cpu-fp32-resident-b64-r0"}
    assert "cuda-fp32-resident-b64-r0" in {k[2] for k in publish.expected_cells(config, gpu)}


# --------------------------------------------------------------------------- command line
@pytest.mark.slow
def test_cli_publish_refuses_with_one_error_line_then_publishes_and_checks(project, capsys):
    """`mnistbench publish` exits 1 with one error line when it refuses, 0 when it publishes;
    `publish --check` exits 0 on the publication and 1 once a file changed."""
    (project / TRAINER).write_text("# changed\n")
    assert cli.main(["publish"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mnistbench publish: error: refusing")
    assert cli.main(["publish", "--allow-stale", "--reason", "a test"]) == 0
    assert "2 cells of 1 environment(s)" in capsys.readouterr().out
    assert cli.main(["publish", "--check"]) == 0
    (project / "report" / "README.md").write_text("edited\n")
    assert cli.main(["publish", "--check"]) == 1
    assert "README.md does not match its SHA-256" in capsys.readouterr().err


def test_cli_publish_env_configfile_takes_env_equals_file(project, capsys):
    """`--env-configfile` without ENV=FILE is a usage error (exit 2) naming the value."""
    with pytest.raises(SystemExit) as info:
        cli.main(["publish", "--env-configfile", "config/container.yaml"])
    assert info.value.code == 2
    assert "'config/container.yaml' is not ENV=FILE" in capsys.readouterr().err


def test_makefile_publish_target_runs_mnistbench_publish():
    """`make publish` sets up .venv, then runs mnistbench publish with PUBLISH_FLAGS."""
    proc = subprocess.run(["make", "-n", "publish"], cwd=REPO, capture_output=True, text=True,
                          timeout=60, check=False, env={**os.environ, "PUBLISH_FLAGS": "--x"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "scripts/setup" in lines and ".venv/bin/mnistbench publish --x" in lines


# --------------------------------------------------------------------------- inert text
HOSTILE = "x`y | z\n# Heading <script>alert(1)</script> [link](http://evil) ``` done"


def hostile_manifest() -> dict:
    """A manifest as publish writes it, with results-borne values that try to break out of
    the README's Markdown: backticks, pipes, newlines, HTML, a code fence."""
    env = {"env": "alpha", "cells": 2, "by_status": {"ok": 2, "oom": 0, "unavailable": 0,
                                                      "failed": 0},
           "devices": ["cpu"], "measured_devices": [HOSTILE], "schema_versions": [4],
           "first_started_at": HOSTILE, "last_ended_at": "2026-01-01T00:00:00+00:00",
           "hardware": {"hardware": HOSTILE, "cpu_model": "x"}}
    return {"mnistbench": __version__, "git_revision": "abc```\nrm -rf /",
            "published_at": "2026-01-01T00:00:00+00:00", "command": "make study\n```\nevil",
            "render": {"results": "report/data", "cost_model": "report/data/cost_model.json"},
            "cells": {"total": 2, "by_status": env["by_status"]},
            "dates": {"first_started_at": HOSTILE, "last_ended_at": HOSTILE},
            "environments": [env], "env_configfiles": {"alpha": [HOSTILE]},
            "checks": {"waived": ["stale"], "reason": HOSTILE, "stale": [{}], "missing": [],
                       "failed": []}}


def test_values_in_the_readme_are_inert(tmp_path):
    """Every value from the results or the command line is in a code span on one line, with
    pipes escaped in tables, and the code blocks are fenced longer than any backtick run in
    them: no value adds a row, a cell, a heading, HTML outside a code span, or ends a code
    block."""
    text = publish.readme(hostile_manifest())
    lines = text.splitlines()
    template = publish.readme({**hostile_manifest(), "command": "c"})
    headings = [line for line in lines if line.startswith("#")]
    assert headings == [line for line in template.splitlines() if line.startswith("#")]
    assert headings == ["# mnistbench: the published study", "## What was measured where",
                        "## Files", "## Reproduce", "## Add your machine"]
    rows = [line for line in lines if line.startswith("| `alpha`")]
    assert len(rows) == 1 and rows[0].replace("\\|", "").count("|") == 7  # six cells
    assert publish.inert_cell(HOSTILE) in rows[0]
    span = publish.inert(HOSTILE)
    assert span == "````x`y | z # Heading <script>alert(1)</script> [link](http://evil) " \
        "``` done````"
    assert f"(stale): {span}." in text  # the reason, outside a table: its pipe as it is
    assert text.count("<script>") == text.count(span) + rows[0].count("<script>")
    fences = [i for i, line in enumerate(lines) if line.startswith("```")]
    assert [lines[i] for i in fences] == ["````sh", "````", "````sh", "````"]
    inside = lines[fences[0] + 1:fences[1]]
    assert inside[-1] == "make study ``` evil"  # on one line, inside its block
    assert "git checkout abc``` rm -rf /" not in text  # the revision's first part only


def test_inert_spans_survive_any_backtick_run():
    """A value of backticks, or starting or ending with one, gets a longer fence and
    padding; an empty value is a one-space span."""
    assert publish.inert("a``b") == "```a``b```"
    assert publish.inert("`x`") == "`` `x` ``"
    assert publish.inert("") == "` `"
    assert publish.inert("a\r\nb\x00c") == "`a bc`"
    assert publish.inert_cell("a|b") == "`a\\|b`"
    assert publish.fence_for("x ```` y") == "`````"


@pytest.mark.parametrize(("name", "words"), [
    ("/etc/hostname", "an absolute path"),
    ("../outside.txt", "climbs out with '..'"),
    ("data/../../outside.txt", "climbs out with '..'"),
    ("data/link", "leads out through a symbolic link"),
])
def test_publish_check_reads_only_paths_inside_report(project, name, words):
    """`publish --check` refuses a manifest that lists a path outside report/ (absolute, with
    '..', or through a symbolic link) and does not read it."""
    run_publish()
    (project / "outside.txt").write_text("secret\n")
    (project / "report" / "data" / "link").symlink_to(project / "outside.txt")
    path = project / "report" / "data" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["files"][name] = {"bytes": 7, "sha256": sha256(project / "outside.txt")}
    path.write_text(json.dumps(manifest))
    problems = publish.verify(Path("report"))
    assert any(f"lists {name!r}, a" in p and words in p and "it was not read" in p
               for p in problems), problems


def test_publish_check_renders_only_with_a_cost_model_inside_report(project):
    """A manifest whose render.cost_model lies outside report/ is refused before rendering
    (the check reads nothing outside report/)."""
    run_publish()
    path = project / "report" / "data" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["render"]["cost_model"] = "results/cost_model.json"
    path.write_text(json.dumps(manifest))
    problems = publish.verify(Path("report"))
    assert any("render.cost_model 'results/cost_model.json' is not inside report" in p
               for p in problems), problems


@pytest.mark.parametrize(("args", "words"), [
    (["--check", "--allow-failed"], "--check checks the publication in --report and publishes "
     "nothing: --allow-failed would have no effect"),
    (["--check", "--reason", "x", "--cost-model", "m.json"], "--reason, --cost-model would"),
    (["--check", "--configfile", "c.yaml"], "--configfile would have no effect"),
    (["--reason", "because"], "--reason says why checks were waived, but no --allow-missing"),
])
def test_contradictory_publish_flags_are_usage_errors(tmp_path, capsys, args, words):
    """`publish --check` with a flag of a publication, and --reason with no waiver, exit 2
    naming the flags; nothing is read or written."""
    with pytest.raises(SystemExit) as info:
        cli.main(["publish", "--report", str(tmp_path / "report"), *args])
    assert info.value.code == 2
    assert words in capsys.readouterr().err
    assert not (tmp_path / "report").exists()


@pytest.mark.slow
def test_keep_published_keeps_environments_whose_cells_are_not_here(tmp_path, project):
    """A machine measured once and gone (its cells published, its folders lost with its
    session): with --keep-published, a publication of this machine's new cells keeps it, rows
    and checks as published; without the flag it is gone; tables of other columns are
    refused."""
    runs = project / "results" / "runs"
    make_study(runs, envs=("lent-gpu",), machines={"lent-gpu": fakes.MACHINES[1]}, **FAKE)
    set_env_field(runs, "git_revision", git(project, "rev-parse", "HEAD"))
    set_measured_here(runs, project)
    reaggregate(project)
    first = run_publish()
    published = {name: (project / "report" / "data" / name).read_text()
                 for name in ("summary.csv", "epochs.csv", "resources.csv")}
    shutil.rmtree(runs / "lent-gpu")  # the session ended: only its publication is left
    reaggregate(project)
    result = run_publish(keep_published=True)
    manifest = result.manifest
    assert sorted(e["env"] for e in manifest["environments"]) == [ENV, "lent-gpu"]
    assert manifest["cells"]["total"] == first.manifest["cells"]["total"]
    (kept,) = manifest["kept"]
    assert kept["env"] == "lent-gpu" and kept["cells"] == 2
    assert kept["published_at"] == first.manifest["published_at"]
    # Every table is, byte for byte, what the first publication (both machines' cells) had.
    for name, text in published.items():
        assert (project / "report" / "data" / name).read_text() == text, name
    readme = (project / "report" / "README.md").read_text()
    assert "Environment `lent-gpu` (2 cells) is kept as it was published on" in readme
    assert fakes.MACHINES[1].cpu_model in (project / "report" / "index.html").read_text()
    assert publish.verify(Path("report")) == []
    # Without the flag, the publication is what results/ holds.
    assert [e["env"] for e in run_publish().manifest["environments"]] == [ENV]
    # An older publication, whose summary lacks the columns a later schema added, is kept
    # with those columns empty (as an older summary.json is read).
    added = [c for c in schema.summary_columns() if schema.ADDED_IN.get(c) == 5]
    old = {name: text for name, text in published.items()}
    rows = list(csv.DictReader(io.StringIO(old["summary.csv"])))
    older = [c for c in schema.summary_columns() if c not in added]
    for name, text in old.items():
        (project / "report" / "data" / name).write_text(text)
    with (project / "report" / "data" / "summary.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, older, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    result = run_publish(keep_published=True)
    assert [e["env"] for e in result.manifest["environments"]] == [ENV, "lent-gpu"]
    kept_rows = [r for r in csv.DictReader((project / "report" / "data" / "summary.csv").open())
                 if r["env"] == "lent-gpu"]
    assert len(kept_rows) == 2 and all(r[c] == "" for r in kept_rows for c in added)
    assert all(r["samples_per_s"] for r in kept_rows)
    # A publication whose tables have other columns cannot be kept as it is.
    run_publish()
    run_publish(keep_published=True)  # nothing of lent-gpu left to keep: still fine
    summary = project / "report" / "data" / "summary.csv"
    good = summary.read_text()
    summary.write_text(good.replace("env,", "environment,", 1))
    with pytest.raises(publish.PublishError, match="other columns than this mnistbench"):
        run_publish(keep_published=True)
    summary.write_text(good)
    (project / "report" / "data" / "epochs.csv").write_text("")  # no header at all
    with pytest.raises(publish.PublishError, match=r"epochs\.csv has other columns"):
        run_publish(keep_published=True)
    (project / "report" / "data" / "manifest.json").write_text("[]")
    with pytest.raises(publish.PublishError, match="is not a JSON object"):
        run_publish(keep_published=True)
