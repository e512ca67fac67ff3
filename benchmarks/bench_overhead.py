"""Per-cell overhead: the wall time of a `mnistbench train` process outside its timed epochs
and warm-up (process start, imports, environment capture, data load, model build, writing),
for a cell started as a new process and for one started by the fork server (the workflow's
default, src/mnistbench/launch/forkserver.py), beside a bare `import torch`, all in the same run.

Target (issue: workflow): at most 3 s per cell on the 2-core development machine.

Usage: python benchmarks/bench_overhead.py --data resources/mnist [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mnistbench.launch import forkserver

TARGET_S = 3.0


def wall(cmd: list[str], env: dict | None = None) -> float:
    """Seconds a command takes from spawn to exit."""
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def cell(args, env: dict) -> dict:
    """Wall time and summary timings of one 1-step cell started with ``env``."""
    with tempfile.TemporaryDirectory() as tmp:
        total = wall([str(Path(sys.executable).parent / "mnistbench"), "train", "--data",
                      str(args.data), "--out", tmp, "--loader", args.loader, "--max-steps",
                      "1", "--warmup-steps", "0", "--quiet"], env=env)
        summary = json.loads((Path(tmp) / "summary.json").read_text())
    t = summary["timing"]
    return {"launch": summary["env"]["launch"], "wall": total, "startup": t["startup_s"],
            "data_load": t["data_load_s"], "overhead": total - t["timed_s"] - t["warmup_s"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("resources/mnist"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--loader", default="resident")
    args = parser.parse_args()
    plain_env = {k: v for k, v in os.environ.items() if not k.startswith("MNISTBENCH_FORK")}
    server = forkserver.spawn()
    fork_env = {**plain_env, **server.environment()}
    rows = []
    try:
        for _ in range(args.runs):
            bare = wall([sys.executable, "-c", "import torch"])
            plain, forked = cell(args, plain_env), cell(args, fork_env)
            assert plain["launch"] == "exec" and forked["launch"] == "fork-server", forked
            rows.append({"bare `import torch`": bare, **{f"{k} (new process)": plain[k]
                         for k in ("wall", "startup", "data_load", "overhead")},
                         **{f"{k} (fork server)": forked[k]
                            for k in ("wall", "startup", "data_load", "overhead")}})
    finally:
        server.stop()
    print(f"{args.runs} runs of a 1-step cell on {args.data} ({args.loader}); medians in s:")
    for key in rows[0]:
        print(f"  {key:28s} {statistics.median(r[key] for r in rows):6.2f}")
    bare = statistics.median(r["bare `import torch`"] for r in rows)
    for launch in ("new process", "fork server"):
        med = statistics.median(r[f"overhead ({launch})"] for r in rows)
        print(f"overhead ({launch}) / target = {med:.2f} / {TARGET_S:.1f} s = "
              f"{med / TARGET_S:.2f} ({'meets' if med <= TARGET_S else 'MISSES'} the target); "
              f"/ bare `import torch` = {med / bare:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
