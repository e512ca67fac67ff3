"""Adding a GPU (or a machine): a short section with what the study compares (the devices of
one machine, or the same code across machines, :mod:`mnistbench.report.comparison`), why it
has no GPU/CPU speed-up if it has none, and the three ways to add one: another machine's
results, the CUDA image, a SLURM GPU partition."""

from __future__ import annotations

from mnistbench.report import comparison
from mnistbench.report.selections import Inputs, envs_with_gpu, gpu_absence


def context(inputs: Inputs) -> dict:
    absent = gpu_absence(inputs.summary)
    with_gpu = envs_with_gpu(inputs.cells)
    found = comparison.pairs(inputs.summary, inputs.cells)
    one = [p.gpu_env for p in found if p.one_machine]
    if absent:
        state = f"This study has no GPU/CPU speed-up: {absent}."
        promise = ("each adds cuda cells beside the CPU's, and the report then compares the "
                   "same code on both devices of that machine")
    elif one:
        state = ("This study measured the CPU and the GPU of one machine ("
                 + ", ".join(one) + "); add another machine the same way.")
        promise = "each adds that machine's cells beside these"
    else:
        state = ("This study's GPU (" + ", ".join(with_gpu) + ") ran on another machine than "
                 "its CPU cells, so its speed-ups are across machines, not like for like: "
                 "measuring the CPU of the GPU's machine too gives the comparison on one "
                 "machine.")
        promise = ("run the CPU cells where the GPU is (the default study does) and the "
                   "report compares the devices of that machine first")
    return {"gpu_state": state, "gpu_promise": promise}
