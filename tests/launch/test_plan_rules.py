"""Tests of the rule files themselves (Snakefile, workflow/rules/*.smk): while Snakemake
builds the DAG they import only the standard-library parts of the package, and every planning
error of mnistbench.launch.plan reaches Snakemake as one WorkflowError paragraph. The
planning functions are tested in tests/launch/test_plan.py."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from snakemake.exceptions import WorkflowError

from mnistbench.launch import plan

REPO = Path(__file__).resolve().parents[2]
RULE_FILES = [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]


def rule_file_imports() -> set[str]:
    """Every mnistbench module the Snakefile and the rule files import, at any level
    (``from mnistbench.core import study`` names mnistbench.core.study)."""
    found = set()
    pattern = re.compile(r"^\s*(?:from\s+(mnistbench[\w.]*)\s+import\s+([\w, ]+)"
                         r"|import\s+(mnistbench[\w.]*))", re.MULTILINE)
    for path in RULE_FILES:
        for module, names, plain in pattern.findall(path.read_text()):
            if plain:
                found.add(plain)
                continue
            for name in (n.strip() for n in names.split(",")):
                candidate = f"{module}.{name}"
                base = REPO / "src" / Path(*candidate.split("."))
                found.add(candidate if base.with_suffix(".py").exists() or base.is_dir()
                          else module)
    return found


#: What the rule files may import while Snakemake builds the DAG: the standard-library-only
#: parts of the package (tests/test_layers.py holds their imports).
PARSE_TIME = ("mnistbench.core", "mnistbench.data.files", "mnistbench.launch")


def test_the_rule_files_import_only_standard_library_modules_at_parse_time():
    """Every module the rule files import at the top (so when the DAG is built) is of core,
    data.files or launch, and they all import in a fresh interpreter where numpy, PyYAML,
    jsonschema, pandas and torch cannot be imported. (The cost model, which needs them, is
    written by the cost_model job's `mnistbench cost-model`, in its own process.) A venv
    holding only Snakemake builds the DAG: tests/workflow/test_workflow.py, marked slow."""
    found = rule_file_imports()
    assert "mnistbench.results.cost" not in found
    top = sorted(found)
    assert "mnistbench.launch.plan" in top
    bad = [m for m in top if not any(m == p or m.startswith(f"{p}.") for p in PARSE_TIME)]
    assert not bad, bad
    blocked = ["numpy", "yaml", "jsonschema", "pandas", "torch"]
    code = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        "import importlib\n"
        f"for name in {top!r}: importlib.import_module(name)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=REPO / "src", timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rules = "".join(p.read_text() for p in (REPO / "workflow" / "rules").glob("*.smk"))
    assert "mnistbench.results" not in rules and "mnistbench cost-model" in rules


def raising_functions() -> set[str]:
    """Names of plan's functions and Matrix methods that raise PlanError, directly or through
    another of them (``Matrix.cell`` for a method)."""
    tree = ast.parse(Path(plan.__file__).read_text())
    bodies: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            bodies[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    bodies[f"{node.name}.{item.name}"] = item

    def calls(node: ast.AST) -> set[str]:
        names = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                func = sub.func
                if isinstance(func, ast.Name):
                    names.add(func.id)
                elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                    names.add(f"{'Matrix' if func.value.id in ('self', 'cls') else func.value.id}"
                              f".{func.attr}")
        return names

    raising = {name for name, node in bodies.items()
               if any(isinstance(n, ast.Raise) and "PlanError" in ast.unparse(n)
                      for n in ast.walk(node))}
    while True:
        more = {name for name, node in bodies.items()
                if name not in raising and calls(node) & raising}
        if not more:
            return raising
        raising |= more


def test_every_planning_error_reaches_snakemake_as_a_workflow_error():
    """Every call in the rule files of a plan function that can raise PlanError goes through
    planned() (common.smk), which raises it as a WorkflowError: one paragraph, no traceback
    (real runs that show it: tests/workflow/test_workflow.py, tests/launch/test_machinelock.py)."""
    raising = raising_functions()
    assert {"environment_name", "timing_lock_file", "check_docker_devices", "slurm_node_cpus",
            "Matrix.cell", "Matrix.of_config", "study_envs", "other_summaries",
            "docker_engine_version", "check_executor", "image_dockerfile"} <= raising
    unwrapped = []
    for path in RULE_FILES:
        text = path.read_text()
        for match in re.finditer(r"(?<![.\w])(plan\.(\w+(?:\.\w+)?)|MATRIX\.(\w+))", text):
            name = match.group(2) or f"Matrix.{match.group(3)}"
            if name not in raising:
                continue
            before = text[:match.start()].rstrip()
            if not before.endswith("planned("):
                line = text.count("\n", 0, match.start()) + 1
                unwrapped.append(f"{path.relative_to(REPO)}:{line}: {match.group(1)}")
    assert not unwrapped, "\n".join(unwrapped)


def test_planned_raises_a_plan_error_as_a_workflow_error():
    """common.smk's planned(), run here from the rule file's own source."""
    source = (REPO / "workflow" / "rules" / "common.smk").read_text()
    found = re.search(r"^def planned\(.*?(?=^\S)", source, re.MULTILINE | re.DOTALL)
    assert found, "common.smk defines no planned()"
    namespace = {"plan": plan, "WorkflowError": WorkflowError}
    exec(compile(found.group(0), "common.smk", "exec"), namespace)
    assert namespace["planned"](plan.pin_memory_flag, True) == "--pin-memory"
    with pytest.raises(WorkflowError) as caught:
        namespace["planned"](plan.check_executor, "local", True)
    assert caught.value.__suppress_context__
    assert "config executor is slurm" in str(caught.value)


def rule_shell(rule: str) -> str:
    """The shell command of ``rule`` in the rule files: the string its ``shell:`` holds."""
    for path in RULE_FILES:
        text = path.read_text()
        found = re.search(rf"^rule {rule}:\n.*?^    shell:\n((?:        .*\n?)+)", text,
                          re.MULTILINE | re.DOTALL)
        if found:
            return ast.literal_eval(f"({found.group(1)})")
    raise AssertionError(f"no rule {rule} with a shell: in the rule files")


@pytest.mark.parametrize(("rule", "command"), [("bench", "run-cell"), ("peak", "run-peak")])
def test_the_timed_rules_are_one_mnistbench_command_each(rule, command):
    """The bench and peak rules' shell is one `mnistbench` command on one line, with no shell
    logic of its own: the lock, the wait and the exit codes are the package's
    (mnistbench.launch.timedjob, tests/launch/test_timedjob.py), so the workflow digest of
    the bench rule covers its one command."""
    shell = rule_shell(rule)
    assert shell.startswith(f"mnistbench {command} --lock {{params.lock:q}} --log {{log:q}} ")
    assert "\n" not in shell.strip()
    for logic in (";", "&&", "||", "|", "$(", "`", " if ", "case ", "exit ", "flock", "unset"):
        assert logic not in shell, (rule, logic)
    with pytest.raises(AssertionError, match="no rule nosuch"):
        rule_shell("nosuch")
