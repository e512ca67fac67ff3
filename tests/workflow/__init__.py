"""Tests of the Snakemake workflow (workflow/), its Docker and SLURM runs and scripts/gpu-check."""
