"""mnistbench: how much faster, and at what cost, does a GPU train a CNN than a CPU, and why."""

#: The package version, written here only: pyproject.toml reads it (``dynamic = ["version"]``),
#: and the CLI, the summaries, the report and the image labels take it from here.
__version__ = "0.1.0"
