"""The HTML report: the aggregated tables rendered into one self-contained page.

- ``render``: the entry (``render_report``, ``write_report``, ``build_context``,
  ``ReportError``): composes the page from its sections;
- ``sections``: one module per section of the page (``verdict``, the first screen;
  ``findings``, ``headline``, ``blog_check`` with ``claims``, every claim of the blog checked;
  ``training_time``, ``phases``, ``throughput``, ``why`` (each device against its measured
  limit), ``convergence``, ``resources``, ``costs``,
  ``tips``, ``recommendations``, ``gpu``, how to add one; ``matrix``, ``runtimes``,
  ``methodology``, and ``page`` for the header and footer), each computing its part of the
  template's context;
- ``selections``: what the sections share, each in one place: the grouping keys, the kind of
  code of every cell (``code_of``, ``code_label``: the blog's code as written, this
  project's best, other settings) and the loaders' names, the ok cells, busy repeats, the
  environments (the reference one among them), the shared measures (a speed-up between cells
  of one kind of code only), the headline chart's bars, and ``Inputs``, the tables and cost
  model with what is computed from them once;
- ``formatting``: how a value is written (``num``, ``seconds``, ``plural``, ``money``,
  ``usd``, ``ratio_interval``, ``points``, ``readable_command`` ...);
- ``charts``: the charts drawn and shown (or not drawn: ``charts=False``); ``plots``: the
  charts themselves;
- ``blog``: the blog's reference data (every figure of the post) and the rules of its checks;
- ``templates/``: ``report.html.j2`` with one partial per section (``section-ID.html.j2``),
  their ``macros.html.j2``, ``report.css``, and the publication's README template.

Import rule: imports :mod:`mnistbench.core` and :mod:`mnistbench.results` only, and never
torch. tests/test_layers.py holds the rule.
"""
