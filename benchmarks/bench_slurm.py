"""What running each timed cell as a SLURM job costs, per cell, on the cluster `scontrol` reaches
(e.g. the single-node one of scripts/slurm-cluster start).

Runs one tiny study (synthetic data, sweep cells of a few steps, cpu only, the default
partition) through ``snakemake --profile profiles/slurm`` with the plugin's default polling
(``--slurm-init-seconds-before-status-checks 40 --seconds-between-status-checks 10``) and with
the profile's settings, and the same study locally, then prints per cell (medians):

- submit -> start: ``sbatch`` to the job's start on an idle node (SLURM SubmitTime/StartTime);
  later cells wait for the exclusive node, so for them the node's turnaround is printed:
  the previous job's end -> this job's start;
- job start -> trainer start: inside the job, the executor's job step (Snakemake, srun,
  Snakemake again) up to the trainer process (summary start_unix - startup_s);
- trainer start-up: the trainer's own imports (summary startup_s; the same as locally);
- cell end -> job end: the trainer's last write -> SLURM EndTime;
- job end -> Snakemake sees it: the status poll's latency (the "Finished jobid" log line);
- the whole study's wall time, and (SLURM - local) / cells.

SLURM and Snakemake stamp times to the second, so each figure is good to about 1 s.

    .venv/bin/python benchmarks/bench_slurm.py [--cells 6]
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

from mnistbench.core import schema
from mnistbench.data import mnist as data

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
PROFILE = REPO / "profiles" / "slurm"
#: The plugin's own polling (snakemake-executor-plugin-slurm 2.8.0 and Snakemake defaults).
PLUGIN_DEFAULTS = ["--slurm-init-seconds-before-status-checks", "40",
                   "--seconds-between-status-checks", "10"]


def study_config(workdir: Path, cells: int, executor: str) -> dict:
    """``cells`` sweep cells of 2 steps on 256 synthetic samples, cpu only."""
    return {
        "env": "bench-slurm-local" if executor == "local" else "",
        "executor": executor,
        "data_dir": str(workdir / "mnist"),
        "default_mirrors": False,
        "devices": ["cpu"],
        "lock_file": str(workdir / "timed-cell.lock"),
        "slurm": {"mem_mb": 1000, "runtime": 10},
        "experiments": {
            "convergence": {"enabled": False},
            "sweep": {"batch_sizes": [16 * (i + 1) for i in range(cells)], "precisions": ["fp32"],
                      "loaders": ["resident"], "repeats": 1, "max_steps": 2, "warmup_steps": 1,
                      "train_limit": 256, "test_limit": 128},
        },
    }


def run_study(workdir: Path, config: dict, *args: str) -> tuple[float, str]:
    """Run snakemake on ``config`` in ``workdir``; (wall seconds, output)."""
    workdir.mkdir(parents=True)
    data.make_synthetic(workdir / "mnist", n_train=256, n_test=128, seed=0)
    configfile = workdir / "config.yaml"
    configfile.write_text(yaml.safe_dump(config), encoding="utf-8")
    command = [str(SNAKEMAKE), "--snakefile", str(REPO / "Snakefile"), "--directory",
               str(workdir), "--configfile", str(configfile), *args]
    start = time.monotonic()
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          check=False)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"bench_slurm: snakemake failed:\n{proc.stdout[-5000:]}")
    return wall, proc.stdout


def slurm_time(text: str) -> float:
    """Unix time of a SLURM time stamp such as 2026-12-02T14:31:54 (local time)."""
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()


def finished_times(output: str) -> dict[str, float]:
    """Snakemake job id -> Unix time of its "Finished jobid" line (from the preceding stamp)."""
    stamp, found = None, {}
    for line in output.splitlines():
        match = re.fullmatch(r"\[(\w{3} \w{3} +\d+ [\d:]{8} \d{4})\]", line.strip())
        if match:
            stamp = datetime.strptime(match.group(1), "%a %b %d %H:%M:%S %Y").timestamp()
        done = re.match(r"Finished jobid: (\d+) \(Rule: bench\)", line)
        if done and stamp is not None:
            found[done.group(1)] = stamp
    return found


def cell_figures(workdir: Path, output: str) -> list[dict]:
    """Per cell of a SLURM run: its job's times and the trainer's, as seconds."""
    submitted = dict(re.findall(r"Job (\d+) has been submitted with SLURM jobid (\d+)", output))
    finished = finished_times(output)
    by_job = {}
    for path in (workdir / "results" / "runs").glob(f"*/*/*/{schema.SUMMARY_FILE}"):
        summary = json.loads(path.read_text())
        by_job[summary["env"]["slurm_job_id"]] = summary["timing"]
    cells = []
    for snakemake_id, job_id in submitted.items():
        shown = subprocess.run(["scontrol", "show", "job", "--oneliner", job_id],
                               capture_output=True, text=True, check=False).stdout
        fields = dict(re.findall(r"(\w+)=(\S*)", shown))
        if "EndTime" not in fields or job_id not in by_job:
            sys.exit(f"bench_slurm: SLURM job {job_id} is gone (MinJobAge) or has no summary")
        timing = by_job[job_id]
        cells.append({
            "job": job_id,
            "submit": slurm_time(fields["SubmitTime"]),
            "start": slurm_time(fields["StartTime"]),
            "end": slurm_time(fields["EndTime"]),
            "process_start": timing["start_unix"] - timing["startup_s"],
            "startup_s": timing["startup_s"],
            "cell_end": timing["end_unix"],
            "seen": finished[snakemake_id],
        })
    return sorted(cells, key=lambda c: c["start"])


def summarise(cells: list[dict]) -> dict[str, float]:
    """Median seconds of each overhead over the cells of one run."""
    gaps = [b["start"] - a["end"] for a, b in itertools.pairwise(cells)]
    return {
        "submit -> start (idle node)": cells[0]["start"] - cells[0]["submit"],
        "node turnaround (end -> next start)": statistics.median(gaps) if gaps else float("nan"),
        "job start -> trainer start": statistics.median(
            c["process_start"] - c["start"] for c in cells),
        "trainer start-up (imports)": statistics.median(c["startup_s"] for c in cells),
        "cell end -> job end": statistics.median(c["end"] - c["cell_end"] for c in cells),
        "job end -> Snakemake sees it": statistics.median(c["seen"] - c["end"] for c in cells),
        "job end -> seen, worst": max(c["seen"] - c["end"] for c in cells),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=6, help="timed cells per study (default 6)")
    args = parser.parse_args(argv)
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, check=False)
    if "is UP" not in ping.stdout:
        sys.exit("bench_slurm: no SLURM controller answers (scripts/slurm-cluster start)")
    results: dict[str, dict[str, float]] = {}
    walls: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench_slurm_") as tmp:
        root = Path(tmp)
        walls["local"], _ = run_study(root / "local", study_config(root / "local", args.cells,
                                                                   "local"), "--cores", "all")
        for name, extra in (("plugin defaults", PLUGIN_DEFAULTS), ("profiles/slurm", [])):
            workdir = root / name.replace("/", "-").replace(" ", "-")
            walls[name], output = run_study(
                workdir, study_config(workdir, args.cells, "slurm"), "--profile", str(PROFILE),
                *extra)
            results[name] = summarise(cell_figures(workdir, output))
    names = list(results)
    print(f"bench_slurm: {args.cells} tiny cells, medians per cell in s "
          f"({', '.join(names)})")
    for key in results[names[0]]:
        print(f"  {key:38s}" + "".join(f"{results[n][key]:10.1f}" for n in names))
    print(f"  {'study wall time':38s}" + "".join(f"{walls[n]:10.1f}" for n in names)
          + f"   (local: {walls['local']:.1f})")
    print(f"  {'(SLURM - local) / cells':38s}" + "".join(
        f"{(walls[n] - walls['local']) / args.cells:10.1f}" for n in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
