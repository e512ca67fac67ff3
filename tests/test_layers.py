"""The package's layers (src/mnistbench/*/__init__.py, docs/architecture.md), held over the
source with ``ast``: which subpackage may import which, which third-party modules each may
import at all, no import cycle anywhere under src/, no module using another's private names
(``_x``), and the torch-free layers importing without torch in a fresh interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "mnistbench"

#: layer -> the layers it may import ("" is the package root, which holds only __version__).
ALLOWED = {
    "core": {"", "core"},
    "data": {"", "core", "data"},
    "measure": {"", "core", "data", "measure"},
    "launch": {"", "core", "launch"},
    "results": {"", "core", "results"},
    "report": {"", "core", "results", "report"},
}
#: The layer of the top: every module and package outside the layers (publish/, cli/,
#: console, ...). It may import every layer; no layer imports it.
TOP = "top"
#: The packages of the top (the rest of it is modules); cli/ has a third-party rule of its own.
TOP_PACKAGES = {"publish", "cli"}
#: Imports allowed outside a layer's rule, each with its reason.
EXCEPTIONS = {
    # The forked child of the fork server enters the timed process (and nothing else).
    ("launch.forkserver", "measure.entry"),
}
#: (module, the module it takes a private name from, the name) -> why it may, until fixed.
PRIVATE_EXCEPTIONS: dict[tuple[str, str, str], str] = {}
#: Third-party modules a layer may import (the standard library is always allowed).
THIRD_PARTY = {
    "core": set(),
    "data": {"numpy"},
    "measure": {"numpy", "torch", "torchvision", "psutil", "pynvml", "amdsmi", "PIL"},
    "launch": set(),
    "results": {"numpy", "pandas", "yaml", "jsonschema"},
    # PIL: matplotlib's own image library, for the charts' palette PNGs (report.plots)
    "report": {"numpy", "pandas", "matplotlib", "seaborn", "jinja2", "PIL"},
    # the command parses arguments; what it runs comes through the layers
    "cli": set(),
}
#: Modules whose every import must be stdlib, whatever their layer allows (the workflow
#: imports them when it plans a study).
STDLIB_ONLY = {"data.files"}


def modules() -> dict[str, Path]:
    """Dotted name below mnistbench (``core.schema``, ``cli``) -> file."""
    found = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" and len(rel.parts) > 1 else rel.parts
        found[".".join(parts)] = path
    return found


def imported_from(node: ast.ImportFrom, package: str) -> str:
    """The absolute module a ``from ... import`` names, relative imports resolved against
    ``package`` (below mnistbench)."""
    if not node.level:
        return node.module or ""
    base = ["mnistbench", *package.split(".")] if package else ["mnistbench"]
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imports(path: Path, name: str, mods: dict[str, Path]) -> list[tuple[str, int]]:
    """Every module ``path`` imports (function-level imports included), with its line: names
    below mnistbench as ``mnistbench.X.Y`` (``mods``: :func:`modules`), others by their
    top-level name."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = imported_from(node, package)
            if module == "mnistbench" or module.startswith("mnistbench."):
                for alias in node.names:  # `from mnistbench.core import schema` names a module
                    sub = f"{module}.{alias.name}".removeprefix("mnistbench.")
                    out.append((f"mnistbench.{sub}" if sub in mods else module, node.lineno))
            else:
                out.append((module, node.lineno))
    return out


def layer_of(name: str) -> str:
    """The layer of a module below mnistbench: its subpackage of ALLOWED, ``""`` for the
    package root, a top package with a rule of its own (:data:`THIRD_PARTY`: cli), else
    :data:`TOP`."""
    first = name.split(".")[0]
    if first in ALLOWED:
        return first
    if name in ("", "__init__"):
        return ""
    return first if first in THIRD_PARTY else TOP


def internal(target: str) -> str:
    """``mnistbench.core.schema`` -> ``core.schema``; the root -> ``""``."""
    return target.removeprefix("mnistbench").lstrip(".")


def test_every_layer_has_its_rule_in_its_docstring():
    for layer in ALLOWED:
        doc = ast.get_docstring(ast.parse((PKG / layer / "__init__.py").read_text())) or ""
        assert "Import rule:" in doc, f"{layer}/__init__.py states no import rule"
    packages = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert set(ALLOWED) | TOP_PACKAGES == packages


def test_layers_import_only_what_their_rule_allows():
    stdlib = sys.stdlib_module_names
    bad = []
    mods = modules()
    for name, path in mods.items():
        layer = layer_of(name)
        for target, line in imports(path, name, mods):
            where = f"{path.relative_to(SRC)}:{line}"
            top = target.split(".")[0]
            if top == "mnistbench":
                inner = internal(target)
                if layer in ("", TOP) or layer not in ALLOWED:  # the top imports every layer
                    continue
                if (name, inner) in EXCEPTIONS:
                    continue
                if layer_of(inner) not in ALLOWED[layer] and inner != "":
                    bad.append(f"{where}: {name} ({layer}) imports {inner}")
            elif top in stdlib or top == "__future__":
                continue
            elif name in STDLIB_ONLY or (layer in THIRD_PARTY and top not in THIRD_PARTY[layer]):
                bad.append(f"{where}: {name} ({layer}) imports the third-party {top}")
    assert not bad, "\n".join(bad)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a list of modules, or None."""
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt, [*path, nxt])):
                return cycle
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [start])):
            return cycle
    return None


def test_find_cycle_finds_a_planted_cycle():
    """The cycle finder reports a cycle it is given (so the next test can fail)."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_under_src():
    """No module under src/mnistbench imports, directly or through others, itself (imports
    inside functions count)."""
    mods = modules()
    graph = {name: {internal(t) for t, _ in imports(path, name, mods)
                    if internal(t) in mods and internal(t) != name}
             for name, path in mods.items()}
    assert find_cycle(graph) is None


def test_the_rule_checker_catches_a_planted_violation(tmp_path, monkeypatch):
    """A measure module importing the report, a results module importing the top (publish/),
    a core module importing numpy or the CLI, and a CLI module importing torch itself are all
    reported (so the rule test can fail); the CLI importing a layer is not."""
    fake = tmp_path / "mnistbench"
    for layer in [*ALLOWED, "cli"]:
        (fake / layer).mkdir(parents=True)
        (fake / layer / "__init__.py").write_text('"""Import rule: none."""\n')
    (fake / "measure" / "bad.py").write_text("from mnistbench.report import render\n")
    (fake / "core" / "heavy.py").write_text("import numpy\n")
    (fake / "results" / "up.py").write_text("import mnistbench.publish.checks\n")
    (fake / "core" / "up.py").write_text("from mnistbench import cli\n")
    (fake / "report" / "render.py").write_text("")
    (fake / "cli" / "train.py").write_text("import torch\nfrom mnistbench.measure import bad\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", fake)
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    with pytest.raises(AssertionError) as caught:
        test_layers_import_only_what_their_rule_allows()
    assert "measure.bad (measure) imports report.render" in str(caught.value)
    assert "core.heavy (core) imports the third-party numpy" in str(caught.value)
    assert "results.up (results) imports publish.checks" in str(caught.value)
    assert "core.up (core) imports cli" in str(caught.value)
    assert "cli.train (cli) imports the third-party torch" in str(caught.value)
    assert "imports measure.bad" not in str(caught.value)


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(path: Path, name: str, mods: dict[str, Path]) -> list[tuple[str, str, int]]:
    """Every private name ``path`` takes from another module of the package: ``from M import
    _x`` and ``M._x`` where ``M`` names a module it imported; as (module, name, line)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    bound: dict[str, str] = {}  # local name -> the package's module it is bound to
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                inner = internal(alias.name)
                if alias.name.startswith("mnistbench.") and inner in mods:
                    bound[alias.asname or alias.name] = inner
        elif isinstance(node, ast.ImportFrom):
            module = imported_from(node, package)
            if not (module == "mnistbench" or module.startswith("mnistbench.")):
                continue
            for alias in node.names:
                sub = internal(f"{module}.{alias.name}")
                if sub in mods:  # `from mnistbench.core import schema` binds a module
                    bound[alias.asname or alias.name] = sub
                elif is_private(alias.name) and internal(module) != name:
                    found.append((internal(module), alias.name, node.lineno))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            dotted = ast.unparse(node.value)
            if dotted in bound and bound[dotted] != name:
                found.append((bound[dotted], node.attr, node.lineno))
            elif dotted.startswith("mnistbench.") and internal(dotted) in mods:
                found.append((internal(dotted), node.attr, node.lineno))
    return found


def test_no_module_takes_another_modules_private_names():
    """A private name (``_x``) stays in its module: no module of src/mnistbench imports one
    from another module or reads one through a module it imported, but for the exceptions
    listed with their reason (and each of those still exists)."""
    mods = modules()
    bad, used = [], set()
    for name, path in mods.items():
        for module, private, line in private_uses(path, name, mods):
            if (name, module, private) in PRIVATE_EXCEPTIONS:
                used.add((name, module, private))
                continue
            bad.append(f"{path.relative_to(SRC)}:{line}: {name} takes {module}.{private}: "
                       "give it a public name in its module, or a public home both share")
    assert not bad, "\n".join(bad)
    assert used == set(PRIVATE_EXCEPTIONS), (
        f"exceptions no longer needed: {sorted(set(PRIVATE_EXCEPTIONS) - used)}")


def test_the_private_name_check_catches_planted_uses(tmp_path, monkeypatch):
    """A module importing another's ``_x``, or reading ``module._x``, is reported; its own
    private names, dunders and public names are not (so the test above can fail)."""
    fake = tmp_path / "mnistbench"
    (fake / "report").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "report" / "__init__.py").write_text("")
    (fake / "report" / "words.py").write_text("def _the(x):\n    return x\n")
    (fake / "report" / "why.py").write_text(
        "from mnistbench.report.words import _the, __doc__\n"
        "from mnistbench.report import words\n"
        "from . import words as w\n"
        "import mnistbench.report.words\n"
        "def _own():\n    return words._the(1), w._the(2), words.__name__\n"
        "x = mnistbench.report.words._the\n"
        "y = _own()\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", fake)
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    mods = modules()
    uses = private_uses(fake / "report" / "why.py", "report.why", mods)
    assert sorted(uses) == [("report.words", "_the", 1), ("report.words", "_the", 6),
                            ("report.words", "_the", 6), ("report.words", "_the", 7)]
    monkeypatch.setattr(sys.modules[__name__], "PRIVATE_EXCEPTIONS", {})
    with pytest.raises(AssertionError, match=r"report\.why takes report\.words\._the"):
        test_no_module_takes_another_modules_private_names()


@pytest.mark.parametrize("layer", ["core", "data", "launch", "results", "report"])
def test_torch_free_layers_import_without_torch(layer):
    """Every module of the layer imports in a fresh interpreter where torch cannot be
    imported (and, for core and data.files, numpy neither)."""
    blocked = ["torch"] + (["numpy", "pandas", "yaml"] if layer == "core" else [])
    names = [f"mnistbench.{n}" for n in modules() if layer_of(n) == layer]
    if layer == "data":
        names = ["mnistbench.data.files"]
        blocked += ["numpy"]
    code = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        "import importlib\n"
        f"for name in {names!r}: importlib.import_module(name)\n"
        f"loaded = [m for m in sys.modules if m.split('.')[0] in {blocked!r}]\n"
        "assert not [m for m in loaded if sys.modules[m]], loaded\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
