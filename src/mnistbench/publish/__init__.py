"""The published study: ``report/``, made from the current results by :func:`publish`
(``mnistbench publish``) and checked by :func:`verify` (``mnistbench publish --check``).

Rule: :func:`publish` is a short sequence of steps, one module each; a step that fails leaves
``report/`` as it was, and only the last one (the swap) changes it. A cell that keeps the
results from being published is a :class:`Problem` of one :class:`ProblemKind`. The old
publication is data, read only inside ``report/``. Import rule: anything of the package (this
is the top); no layer imports it. docs/publish.md describes what is checked and why.
"""

from mnistbench.publish.checks import (
    CONFIG_SCHEMA,
    DEFAULT_CONFIG,
    CellInfo,
    Problem,
    ProblemKind,
    PublishError,
    checkout,
    current_digests,
    env_devices,
    expected_cells,
    find_problems,
    load_config,
    read_cells,
    stale_reasons,
)
from mnistbench.publish.kept import Kept, kept_environments
from mnistbench.publish.layout import (
    COST_MODEL,
    DATA_DIR,
    FORMAT,
    INDEX,
    MANIFEST,
    MAX_PUBLISHED_BYTES,
    PUBLICATION_VERSION,
    README,
    REPORT_DIR,
    TABLES,
)
from mnistbench.publish.markdown import fence_for, inert, inert_cell, readme
from mnistbench.publish.publication import Publication, publish
from mnistbench.publish.rendering import render, render_staged, reproduce_command
from mnistbench.publish.verification import STAMP, first_difference, strip_stamp, verify

__all__ = [
    "CONFIG_SCHEMA",
    "COST_MODEL",
    "DATA_DIR",
    "DEFAULT_CONFIG",
    "FORMAT",
    "INDEX",
    "MANIFEST",
    "MAX_PUBLISHED_BYTES",
    "PUBLICATION_VERSION",
    "README",
    "REPORT_DIR",
    "STAMP",
    "TABLES",
    "CellInfo",
    "Kept",
    "Problem",
    "ProblemKind",
    "Publication",
    "PublishError",
    "checkout",
    "current_digests",
    "env_devices",
    "expected_cells",
    "fence_for",
    "find_problems",
    "first_difference",
    "inert",
    "inert_cell",
    "kept_environments",
    "load_config",
    "publish",
    "read_cells",
    "readme",
    "render",
    "render_staged",
    "reproduce_command",
    "stale_reasons",
    "strip_stamp",
    "verify",
]
