"""Readers of finished cells: the tidy tables, their statistics, the cost model, and the
archives that carry an environment's cells between machines.

Import rule: :mod:`mnistbench.core` only, and never torch: results are read on machines that
never measured. tests/test_layers.py holds the rule.
"""
