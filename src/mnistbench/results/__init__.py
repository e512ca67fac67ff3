"""Readers of finished cells: the tidy tables (``aggregate``), the statistics (``stats``), the
cost model (``cost``) and the archives that carry an environment's cells between machines
(``archive``).

Import rule: imports :mod:`mnistbench.core` only, and never torch: results are read on
machines that never measured. tests/test_layers.py holds the rule.
"""
