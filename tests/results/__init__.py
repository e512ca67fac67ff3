"""Tests of mnistbench.results: the torch-free result readers."""
