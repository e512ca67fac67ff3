"""The MNIST files: their names and digests (``files``, standard library only, what the
workflow needs when it plans), and fetching, verifying, reading and writing IDX files and
synthetic look-alikes (``mnist``, numpy).

Import rule: imports :mod:`mnistbench.core` only (``files`` not even that), never torch, a
launcher, a reader or the report. tests/test_layers.py holds the rule.
"""
