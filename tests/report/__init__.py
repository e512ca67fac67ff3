"""Tests of mnistbench.report: the torch-free rendering."""
