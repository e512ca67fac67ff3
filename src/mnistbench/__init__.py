"""mnistbench: how much faster, and at what cost, does a GPU train a CNN than a CPU, and why."""

__version__ = "0.1.0"
