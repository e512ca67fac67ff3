"""The HTML report: rendering the aggregated tables into one self-contained page
(``render`` and its template in ``templates/``), the charts (``plots``) and the blog's
reference data (``blog``).

Import rule: imports :mod:`mnistbench.core` and :mod:`mnistbench.results` only, and never
torch. tests/test_layers.py holds the rule.
"""
