"""The studies the report's tests render, and their helpers (no tests here): the test modules
of the report (tests/report/test_report*.py) import them.

Each study is built once per test process (:func:`full`, :func:`tenfold`, :func:`quick`),
whichever module asks first. Only :func:`full_charts` draws charts (the tests of the embedded
images read it); the studies, and :func:`render` and :func:`write` by default, render with
``charts=False``: the text is the same (test_report.py holds that), without the charts' time.
"""

from __future__ import annotations

import html as htmllib
import os
import pickle
import re
from pathlib import Path

import numpy as np
import pandas as pd

from mnistbench.core import atomic, network
from mnistbench.report import render as report
from mnistbench.report.selections import LIMIT_COLUMNS, SCALE_EXPERIMENT
from mnistbench.results import aggregate
from tests.fakes import cell_id, make_study, with_load, with_tips

#: Every section's id, in the page's order.
SECTIONS = ("verdict", "caveats", "findings", "headline", "blog", "time", "phases", "throughput",
            "why", "convergence", "resources", "cost", "tips", "recommendations", "gpu", "matrix",
            "runtimes", "methodology")
#: Sections shown only when the study has their cells (issue 38's experiments), and every
#: partial the page includes, in its order.
OPTIONAL_SECTIONS = ("answer", "threads")
PARTIALS = ("verdict", "caveats", "answer", "findings", "headline", "blog", "time", "phases",
            "throughput", "threads", "why", "convergence", "resources", "cost", "tips",
            "recommendations", "gpu", "matrix", "runtimes", "methodology")
HOSTILE = "<script>alert('x')</script> & \"quotes\""
COMMAND = 'make study && echo "<done>"'
ROOT = Path(__file__).resolve().parents[2]
#: The quick study's shape (config/quick.yaml): a data subset, one epoch, few cells.
QUICK = {"repeats": 2, "convergence_epochs": 1, "batch_sizes": (64, 512),
         "precisions": ("fp32", "bf16"), "params": {"train_limit": 6000, "test_limit": 1000}}


def results_of(tmp_path: Path, **options) -> Path:
    """A fake study (tests/fakes.py's ``make_study`` ``options``) aggregated: its results."""
    make_study(tmp_path / "runs", **options)
    aggregate.aggregate(tmp_path / "runs", tmp_path / "results")
    return tmp_path / "results"


def render(results: Path, charts: bool = False, **kwargs) -> str:
    """The HTML of ``render_report`` on ``results`` (without charts unless asked)."""
    out = results.parent / "report" / "index.html"
    path = report.render_report(results, out, charts=charts, **kwargs)
    assert path == out
    return out.read_text(encoding="utf-8")


def write(tables, tmp_path: Path, charts: bool = False, **kwargs) -> str:
    """The HTML of ``write_report`` on tables in memory (without charts unless asked)."""
    out = tmp_path / "report" / "index.html"
    report.write_report(tables, out, charts=charts, **kwargs)
    return out.read_text(encoding="utf-8")


def section_of(html: str, name: str) -> str:
    """The HTML of the section ``name``."""
    start = html.index(f'<section id="{name}">')
    return html[start:html.index("</section>", start)]


def visible(fragment: str) -> str:
    """Visible text of an HTML fragment, whitespace collapsed."""
    return " ".join(htmllib.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def with_blog_code(tables):
    """``tables`` whose DataLoader convergence cells ran the blog's code as written (stock,
    the C library's allocator, no workers), as the convergence experiment now runs them; the
    fakes record tuned code everywhere."""
    summary = tables.summary.copy()
    blog = (summary["experiment"] == "convergence") & (summary["loader"] == "dataloader")
    summary.loc[blog, "implementation"] = "stock"
    summary.loc[blog, "allocator_loaded"] = "glibc"
    summary.loc[blog, "workers"] = 0
    return aggregate.Tables(summary, tables.epochs, tables.resources)


def table_numbers(html: str) -> set[str]:
    """Every number (with its unit) that a table of ``html`` shows."""
    return {n for table in re.findall(r"<table.*?</table>", html, re.S)
            for n in numbers(visible(table))}


#: A number as the report writes it, with its unit where it has one.
NUMBER = re.compile(r"(?<![\w.])[−+]?\d[\d,]*(?:\.\d+)*"
                    r"(?:\s?(?:×|%|s\b|min\b|h\b|Wh|EUR|points|samples/s|runs?\b))?")


def numbers(text: str) -> list[str]:
    """The numbers of ``text`` (thousands grouped as written, units kept)."""
    return [n.rstrip(",") for n in NUMBER.findall(text)]


# ---------------------------------------------------------------------------------------------
# In-memory additions for what tests/fakes.py does not write yet: the scale experiment's cells
# and the device limits (``mnistbench peak``) that the aggregate puts on every cell, in the
# columns the report reads (mnistbench.report.selections.LIMIT_COLUMNS). Each returns new
# Tables; render them with ``write``.

#: The scale experiment's widths per device of a GPU study (the GPU runs the widest alone),
#: and of the quick study (CPU only, fp32).
GPU_WIDTHS = {"cpu": (1, 2, 4), "cuda": (1, 2, 4, 8)}
QUICK_WIDTHS = {"cpu": (1, 2)}
#: Fake step-time model of a scale cell at width w: ``fixed + (step1 - fixed) x r ** power``
#: (s per step; ``step1``: the width-1 template's step, ``r``: the FLOPs over width 1's), so
#: the GPU, busy with launches at width 1, gains efficiency as the network widens.
SCALE_FIXED_S = {"cpu": 2e-3, "cuda": 2.5e-3}
SCALE_POWER = {"cpu": 1.0, "cuda": 0.85}
#: Throughput of each precision over fp32's in the scale cells (the fakes' cost model).
SCALE_PRECISION = {"cpu": {"fp32": 1.0, "bf16": 0.7},
                   "cuda": {"fp32": 1.0, "tf32": 1.35, "bf16": 1.7, "fp16": 1.8}}
#: A fake `mnistbench peak`: GFLOP/s per (device, precision) on the reference machine (an
#: AVX2 CPU, bf16 emulated; an RTX 4090-class GPU), and the kernel that reached it.
LIMITS = {("cpu", "fp32"): 300.0, ("cpu", "bf16"): 150.0, ("cuda", "fp32"): 50_000.0,
          ("cuda", "tf32"): 80_000.0, ("cuda", "bf16"): 160_000.0,
          ("cuda", "fp16"): 165_000.0}
LIMIT_KERNELS = {"cpu": "matmul 1024x1024 @ 1024x1024", "cuda": "matmul 8192x8192 @ 8192x8192"}
#: Columns of a cell's times that a scale cell scales with its throughput.
TIME_COLUMNS = ("epoch_s_median", "epoch_s_mean", "train_s_median", "total_s", "timed_s",
                "data_s", "forward_s", "backward_s", "optimizer_s", "eval_s")


def with_scale(tables, widths=GPU_WIDTHS, precisions=("fp32", "bf16"), repeats: int = 2,
               seed: int = 0):
    """``tables`` with cells of the ``scale`` experiment, as the study will run them: per
    environment, device of ``widths`` (device -> widths) and precision, one cell per width
    and repeat at batch 128 with data held in memory and tuned code, copied from the env's
    ok resident fp32 convergence cell with ``width``, ``train_flops_per_sample``
    (mnistbench.core.network), ``samples_per_s``, ``achieved_gflops`` and the times from
    the fake step-time model (:data:`SCALE_FIXED_S`, :data:`SCALE_POWER`, 2 % noise). A
    device without such a cell gets none."""
    summary = tables.summary.copy()
    rng = np.random.default_rng(seed)
    rows = []
    flops1 = network.train_flops(1)
    for env in sorted(summary["env"].unique()):
        for device, device_widths in widths.items():
            pool = summary[(summary["env"] == env) & (summary["device"] == device)
                           & (summary["experiment"] == "convergence")
                           & (summary["loader"] == "resident") & (summary["status"] == "ok")]
            if pool.empty:
                continue
            template = pool.iloc[0].to_dict()
            batch = float(template["batch_size"])
            for precision in precisions:
                factor = SCALE_PRECISION[device].get(precision)
                if factor is None:
                    continue
                step1 = batch / (float(template["samples_per_s"]) * factor)  # s per step
                fixed = min(SCALE_FIXED_S[device], 0.5 * step1)
                for width in device_widths:
                    flops = network.train_flops(width)
                    step = fixed + (step1 - fixed) * (flops / flops1) ** SCALE_POWER[device]
                    for repeat in range(repeats):
                        rate = batch / step * float(rng.lognormal(0, 0.02))  # samples/s
                        slower = float(template["samples_per_s"]) / rate
                        row = dict(template)
                        row.update(experiment=SCALE_EXPERIMENT, repeat=repeat,
                                   precision=precision, width=width, seed=repeat,
                                   cell=cell_id(device, precision, "resident", int(batch),
                                                repeat, f"x{width}"),
                                   train_flops_per_sample=float(flops), samples_per_s=rate,
                                   achieved_gflops=flops * rate / 1e9,
                                   bf16_path="native" if precision == "bf16" and device ==
                                   "cuda" else "emulated" if precision == "bf16" else "")
                        for column in TIME_COLUMNS:
                            if column in row and row[column] is not None:
                                row[column] = float(row[column]) * slower
                        rows.append(row)
    merged = pd.concat([summary, pd.DataFrame(rows, columns=list(summary.columns))],
                       ignore_index=True)
    return aggregate.Tables(merged, tables.epochs, tables.resources)


def with_limits(tables, limits=LIMITS, speed=None):
    """``tables`` with the limit columns the aggregate joins to every ok cell from its
    environment's `mnistbench peak` record (runs/ENV/peak/DEVICE.json): ``limit_gflops``
    (GFLOP/s, ``limits`` per device and precision, times ``speed[env]`` where given),
    ``limit_kernel``, ``limit_share_pct`` (%: achieved_gflops / limit_gflops x 100) and
    ``limit_source`` ("measured: runs/ENV/peak/DEVICE.json, N threads"); empty for the cells
    that are not ok and for a device or precision ``limits`` lacks."""
    summary = tables.summary.copy()
    gflops, kernels, sources = [], [], []
    for env, device, precision, status, threads in zip(
            summary["env"], summary["device"], summary["precision"], summary["status"],
            summary["torch_threads"], strict=True):
        limit = limits.get((device, precision)) if status == "ok" else None
        gflops.append(None if limit is None else limit * (speed or {}).get(env, 1.0))
        kernels.append(None if limit is None else LIMIT_KERNELS.get(device, "matmul"))
        sources.append(None if limit is None else
                       f"measured: runs/{env}/peak/{device}.json, {int(threads)} threads")
    limit = pd.Series(gflops, index=summary.index, dtype=float)
    achieved = pd.to_numeric(summary["achieved_gflops"], errors="coerce")
    summary = summary.assign(limit_gflops=limit, limit_kernel=kernels,
                             limit_share_pct=achieved / limit * 100.0, limit_source=sources)
    return aggregate.Tables(summary, tables.epochs, tables.resources)


def without_limits(tables):
    """``tables`` as an older aggregate wrote them: no limit columns (and no scale cells)."""
    summary = tables.summary
    summary = summary[summary["experiment"] != SCALE_EXPERIMENT].drop(
        columns=[c for c in LIMIT_COLUMNS if c in summary.columns])
    return aggregate.Tables(summary.reset_index(drop=True), tables.epochs, tables.resources)


_BUILT: dict[str, dict] = {}


def _once(name: str, build, tmp_path_factory) -> dict:
    """The study ``name``, built once per test session: pytest-xdist's workers share it
    through a folder of the session (their common basetemp parent), pickled once built."""
    if name not in _BUILT:
        path = None
        if os.environ.get("PYTEST_XDIST_WORKER"):  # basetemp: <the session's folder>/popen-gwN
            path = tmp_path_factory.getbasetemp().parent / "report-studies" / f"{name}.pickle"
        if path is not None and path.is_file():
            _BUILT[name] = pickle.loads(path.read_bytes())
        else:
            _BUILT[name] = build(tmp_path_factory.mktemp(name))
            if path is not None:
                path.parent.mkdir(exist_ok=True)
                with atomic.atomic_open(path, "wb") as handle:
                    pickle.dump(_BUILT[name], handle)
    return _BUILT[name]


def _full(tmp: Path) -> dict:
    results = results_of(tmp, repeats=3, batch_sizes=(64, 128, 1024), convergence_epochs=5,
                         overrides={cell_id("cuda", "fp16", "resident", 1024, 2): (
                                        "oom", "CUDA out of memory. Tried to allocate 4.00 GiB"),
                                    cell_id("cpu", "bf16", "dataloader", 64, 0): (
                                        "failed", HOSTILE)})
    html = render(results, command=COMMAND)
    return {"html": html, "results": results, "tables": aggregate.load_tables(results)}


def full(tmp_path_factory) -> dict:
    """A GPU study with three repeats, an oom and a failed cell with a hostile reason,
    rendered with --command (without its charts: :func:`full_charts`)."""
    return _once("full", _full, tmp_path_factory)


def full_charts(tmp_path_factory) -> dict:
    """:func:`full`'s results rendered with its charts, --figures-dir and --command: the
    page (``html``) and the folder of PNGs (``figures``)."""
    def build(tmp: Path) -> dict:
        out = report.render_report(full(tmp_path_factory)["results"], tmp / "index.html",
                                   charts=True, figures_dir=tmp / "figures", command=COMMAND)
        return {"html": out.read_text(encoding="utf-8"), "figures": tmp / "figures"}

    return _once("full_charts", build, tmp_path_factory)


def _tenfold(tmp: Path) -> dict:
    results = results_of(tmp, repeats=3, batch_sizes=(32, 128, 2048), precisions=("fp32",))
    busy_cell = ("alpha", "convergence", cell_id("cpu", "fp32", "dataloader", 128, 0))
    tables = with_load(with_tips(aggregate.load_tables(results), overrides={
        ("cuda", "compile"): ("oom", "CUDA out of memory while compiling")}),
        {busy_cell: 91.0})
    tables = with_limits(with_scale(tables, precisions=("fp32",)))
    return {"html": write(tables, tmp), "tables": tables, "busy": busy_cell}


def tenfold(tmp_path_factory) -> dict:
    """A GPU study at the blog's full settings (10 epochs, all data) with tips cells, one
    busy CPU repeat, scale cells (fp32; widths 1, 2, 4 on the CPU, and 8 on the GPU) and the
    devices' measured limits, rendered from tables in memory."""
    return _once("tenfold", _tenfold, tmp_path_factory)


def _blogcode(tmp: Path) -> dict:
    results = results_of(tmp, repeats=3, batch_sizes=(32, 128, 2048))
    tables = with_limits(with_scale(with_blog_code(aggregate.load_tables(results))))
    return {"html": write(tables, tmp), "tables": tables}


def blogcode(tmp_path_factory) -> dict:
    """A GPU study at the blog's full settings whose convergence experiment holds, per device,
    the blog's code as written (the DataLoader) and this project's best (data held in
    memory), as it now does; three repeats; scale cells (fp32 and bf16; widths 1, 2, 4 on the
    CPU, and 8 on the GPU) and the devices' measured limits."""
    return _once("blogcode", _blogcode, tmp_path_factory)


def _quick(tmp: Path) -> dict:
    results = results_of(tmp, gpu=False, **QUICK)
    tables = with_limits(with_scale(aggregate.load_tables(results), widths=QUICK_WIDTHS,
                                    precisions=("fp32",)))
    return {"html": write(tables, tmp, results=results,
                          command=f"snakemake --cores all --configfile {ROOT}/config/quick.yaml"),
            "tables": tables}


def quick(tmp_path_factory) -> dict:
    """The quick study's shape on a machine without a GPU: a subset, one epoch, scale cells
    of widths 1 and 2 (fp32) and the CPU's measured limit; its GPU cells are unavailable."""
    return _once("quick", _quick, tmp_path_factory)
