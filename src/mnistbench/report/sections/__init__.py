"""The report's sections, one module each (or a page's worth of values), in the order of the
page: every module has ``context(inputs)``, which returns its keys of the template's context
from a :class:`mnistbench.report.selections.Inputs`, and its partial under ``templates/``.

- ``page``: the title, the header's line on the study, the footer, the macros' shared values;
- ``findings`` (1), ``headline`` (2), ``blog_check`` (3, the blog checked), ``training_time``
  (4), ``phases`` (5, where the time goes), ``throughput`` (6), ``why`` (after 6: each
  device against its measured limit; its fits and speed-ups in ``why_scaling``),
  ``convergence`` (7), ``resources`` (8), ``costs`` (9), ``tips`` (10), ``recommendations``
  (11), ``matrix`` (12), ``runtimes`` (13), ``methodology`` (14).

The charts of sections 5 to 8 (why's too) and 12 come from :mod:`mnistbench.report.charts`.
"""
