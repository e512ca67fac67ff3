"""The timed process: everything that runs inside one cell, and nothing else.

Import rule: :mod:`mnistbench.core` and :mod:`mnistbench.data` only; never a launcher, a
result reader, the report or the CLI, so nothing outside the cell's own code runs or loads
inside its timed span. tests/test_layers.py holds the rule.
"""
