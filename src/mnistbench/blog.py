"""The blog post this study starts from, as reference data: its figures (measured on another
machine, never by this study), the settings its headline is about, and which of our cells
stand for those settings. One home for both the report and the charts.
"""

from __future__ import annotations

#: The blog's own figures (another machine: not measured by this study).
BLOG = {
    "cpu": "Intel Core i7-12700K",
    "gpu": "NVIDIA GeForce RTX 4090",
    "cpu_epoch_s": 58.7,
    "gpu_epoch_s": 5.2,
    "speedup": 11.3,
}

#: The blog's settings the headline is about: batch size (samples), precision, epochs.
BLOG_SETTINGS = {"batch_size": 128, "precision": "fp32", "epochs": 10}


def blog_cells(summary):
    """(ok cells at the blog's settings, where they come from) from a summary DataFrame.

    The convergence experiment runs the blog's settings; its ok cells with batch 128 and fp32
    are used (all its ok cells if none match). Without convergence cells, ok sweep cells at
    batch 128 and fp32 stand in (shorter runs). Empty frame when there are none.
    """
    ok = summary[summary["status"] == "ok"]
    blog = ((ok["batch_size"] == BLOG_SETTINGS["batch_size"])
            & (ok["precision"] == BLOG_SETTINGS["precision"]))
    conv = ok["experiment"] == "convergence"
    if (conv & blog).any():
        return ok[conv & blog], "convergence experiment"
    if conv.any():
        return ok[conv], "convergence experiment (not at batch 128 / fp32)"
    sweep = ok["experiment"] == "sweep"
    if (sweep & blog).any():
        return ok[sweep & blog], "sweep experiment at batch 128, fp32 (short runs: no " \
                                 "convergence cells)"
    return ok.iloc[0:0], "no ok cells at the blog's settings"
