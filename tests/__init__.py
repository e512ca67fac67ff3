"""The test suite; its folders mirror src/mnistbench's subpackages (docs/architecture.md)."""
