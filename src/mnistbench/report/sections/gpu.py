"""Adding a GPU: a short section with why the study has no GPU/CPU speed-up (if it has
none) and the three ways to add one: another machine's results, the CUDA image, a SLURM GPU
partition."""

from __future__ import annotations

from mnistbench.report.selections import Inputs, envs_with_gpu, gpu_absence


def context(inputs: Inputs) -> dict:
    absent = gpu_absence(inputs.summary)
    with_gpu = envs_with_gpu(inputs.cells)
    if absent:
        state = f"This study has no GPU/CPU speed-up: {absent}."
    else:
        state = ("This study has a GPU (" + ", ".join(with_gpu)
                 + "); add another machine the same way.")
    return {"gpu_state": state}
