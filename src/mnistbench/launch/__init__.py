"""How timed processes are planned and started: the workflow's planning as plain functions of
the config (``plan``: environment names, the lock file, the shell prefix, SLURM resources,
docker images, the cell matrix; the rule files keep thin wrappers), the fork server that
starts every cell of a study by a fork (``forkserver``), the container entrypoint
(``container``) and the machine-wide lock that keeps timed cells from overlapping
(``machinelock``).

Import rule: imports :mod:`mnistbench.core` only, and stays torch-free; the fork server's
forked child is the one place that enters the timed process, through
:func:`mnistbench.measure.entry.main`, by name at run time. Never the CLI, a reader or the
report. tests/test_layers.py holds the rule.
"""
