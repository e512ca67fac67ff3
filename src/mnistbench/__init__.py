"""mnistbench: how much faster, and at what cost, does a GPU train a CNN than a CPU, and why.

The package is layered; each subpackage's docstring states what it may import, and
tests/test_layers.py holds those rules (docs/architecture.md):

- :mod:`mnistbench.core`: the contract (standard library only);
- :mod:`mnistbench.data`: the MNIST files (core);
- :mod:`mnistbench.measure`: the timed process (core, data);
- :mod:`mnistbench.launch`: how timed processes start (core);
- :mod:`mnistbench.results`: readers of finished cells (core);
- :mod:`mnistbench.report`: the HTML report (core, results);
- on top, importing any of them: :mod:`mnistbench.publish` (the release into report/),
  :mod:`mnistbench.cli` (the ``mnistbench`` command) and :mod:`mnistbench.console` (its
  entry point, which hands ``train`` to the fork server).
"""

#: The package version, written here only: pyproject.toml reads it (``dynamic = ["version"]``),
#: and the CLI, the summaries, the report and the image labels take it from here.
__version__ = "0.1.0"
