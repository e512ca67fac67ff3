"""How long `snakemake -n` takes to build the DAG of a 500-cell study (target: under 10 s).

Writes a study config with 500 timed cells (devices cpu and cuda, the full sweep, 5 repeats)
into a temporary working directory, runs the real ``snakemake --dry-run`` on the project's
Snakefile there a few times, and prints the wall time of the whole command (Snakemake start-up
included) with its ratio to the target. Exit status 1 when the median misses the target.

    .venv/bin/python benchmarks/bench_dag.py [--runs 3] [--repeats 5]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
TARGET_S = 10.0  # s, the most a 500-cell dry run may take
BATCH_SIZES = [32, 64, 128, 256, 512, 1024, 2048, 4096]
# Cells per repeat: sweep 8 batch sizes x 2 loaders x (2 cpu + 4 cuda precisions) = 96, plus
# convergence 2 devices x 2 loaders = 4; so 100 per repeat.
CELLS_PER_REPEAT = 100


def study_config(repeats: int) -> dict:
    """A config of ``CELLS_PER_REPEAT * repeats`` cells that never touches the network."""
    return {
        "env": "bench-dag",
        "data_dir": "resources/mnist",
        "default_mirrors": False,
        "mirrors": ["resources/no-such-mirror"],
        "devices": ["cpu", "cuda"],
        "lock_file": "timed-cell.lock",
        "experiments": {
            "convergence": {"repeats": repeats, "loaders": ["dataloader", "resident"]},
            "sweep": {
                "repeats": repeats,
                "batch_sizes": BATCH_SIZES,
                "precisions": ["fp32", "tf32", "bf16", "fp16"],
                "loaders": ["dataloader", "resident"],
            },
        },
    }


def dry_run(workdir: Path, configfile: Path) -> tuple[float, int]:
    """Seconds of one `snakemake -n` and the number of bench jobs it planned."""
    command = [str(SNAKEMAKE), "--snakefile", str(REPO / "Snakefile"), "--directory",
               str(workdir), "--configfile", str(configfile), "--dry-run"]
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"bench_dag: snakemake failed:\n{proc.stdout}\n{proc.stderr}")
    match = re.search(r"^bench\s+(\d+)\s*$", proc.stdout + proc.stderr, re.MULTILINE)
    if match is None:
        sys.exit(f"bench_dag: no bench jobs in the dry run's job stats:\n{proc.stdout}")
    return elapsed, int(match.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="dry runs to time (default: 3)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="repeats of the study; cells = 100 x repeats (default: 5)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_dag_") as tmp:
        workdir = Path(tmp)
        configfile = workdir / "config.yaml"
        configfile.write_text(yaml.safe_dump(study_config(args.repeats)), encoding="utf-8")
        times, cells = [], 0
        for _ in range(args.runs):
            elapsed, cells = dry_run(workdir, configfile)
            times.append(elapsed)
    median = statistics.median(times)
    print(f"dag build ({cells} cells, snakemake -n, {args.runs} runs): median {median:.2f} s, "
          f"min {min(times):.2f} s, max {max(times):.2f} s; target {TARGET_S:.0f} s; "
          f"ratio to target {median / TARGET_S:.2f}")
    return 0 if median < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
