"""The project's own files agree with the code: config/README.md is what
scripts/config-readme makes of the config schema, the pyproject's dev extra is
envs/pip/dev.txt, CHANGELOG.md, CITATION.cff and the workflow catalog's file name the
versions and facts that hold, a file of code over 800 lines gives its reason, tests/
mirrors the subpackages, and the front page stays short with every page of docs/ in its index."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_config_readme_is_generated_from_the_schema():
    script = runpy.run_path(str(ROOT / "scripts" / "config-readme"))
    assert (ROOT / "config" / "README.md").read_text(encoding="utf-8") == script["render"](), (
        "config/README.md is stale: run scripts/config-readme")


def test_every_top_level_key_and_experiment_key_is_listed():
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    text = (ROOT / "config" / "README.md").read_text()
    listed = set(re.findall(r"^\| `([^`]+)` \|", text, re.M))
    assert set(schema["properties"]) <= listed
    for name, spec in schema["properties"]["experiments"]["properties"].items():
        assert {f"experiments.{name}.{key}" for key in spec["properties"]} <= listed
    for shipped in ("config.yaml", "quick.yaml", "container.yaml", "slurm.yaml"):
        assert f"`{shipped}`" in text


def _pins(path: Path) -> list[str]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("-")]


def test_the_dev_extra_is_the_dev_requirements():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["dev"] == _pins(ROOT / "envs" / "pip" / "dev.txt")
    assert "Topic :: System :: Benchmark" in project["classifiers"] and project["keywords"]


def test_changelog_citation_and_catalog_name_what_holds():
    from mnistbench import __version__, publish
    from mnistbench.core import schema
    from mnistbench.results import archive

    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"Schema {schema.SCHEMA_VERSION}" in changelog
    assert f"Archive version {archive.ARCHIVE_VERSION}" in changelog
    assert f"Publication version {publish.PUBLICATION_VERSION}" in changelog
    assert f"({__version__})" in changelog
    for version in range(2, schema.SCHEMA_VERSION + 1):  # every added field is recorded
        added = [name for name, v in schema.ADDED_IN.items() if v == version]
        assert all(f"`{name}`" in changelog for name in added), version
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["version"] == __version__ and citation["license"] == "MIT"
    catalog = yaml.safe_load((ROOT / ".snakemake-workflow-catalog.yml").read_text())
    # claimed only where it has run: no deployment method has (docs/workflow.md)
    assert not any(catalog["usage"]["software-stack-deployment"].values())
    assert catalog["usage"]["report"] is True
    assert 'report: "workflow/report/workflow.rst"' in (ROOT / "Snakefile").read_text()


#: Past this many lines a file of code needs a reason in LONG_FILES: a cohesive long file with
#: banners beats a split made to meet a number (issue 40), but length should be a choice.
LONG_LINES = 800
#: File (relative to the project) -> why it is longer than LONG_LINES.
LONG_FILES: dict[str, str] = {
    "src/mnistbench/report/plots.py": "every chart of the report drawn with matplotlib, one "
                                      "function a chart on shared styles; a split would "
                                      "separate the styles from their only users",
    "src/mnistbench/report/sections/claims.py": "the blog's claims, each beside its rule and "
                                                "its check: one table read top to bottom",
    "src/mnistbench/results/validate.py": "the one reader of a cell and of a measured "
                                          "limit: every field's spec and physical bound "
                                          "(ranges, enums, the device's precisions, a CPU's "
                                          "ceiling) beside the checks that apply them, which "
                                          "results/rows.py shares for the tables",
    "tests/workflow/test_workflow.py": "the real Snakemake runs of one tiny study share its "
                                       "fixtures (a study run once per session, read by every "
                                       "test); split, each file would run its own study",
}


def code_files() -> list[Path]:
    """Every Python module, test, script and rule file of the project."""
    return [*ROOT.glob("src/**/*.py"), *ROOT.glob("tests/**/*.py"), *ROOT.glob("benchmarks/*.py"),
            *ROOT.glob("workflow/rules/*.smk"), ROOT / "Snakefile",
            *(p for p in ROOT.glob("scripts/*") if p.is_file() and p.suffix != ".txt")]


def long_files_without_a_reason(lengths: dict[str, int], reasons: dict[str, str]) -> list[str]:
    """The files over LONG_LINES with no reason, and the reasons no longer needed."""
    over = {path for path, n in lengths.items() if n > LONG_LINES}
    return ([f"{p}: {lengths[p]} lines and no reason in LONG_FILES" for p in sorted(over)
             if not reasons.get(p, "").strip()]
            + [f"{p}: in LONG_FILES but {lengths.get(p, 0)} lines: drop it from the table"
               for p in sorted(set(reasons) - over)])


def test_every_long_file_of_code_gives_its_reason():
    """A file of code over LONG_LINES lines is in LONG_FILES with why it is one file, and the
    table names no file that is no longer long."""
    files = code_files()
    assert len(files) > 100
    lengths = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
               for p in files}
    assert long_files_without_a_reason(lengths, LONG_FILES) == []


def test_a_long_file_without_a_reason_is_caught():
    lengths = {"src/a.py": LONG_LINES + 1, "src/b.py": LONG_LINES + 1, "src/c.py": 10}
    assert long_files_without_a_reason(lengths, {"src/a.py": "one state machine"}) == [
        f"src/b.py: {LONG_LINES + 1} lines and no reason in LONG_FILES"]
    assert long_files_without_a_reason(lengths, {"src/a.py": "x", "src/b.py": " ",
                                                 "src/c.py": "x"}) == [
        f"src/b.py: {LONG_LINES + 1} lines and no reason in LONG_FILES",
        "src/c.py: in LONG_FILES but 10 lines: drop it from the table"]


def test_ruff_lints_every_python_file_of_the_package_and_its_tests():
    """No exclude of pyproject.toml hides code: the output folders results/ and report/ share
    their names with subpackages, and a bare name once left both packages unlinted."""
    import subprocess
    import sys

    ruff = Path(sys.executable).with_name("ruff")
    proc = subprocess.run([str(ruff), "check", "--show-files", "--quiet"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    linted = {Path(line) for line in proc.stdout.splitlines() if line.endswith(".py")}
    assert linted, proc.stderr
    code = [*ROOT.glob("src/**/*.py"), *ROOT.glob("tests/**/*.py"), *ROOT.glob("benchmarks/*.py")]
    assert sorted(str(p.relative_to(ROOT)) for p in code if p not in linted) == []


def test_mypy_checks_every_module_of_the_package(monkeypatch):
    """scripts/typecheck's mypy finds every module of src/mnistbench: no exclude of
    [tool.mypy] hides one (as a bare folder name once hid two packages from ruff), and no
    module section silences one's errors."""
    from mypy.main import process_options

    targets = runpy.run_path(str(ROOT / "scripts" / "typecheck"))["TARGETS"]
    monkeypatch.chdir(ROOT)  # as scripts/typecheck runs it: pyproject.toml read from here
    sources, options = process_options(list(targets))
    checked = {Path(source.path).resolve() for source in sources if source.path}
    package = sorted(ROOT.glob("src/mnistbench/**/*.py"))
    assert len(package) > 50
    assert [str(p.relative_to(ROOT)) for p in package if p not in checked] == []
    assert [pattern for pattern, settings in options.per_module_options.items()
            if settings.get("ignore_errors")] == []


def test_tests_mirror_the_subpackages():
    """tests/ has a folder per subpackage of src/mnistbench (its unit tests), and each test
    folder is one of those or a part of the project outside src/ (workflow/, benchmarks/)."""
    subpackages = {p.parent.name for p in ROOT.glob("src/mnistbench/*/__init__.py")}
    folders = {p.parent.name for p in ROOT.glob("tests/*/__init__.py")}
    assert subpackages <= folders, f"no test folder for {sorted(subpackages - folders)}"
    assert folders - subpackages <= {"workflow", "benchmarks"}, sorted(folders - subpackages)


#: The front page's length: about one screen plus what a newcomer needs first; the rest is
#: in docs/ (docs/README.md is the index).
README_MAX_LINES = 200
LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)")


def test_readme_is_short_and_the_docs_index_links_every_page():
    """README.md has at most README_MAX_LINES lines and links docs/README.md, which links
    every page of docs/."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_MAX_LINES, "move the details to docs/"
    assert "docs/README.md" in LINK.findall(readme)
    index = ROOT / "docs" / "README.md"
    linked = {(index.parent / target).resolve() for target in LINK.findall(index.read_text())}
    pages = {p.resolve() for p in (ROOT / "docs").glob("*.md") if p != index}
    assert pages - linked == set(), f"docs/README.md does not link {sorted(pages - linked)}"


def test_every_markdown_link_to_a_page_of_the_project_resolves():
    """Each relative link to a .md file in README.md, docs/, benchmarks/ and config/ names a
    file that exists (a page moved or renamed takes its links with it)."""
    pages = [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("benchmarks/*.md"),
             *ROOT.glob("config/*.md")]
    broken = [f"{page.relative_to(ROOT)}: {target}" for page in pages
              for target in LINK.findall(page.read_text(encoding="utf-8"))
              if "://" not in target and not (page.parent / target).exists()]
    assert broken == []
