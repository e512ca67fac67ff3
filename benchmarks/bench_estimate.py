"""How good the study's estimate of its own duration is: the quick study, run for real,
against what its estimate said (targets: the first estimate within 2x of the measured
duration, the last within 20 %).

Runs ``snakemake --cores all`` on the project's Snakefile with config/config.yaml and
config/quick.yaml in a fresh working directory (so the first estimate has no earlier results
of this machine to learn from: what a newcomer gets), the MNIST files from ``--data``, and
reads the lines the study prints (mnistbench.launch.estimate): the one from a default limit
before any job ("default", no target), the first from the measured limit, printed before the
first cell ends, the one after half of the cells, and the last, after the last cell.
Each gives a predicted duration, the time spent when it was printed plus the time it said was
left; each is printed beside the measured duration of the whole run (Snakemake's start to its
exit) with their ratio. Exit status 1 when a target is missed. Run it on a quiet machine: the
figures of a run beside other work say little.

    .venv/bin/python benchmarks/bench_estimate.py --data resources/mnist [--configfile FILE ...]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
FIRST_TARGET = 2.0  # the first estimate within this factor of the measured duration
LAST_TARGET = 0.20  # the last within this share
ENV = "bench-estimate"

_UNITS = {"h": 3600, "min": 60, "s": 1}
_FIRST = re.compile(r"^estimate: (\d+) cells, about (.+?) \(")
_DONE = re.compile(r"^estimate: (\d+)/(\d+) cells done.*?; (.+?) spent, about (.+?) left \(")


def seconds(text: str) -> float:
    """``1 h 05 min``, ``4 min 10 s``, ``12 s`` (mnistbench.launch.estimate.duration) in s."""
    parts = text.split()
    if len(parts) % 2 or not parts:
        raise ValueError(f"not a duration: {text!r}")
    return float(sum(int(n) * _UNITS[u] for n, u in zip(parts[::2], parts[1::2], strict=True)))


def predictions(lines: list[tuple[float, str]], started: float) -> dict[str, float]:
    """The predicted durations (s) of the run from its timed output lines: ``first`` (time
    spent until the first estimate, plus its total), ``half`` and ``last`` (spent plus left,
    after half of the cells and after the last)."""
    out: dict[str, float] = {}
    done: list[tuple[int, int, float]] = []
    for at, line in lines:
        first = _FIRST.match(line)
        # The line before any job (a default limit while the peak jobs are pending) is
        # "default"; the first from the measured limit, before the first cell ends, "first".
        name = "default" if first and "(not measured yet)" in line else "first"
        if first and name not in out:
            out[name] = at - started + seconds(first.group(2))
        found = _DONE.match(line)
        if found:
            n, total = int(found.group(1)), int(found.group(2))
            done.append((n, total, at - started + seconds(found.group(4))))
    if done:
        total = done[-1][1]
        out["half"] = next(p for n, _, p in done if n >= total / 2)
        out["last"] = done[-1][2]
    return out


def cpu_description() -> str:
    """The CPU's model name, its logical cores and its widest vector ISA (from /proc/cpuinfo)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return f"{os.cpu_count()} cores"
    model = re.search(r"^model name\s*:\s*(.+)$", info, re.MULTILINE)
    flags = set((re.search(r"^flags\s*:\s*(.+)$", info, re.MULTILINE) or ["", ""])[1].split())
    isa = next((name for flag, name in (("amx_tile", "AMX"), ("avx512_bf16", "AVX-512 + bf16"),
                                        ("avx512f", "AVX-512"), ("avx2", "AVX2"))
                if flag in flags), "no AVX2")
    return f"{model.group(1) if model else 'unknown CPU'}, {os.cpu_count()} cores, {isa}"


def run_study(data: Path, workdir: Path, configfiles: list[Path]) -> tuple[float, dict, int]:
    """Run the quick study (``configfiles`` on top) in ``workdir``; (measured s, predictions,
    exit status)."""
    command = [str(SNAKEMAKE), "--snakefile", str(REPO / "Snakefile"), "--directory",
               str(workdir), "--cores", "all", "--configfile",
               str(REPO / "config" / "config.yaml"), str(REPO / "config" / "quick.yaml"),
               *(str(path.resolve()) for path in configfiles),
               "--config", f"data_dir={data}", "default_mirrors=False", f"env={ENV}",
               f"lock_file={workdir / 'timed-cell.lock'}"]
    lines: list[tuple[float, str]] = []
    started = time.time()
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append((time.time(), line.rstrip("\n")))
            if line.startswith(("estimate:", "progress:")):
                print(f"  {line.rstrip()}", flush=True)
    measured = time.time() - started
    if proc.returncode:
        print("\n".join(text for _, text in lines[-40:]), file=sys.stderr)
    return measured, predictions(lines, started), proc.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=REPO / "resources" / "mnist",
                        help="folder of the four decompressed MNIST files (default: "
                        "%(default)s; `.venv/bin/mnistbench fetch` fills it)")
    parser.add_argument("--configfile", nargs="*", type=Path, default=[], metavar="FILE",
                        help="more config files on top of the quick study's (e.g. to shorten "
                        "it for a check of this script)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="run in this folder (kept) instead of a temporary one")
    args = parser.parse_args(argv)
    data = args.data.resolve()
    missing = [n for n in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
               if not (data / n).is_file()]
    if missing:
        print(f"bench_estimate: {data} lacks {', '.join(missing)}: run `.venv/bin/mnistbench "
              f"fetch --dest {data}` or give --data", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-estimate-") as tmp:
        workdir = args.keep.resolve() if args.keep else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        measured, predicted, status = run_study(data, workdir, args.configfile)
    if status:
        print(f"bench_estimate: the study failed (exit {status})", file=sys.stderr)
        return 1
    if "first" not in predicted or "last" not in predicted:
        print("bench_estimate: the study printed no estimate (a folder with every cell "
              "done already?)", file=sys.stderr)
        return 1
    machine = cpu_description()
    print(f"\nquick study, {machine}, measured {measured:.0f} s end to end")
    print(f"{'estimate':<8} {'predicted s':>12} {'measured s':>11} {'ratio':>7}  target")
    ok = True
    for name in ("default", "first", "half", "last"):
        if name not in predicted:  # no line from a default limit: no peak job was pending
            continue
        ratio = predicted[name] / measured
        if name == "first":
            met = 1 / FIRST_TARGET <= ratio <= FIRST_TARGET
            target = f"within {FIRST_TARGET:g}x: {'met' if met else 'MISSED'}"
        elif name == "last":
            met = abs(ratio - 1) <= LAST_TARGET
            target = f"within {LAST_TARGET:.0%}: {'met' if met else 'MISSED'}"
        else:
            met, target = True, "(none)"
        ok = ok and met
        print(f"{name:<8} {predicted[name]:>12.0f} {measured:>11.0f} {ratio:>6.2f}x  {target}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
