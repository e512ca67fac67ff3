"""The HTML report: the aggregated tables rendered into one self-contained page.

Import rule: :mod:`mnistbench.core` and :mod:`mnistbench.results` only, and never torch: a
report renders on machines that never measured. Each section of the page is a module of
``sections`` with its partial under ``templates/``. tests/test_layers.py holds the rule.
"""
