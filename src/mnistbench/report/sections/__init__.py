"""The report's sections, one module each, in the order of the page.

Rule: a section module has ``context(inputs)``, which returns its keys of the template's
context from a :class:`mnistbench.report.selections.Inputs`, and a partial
``templates/section-ID.html.j2``. What several sections share lives in ``selections`` and
``formatting``; a section may read another's public results (the verdict box, the claims).
"""
