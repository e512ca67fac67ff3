"""Tests of mnistbench.publish: the publication in report/ and its check."""
