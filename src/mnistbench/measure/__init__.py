"""The timed process: what runs inside one cell. ``entry`` parses ``mnistbench train``'s
arguments and runs ``train``, which builds the ``model`` and ``optim``, feeds it through the
``loaders``, drives the device through ``backends``, times each phase with ``timing``,
samples resources with ``monitor`` and records the machine with ``hardware`` and ``sysinfo``.

Import rule: imports :mod:`mnistbench.core` and :mod:`mnistbench.data` only; never a launcher
(:mod:`mnistbench.launch`), a result reader (:mod:`mnistbench.results`), the report or the
CLI, so nothing outside the cell's own code runs or loads inside its timed span.
tests/test_layers.py holds the rule.
"""
