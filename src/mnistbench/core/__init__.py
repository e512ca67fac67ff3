"""The contract every layer shares: the result files and their columns, the study as data,
the names of devices, precisions and loaders, the arguments of a cell, where a result came from.

Import rule: the standard library only, nothing else of the package and no third-party module
(no numpy, no torch), so the workflow can plan a study and every reader can name a cell
without them. tests/test_layers.py holds the rule.
"""
