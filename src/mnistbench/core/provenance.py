"""Where a result came from: digests of the code that measured it, and the project's git
revision.

A cell records two digests (``env.code_digest``, ``env.workflow_digest``), each computed
before its timed span, and ``mnistbench publish`` compares them with the code at hand to tell
whether a cell is still current:

- :func:`code_digest`: the measuring code as installed and run, that is every module of the
  subpackages a cell imports (:data:`MEASURING`: the contract, the data files and the timed
  process), each parsed and dumped without its comments and docstrings, plus the installed
  versions of the distributions it runs on (:data:`RUNTIME`, the pins of envs/pip). A
  comment-only commit, an untracked file, a README or report-template edit leave it as it
  is; any change to what runs changes it.
- :func:`workflow_digest`: the workflow's lines that shape a timed cell, the rule file of
  the ``bench`` rule (its shell: the thread variables, the allocator, the lock), without its
  comments; the workflow passes it to each cell in ``$MNISTBENCH_WORKFLOW_DIGEST``. A cell run
  by hand records ``""``.

The git revision (``env.git_revision``) stays recorded as information: ``-dirty`` says only
that some file of the checkout differed.

Standard library only (:mod:`mnistbench.core`).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path

from mnistbench.core.envvars import GIT_REVISION_VAR

#: The subpackages whose code runs inside a timed cell (mnistbench.measure imports only these).
MEASURING = ("core", "data", "measure")
#: The distributions a cell runs on: their installed versions are part of the code digest.
RUNTIME = ("torch", "torchvision", "numpy", "pillow", "psutil", "nvidia-ml-py")
#: The workflow's rule file whose lines shape a timed cell, relative to the project.
BENCH_RULES = Path("workflow/rules/bench.smk")
#: Hex digits kept of a SHA-256 digest.
DIGEST_HEX = 16


def normalized_source(text: str, name: str = "<source>") -> str:
    """``text`` (Python) as its syntax tree without comments and docstrings: the same for any
    two sources that differ only in those, or in layout."""
    tree = ast.parse(text, name)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def _digest(parts: Iterable[tuple[str, str]]) -> str:
    """Hex SHA-256 (:data:`DIGEST_HEX` digits) of named parts, in name order."""
    sha = hashlib.sha256()
    for name, text in sorted(parts):
        sha.update(f"{name}\0{len(text)}\0".encode())
        sha.update(text.encode())
    return sha.hexdigest()[:DIGEST_HEX]


def measuring_sources(package: Path | None = None) -> dict[str, str]:
    """Relative path -> normalized source of every module of :data:`MEASURING` under
    ``package`` (default: the mnistbench package that is running)."""
    root = Path(package) if package is not None else Path(__file__).resolve().parents[1]
    found = {}
    for sub in MEASURING:
        for path in sorted((root / sub).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            found[rel] = normalized_source(path.read_text(encoding="utf-8"), rel)
    return found


def runtime_versions(names: Iterable[str] = RUNTIME) -> dict[str, str]:
    """Distribution -> its installed version (``""`` when absent)."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = ""
    return versions


def code_digest(package: Path | None = None,
                versions: Mapping[str, str] | None = None) -> str:
    """The digest of the measuring code of ``package`` (default: the running one) and of the
    ``versions`` of :data:`RUNTIME` (default: those installed)."""
    versions = runtime_versions() if versions is None else versions
    parts = [*measuring_sources(package).items(),
             *((f"dist:{k}", str(v)) for k, v in versions.items())]
    return _digest(parts)


@functools.lru_cache(maxsize=1)
def running_code_digest() -> str:
    """:func:`code_digest` of the running package, computed once per process."""
    return code_digest()


def normalized_rules(text: str) -> str:
    """Snakemake rule text without comment lines and blank lines, each line stripped (the
    same for changes of comments or indentation only)."""
    lines = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        lines.append(stripped)
    return "\n".join(lines)


def workflow_digest(text: str) -> str:
    """The digest of the bench rule file's text (:data:`BENCH_RULES`)."""
    return _digest([("bench.smk", normalized_rules(text))])

#: Seconds each git command may take before the revision is treated as unknown.
GIT_TIMEOUT_S = 2.0


def _run_git(args: list[str], cwd: Path) -> str | None:
    """stdout of ``git ARGS`` in ``cwd``, stripped, or None on any failure or timeout."""
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", LC_ALL="C")  # never take the index lock
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S, env=env, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def git_revision_from_checkout() -> str | None:
    """The full commit hash of the git checkout holding this package's source, with ``-dirty``
    when ``git status --porcelain`` lists changes; None when the package is not in a git
    checkout (e.g. installed into site-packages) or git is missing. Cached per process."""
    here = Path(__file__).resolve().parent
    out = _run_git(["rev-parse", "--show-toplevel", "HEAD"], here)
    if not out or len(out.splitlines()) != 2:
        return None
    top, rev = out.splitlines()
    try:
        here.relative_to(Path(top).resolve())
    except ValueError:  # not our checkout
        return None
    if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", rev):
        return None
    status = _run_git(["status", "--porcelain"], Path(top))
    if status is None:
        return rev
    return f"{rev}-dirty" if status else rev


def git_revision() -> str:
    """The project's git revision: from the checkout, else ``$MNISTBENCH_GIT_REVISION``,
    else ``""``."""
    return git_revision_from_checkout() or os.environ.get(GIT_REVISION_VAR, "").strip()
