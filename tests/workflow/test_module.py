"""The workflow as the Snakemake catalog's users run it: as a module of a Snakefile of their
own (`module mnistbench: snakefile: ...` and `use rule * from mnistbench`), in a fresh folder
that holds only config/config.yaml and workflow/Snakefile, the way `snakedeploy
deploy-workflow` lays it out (docs/workflow.md). Its dry run plans the quick study and ends
with the estimate; its run goes end to end to the report, with the workflow's hooks (the
software check, the fork server, the estimate) running and nothing written into the checkout.
Also: no rule file resolves a path through ``workflow.basedir`` (the deploying Snakefile's
folder in a module) or the working directory."""

from __future__ import annotations

import copy
import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mnistbench.launch import estimate

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = Path(sys.executable).parent / "snakemake"
ENV = "module-test"
RUN_TIMEOUT_S = 900

# What `snakedeploy deploy-workflow` (0.17.1) writes as workflow/Snakefile. Given the GitHub
# repository it declares `snakefile: github("OWNER/mnistbench", path="Snakefile", tag=...)`,
# which this workflow refuses (its rules need the checkout's src/ and rule files: a local
# clone). Given a local path or a local git repository it works offline (it clones it), but
# writes `snakefile: "Snakefile"`, the path inside the repository, which Snakemake resolves
# next to the deploying Snakefile, i.e. to itself. So the module's snakefile here is the
# checkout's own Snakefile, absolute, as docs/workflow.md tells people to write it.
DEPLOYED_SNAKEFILE = '''from snakemake.utils import min_version


min_version("6.10.0")


configfile: "config/config.yaml"


# declare https://github.com/OWNER/mnistbench as a module
module mnistbench:
    snakefile:
        "{snakefile}"
    config:
        config


# use all rules from https://github.com/OWNER/mnistbench
use rule * from mnistbench
'''


def merged(base: dict, top: dict) -> dict:
    """``top`` over ``base``, mappings merged key by key (as Snakemake loads --configfile)."""
    out = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def quick_study(data_dir: Path, workdir: Path) -> dict:
    """The quick study (config/config.yaml, config/quick.yaml on top), trimmed to run in a
    minute or two: one repeat, synthetic data, a few steps; every experiment kept."""
    load = lambda name: yaml.safe_load((REPO / "config" / name).read_text())  # noqa: E731
    config = merged(load("config.yaml"), load("quick.yaml"))
    config.update(env=ENV, data_dir=str(data_dir), default_mirrors=False, devices=["cpu"],
                  lock_file=str(workdir / "timed-cell.lock"))
    for name, spec in config["experiments"].items():
        spec.update(repeats=1, train_limit=1024, test_limit=128)
        if name != "convergence":
            spec.update(max_steps=2, warmup_steps=1)
    config["experiments"]["tips"]["tips"] = ["resident", "amp-bf16"]
    return config


@pytest.fixture(scope="module")
def deployed(tmp_path_factory, tiny_mnist) -> Path:
    """A fresh folder holding only config/config.yaml and workflow/Snakefile."""
    root = tmp_path_factory.mktemp("deployed")
    (root / "workflow").mkdir()
    (root / "config").mkdir()
    (root / "workflow" / "Snakefile").write_text(
        DEPLOYED_SNAKEFILE.format(snakefile=REPO / "Snakefile"))
    (root / "config" / "config.yaml").write_text(yaml.safe_dump(quick_study(tiny_mnist, root)))
    return root


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    """``snakemake ARGS`` in ``workdir`` with no --snakefile: it finds workflow/Snakefile."""
    return subprocess.run([str(SNAKEMAKE), *args], cwd=workdir, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=RUN_TIMEOUT_S,
                          check=False)


def bench_cells(output: str) -> set[str]:
    """experiment/cell of every bench job a snakemake run printed."""
    found = re.findall(r"wildcards: env=[^,]+, experiment=([^,\s]+), cell=([^,\s]+)", output)
    return {f"{experiment}/{cell}" for experiment, cell in found}


@pytest.mark.slow
def test_a_deployed_module_dry_runs_then_runs_the_quick_study_end_to_end(deployed):
    before = sorted(p.name for p in deployed.rglob("*"))
    assert before == ["Snakefile", "config", "config.yaml", "workflow"]

    dry = snakemake(deployed, "--dry-run")
    assert dry.returncode == 0, dry.stdout
    planned = bench_cells(dry.stdout)
    experiments = {cell.split("/")[0] for cell in planned}
    assert experiments == {"headline", "threads", "convergence", "sweep", "tips", "scale"}, \
        dry.stdout
    last = dry.stdout.strip().splitlines()[-1]
    assert last.startswith(f"estimate: {len(planned)} cells, about "), dry.stdout[-2000:]
    assert not (deployed / "results").exists()

    run = snakemake(deployed, "--cores", "2")
    assert run.returncode == 0, run.stdout[-6000:]
    out = run.stdout
    # End to end: every planned cell ok, the tables, the report.
    with open(deployed / "results" / "summary.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {f"{r['experiment']}/{r['cell']}" for r in rows} == planned
    assert {r["status"] for r in rows} == {"ok"}
    assert (deployed / "results" / "report" / "index.html").stat().st_size > 10_000
    # The workflow's hooks ran in the module: the fork server started the cells, an
    # estimate from a default limit came before any job, the measured one after the peak
    # jobs (the watcher looks once a second: before any cell ends) and a line after each.
    assert (deployed / "results" / "logs" / "forkserver.log").exists()
    head = f"estimate: {len(planned)} cells, about "
    first = out.index(head)
    assert first < out.index("rule peak:") < out.index("rule bench:"), out[-6000:]
    assert "a default limit (not measured yet)" in out[first:first + 400]
    measured = out.index(head, first + 1)
    assert "the measured limit" in out[measured:measured + 400]
    assert out.index("rule peak:") < measured < out.index("estimate: 1/"), out[-6000:]
    done = re.findall(r"^estimate: (\d+)/(\d+) cells done", out, re.MULTILINE)
    assert [int(d) for d, _ in done] == list(range(1, len(planned) + 1))
    plan = estimate.Plan.from_json(
        (deployed / "results" / "logs" / "estimate" / "plan.json").read_text())
    assert {w.name for w in plan.cells} == planned
    # The estimate reached Snakemake's own log too.
    logs = sorted((deployed / ".snakemake" / "log").glob("*.snakemake.log"))
    assert "cells done" in logs[-1].read_text()
    # Nothing of this study went into the checkout.
    assert not (REPO / "results" / "runs" / ENV).exists()


def test_no_rule_file_resolves_a_path_through_workflow_basedir_or_the_working_directory():
    """In a module, workflow.basedir is the deploying Snakefile's folder, and the working
    directory is the user's: the project's files resolve through PROJECT (the Snakefile's
    own folder) or through paths relative to the rule file (schemas, conda env, report)."""
    files = [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]
    for path in files:
        text = "\n".join(line.split("#")[0] for line in path.read_text().splitlines())
        assert "workflow.basedir" not in text, path
        assert "os.getcwd" not in text and "Path.cwd" not in text, path
    snakefile = (REPO / "Snakefile").read_text()
    assert "PROJECT = Path(workflow.current_basedir" in snakefile
