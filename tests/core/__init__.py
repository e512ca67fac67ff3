"""Tests of mnistbench.core: the torch-free contract."""
