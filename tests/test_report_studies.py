"""The studies the report's tests render, and their helpers (no tests here): the test modules
of the report (tests/test_report*.py) import them.

Each study is built once per test process (:func:`full`, :func:`tenfold`, :func:`quick`),
whichever module asks first. Only :func:`full` draws its charts (the tests of the embedded
images read it); the others, and :func:`render` and :func:`write` by default, render with
``charts=False``: the text is the same, without the seven seaborn charts' time.
"""

from __future__ import annotations

import html as htmllib
import re
from pathlib import Path

from fakes import cell_id, make_study, with_load, with_tips

from mnistbench.report import render as report
from mnistbench.results import aggregate

#: Every section's id, in the page's order.
SECTIONS = ("verdict", "findings", "headline", "blog", "time", "phases", "throughput",
            "convergence", "resources", "cost", "tips", "recommendations", "gpu", "matrix",
            "runtimes", "methodology")
HOSTILE = "<script>alert('x')</script> & \"quotes\""
COMMAND = 'make study && echo "<done>"'
ROOT = Path(__file__).resolve().parents[1]
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


_BUILT: dict[str, dict] = {}


def _once(name: str, build, tmp_path_factory) -> dict:
    if name not in _BUILT:
        _BUILT[name] = build(tmp_path_factory.mktemp(name))
    return _BUILT[name]


def _full(tmp: Path) -> dict:
    results = results_of(tmp, repeats=3, batch_sizes=(64, 128, 1024), convergence_epochs=5,
                         overrides={cell_id("cuda", "fp16", "resident", 1024, 2): (
                                        "oom", "CUDA out of memory. Tried to allocate 4.00 GiB"),
                                    cell_id("cpu", "bf16", "dataloader", 64, 0): (
                                        "failed", HOSTILE)})
    html = render(results, charts=True, figures_dir=tmp / "figures", command=COMMAND)
    return {"html": html, "results": results, "figures": tmp / "figures",
            "tables": aggregate.load_tables(results)}


def full(tmp_path_factory) -> dict:
    """A GPU study with three repeats, an oom and a failed cell with a hostile reason,
    rendered with its charts, --figures-dir and --command."""
    return _once("full", _full, tmp_path_factory)


def _tenfold(tmp: Path) -> dict:
    results = results_of(tmp, repeats=3, batch_sizes=(32, 128, 2048), precisions=("fp32",))
    busy_cell = ("alpha", "convergence", cell_id("cpu", "fp32", "dataloader", 128, 0))
    tables = with_load(with_tips(aggregate.load_tables(results), overrides={
        ("cuda", "compile"): ("oom", "CUDA out of memory while compiling")}),
        {busy_cell: 91.0})
    return {"html": write(tables, tmp), "tables": tables, "busy": busy_cell}


def tenfold(tmp_path_factory) -> dict:
    """A GPU study at the blog's full settings (10 epochs, all data) with tips cells and one
    busy CPU repeat, rendered from tables in memory."""
    return _once("tenfold", _tenfold, tmp_path_factory)


def _blogcode(tmp: Path) -> dict:
    results = results_of(tmp, repeats=3, batch_sizes=(32, 128, 2048))
    tables = with_blog_code(aggregate.load_tables(results))
    return {"html": write(tables, tmp), "tables": tables}


def blogcode(tmp_path_factory) -> dict:
    """A GPU study at the blog's full settings whose convergence experiment holds, per device,
    the blog's code as written (the DataLoader) and this project's best (data held in
    memory), as it now does; three repeats."""
    return _once("blogcode", _blogcode, tmp_path_factory)


def _quick(tmp: Path) -> dict:
    results = results_of(tmp, gpu=False, **QUICK)
    return {"html": render(results, command="snakemake --cores all --configfile "
                                            f"{ROOT}/config/quick.yaml"),
            "tables": aggregate.load_tables(results)}


def quick(tmp_path_factory) -> dict:
    """The quick study's shape on a machine without a GPU: a subset, one epoch."""
    return _once("quick", _quick, tmp_path_factory)
