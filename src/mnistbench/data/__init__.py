"""The MNIST files: their names and digests, and fetching, verifying and reading them.

Import rule: :mod:`mnistbench.core` only, and never torch, a launcher, a reader or the report;
what the workflow imports when it plans (``files``) takes the standard library alone.
tests/test_layers.py holds the rule.
"""
