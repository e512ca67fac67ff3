"""How timed processes are planned and started, one at a time per machine.

Import rule: :mod:`mnistbench.core` only, and torch-free; the fork server's forked child is the
one place that enters the timed process (:func:`mnistbench.measure.entry.main`, by name at run
time). Never the CLI, a reader or the report. tests/test_layers.py holds the rule.
"""
