"""Tests of mnistbench.launch: the launchers (fork server, container, machine lock, plan)."""
