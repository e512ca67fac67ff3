"""Benchmark of the report pipeline on a 500-cell fake study.

Generates the study (tests/fakes.py: one GPU machine, both experiments, every device,
precision, loader and the 8 sweep batch sizes, 5 repeats = 500 cells), then times
``aggregate.aggregate`` and ``report.render_report`` with ``time.perf_counter`` and prints
seconds and the ratios to the targets, 10 s for the aggregate and 20 s for the render (below
1.0 meets them).

    .venv/bin/python benchmarks/bench_report.py [--repeats 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fakes import make_study  # noqa: E402

from mnistbench.report import render as report  # noqa: E402
from mnistbench.results import aggregate  # noqa: E402

TARGET_S = 20.0  # s, target for the render on a 500-cell study
AGGREGATE_TARGET_S = 10.0  # s, target for the aggregate of the same study


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return 0 when the aggregate and the render meet their targets, 1
    otherwise."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5,
                        help="repeats per cell (5: 500 cells; default: %(default)s)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="write the study and report here and keep them")
    args = parser.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="mnistbench-bench-"))
    try:
        start = time.perf_counter()
        cells = make_study(work / "runs", repeats=args.repeats)
        generate_s = time.perf_counter() - start

        start = time.perf_counter()
        aggregate.aggregate(work / "runs", work / "results")
        aggregate_s = time.perf_counter() - start

        start = time.perf_counter()
        out = report.render_report(work / "results", work / "report" / "index.html",
                                   figures_dir=work / "report" / "figures",
                                   command="python benchmarks/bench_report.py")
        render_s = time.perf_counter() - start
        size_mb = out.stat().st_size / 2**20
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    total = aggregate_s + render_s
    print(f"cells:      {len(cells)}")
    print(f"generate:   {generate_s:7.2f} s (fake study, not part of the target)")
    print(f"aggregate:  {aggregate_s:7.2f} s   ratio to the {AGGREGATE_TARGET_S:.0f} s target: "
          f"{aggregate_s / AGGREGATE_TARGET_S:.2f}")
    print(f"render:     {render_s:7.2f} s   ratio to the {TARGET_S:.0f} s target: "
          f"{render_s / TARGET_S:.2f}")
    print(f"total:      {total:7.2f} s   ratio to the {TARGET_S:.0f} s target: "
          f"{total / TARGET_S:.2f}")
    print(f"report:     {size_mb:.2f} MiB")
    return 0 if render_s < TARGET_S and aggregate_s < AGGREGATE_TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
