"""Tests of mnistbench.measure: the timed process."""
