"""The contract every layer shares, in the standard library only: the result files and their
columns (``schema``), the study as data (``study``: cells, ids, environment names), the
device, precision and loader names with their supported combinations and the torch-free
discovery of a machine's devices (``devices``), the ``train`` arguments (``options``), the CPU
runtime settings (``cpuruntime``), the environment variables (``envvars``), the atomic writers
(``atomic``), where a result came from (``provenance``) and how the command line prints a
duration (``figures``).

Import rule: modules here import the standard library and each other, nothing else of the
package and no third-party module (no numpy, no torch), so the workflow can plan a study and
every reader can name a cell without them. tests/test_layers.py holds the rule.
"""
