"""Per-cell overhead: the wall time of a `mnistbench train` process outside its timed epochs
and warm-up (process start, imports, environment capture, data load, model build, writing),
beside the cost of a bare `import torch` measured in the same run.

Target (issue: workflow): at most 3 s per cell on the 2-core development machine.

Usage: python benchmarks/bench_overhead.py --data resources/mnist [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 3.0


def wall(cmd: list[str]) -> float:
    """Seconds a command takes from spawn to exit."""
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("resources/mnist"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--loader", default="resident")
    args = parser.parse_args()
    rows = []
    for _ in range(args.runs):
        bare = wall([sys.executable, "-c", "import torch"])
        with tempfile.TemporaryDirectory() as tmp:
            total = wall([sys.executable, "-m", "mnistbench.cli", "train", "--data",
                          str(args.data), "--out", tmp, "--loader", args.loader,
                          "--max-steps", "1", "--warmup-steps", "0", "--quiet"])
            summary = json.loads((Path(tmp) / "summary.json").read_text())
        t = summary["timing"]
        overhead = total - t["timed_s"] - t["warmup_s"]
        rows.append({"bare_import_torch": bare, "process_wall": total,
                     "startup (imports, env)": t["startup_s"], "data_load": t["data_load_s"],
                     "overhead": overhead})
    print(f"{args.runs} runs of a 1-step cell on {args.data} ({args.loader}); medians in s:")
    for key in rows[0]:
        print(f"  {key:24s} {statistics.median(r[key] for r in rows):6.2f}")
    med = statistics.median(r["overhead"] for r in rows)
    bare = statistics.median(r["bare_import_torch"] for r in rows)
    print(f"overhead / target = {med:.2f} / {TARGET_S:.1f} s = {med / TARGET_S:.2f} "
          f"({'meets' if med <= TARGET_S else 'MISSES'} the target); "
          f"overhead / bare `import torch` = {med / bare:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
