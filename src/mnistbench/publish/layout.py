"""What a publication is made of: the folder ``report/``, the names of its files, the format and
version its manifest declares, and the largest file of it that is ever read."""

from __future__ import annotations

from pathlib import Path

from mnistbench.results import aggregate

#: The publication's folder in the project.
REPORT_DIR = Path("report")
#: ``report/data``: the tables, the cost model and the manifest.
DATA_DIR = "data"
MANIFEST = "manifest.json"
COST_MODEL = "cost_model.json"
TABLES = (aggregate.SUMMARY_CSV, aggregate.EPOCHS_CSV, aggregate.RESOURCES_CSV,
          aggregate.COLUMNS_CSV)
#: ``report/index.html`` and ``report/README.md``.
INDEX = "index.html"
README = "README.md"

#: ``format`` of the manifest, and its version.
FORMAT = "mnistbench-publication"
PUBLICATION_VERSION = 1

#: The largest file of a publication read (its report is about 2 MiB, its tables less).
MAX_PUBLISHED_BYTES = 256 * 1024 * 1024
