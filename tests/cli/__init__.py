"""Tests of mnistbench.cli: the mnistbench command, its parsers and its exit codes."""
