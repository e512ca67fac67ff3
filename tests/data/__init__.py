"""Tests of mnistbench.data: fetching and reading MNIST."""
