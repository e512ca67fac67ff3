"""Side-by-side training rate on a CPU, fp32, in one run: the blog's code (a plain
pytorch/examples-style loop: torchvision's dataset, a DataLoader, the reference network, stock
Adam; ``bench_train.py``'s baseline, with glibc), this project's best code as the study runs it
(``mnistbench train --loader resident``, tuned, the study's allocator) and the variants tried
to go further (issue 39), each a ``mnistbench train`` flag set, by default:

- ``compiled``: ``--compile default``: the tuned network under ``torch.compile`` (inductor:
  its elementwise tail fused into generated C++; forward and backward one AOT graph), the fused
  Adam step as before.

Every side runs in a fresh process with the same untimed warm-up (compilation lands there,
reported apart), then ``--steps`` timed training steps at batch 128; the sides alternate from
repeat to repeat, so a drift of the machine hits each alike. The per-epoch rate is the
training rate (ms per step; an epoch is 469 steps): the ratio of each side against the blog's
code and against the best code is printed with the ISA, the CPU and the threads. The test
pass is left out of the ratio (each side's is printed): it is the same forward on every side.

Target (issue 39): the best fp32 code at least 2.5x the blog's code per epoch.

Usage: .venv/bin/python benchmarks/bench_step.py --data resources/mnist [--steps 60]
       [--repeats 2] [--threads 0] [--variants compiled] [--extra NAME=FLAGS]
About 3-4 minutes on 2 quiet cores with the defaults (most of it the compiled side's
compilation, once per repeat).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_train  # a sibling script: the blog's side and the CPU's name

#: The target of this benchmark: best over blog per epoch, fp32.
TARGET = 2.5
#: The variants tried beyond the best code: name -> extra ``mnistbench train`` flags.
VARIANTS = {"compiled": "--compile default"}
STEPS_PER_EPOCH = -(-bench_train.TRAIN_SIZE // bench_train.BATCH_SIZE)


def ours(args, flags: str) -> dict:
    """One run of ``mnistbench train`` (resident, fp32, the study's allocator) with ``flags``
    in a fresh process: its training seconds, steps, warm-up and test pass."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "mnistbench.console", "train", "--data", str(args.data),
               "--out", tmp, "--loader", "resident", "--precision", "fp32",
               "--batch-size", str(bench_train.BATCH_SIZE), "--threads", str(args.threads),
               "--warmup-steps", str(args.warmup_steps), "--epochs", "1",
               "--seed", str(args.seed), "--max-steps", str(args.steps),
               "--eval-batch-size", str(bench_train.BATCH_SIZE), "--quiet", *shlex.split(flags)]
        subprocess.run(cmd, check=True)
        summary = json.loads((Path(tmp) / "summary.json").read_text())
    if summary["status"] != "ok":
        raise RuntimeError(f"mnistbench train {flags}: {summary['status']}: {summary['reason']}")
    r = summary["results"]
    return {"train_s": r["train_s_median"], "epoch_s": r["epoch_s_median"],
            "steps": r["steps_per_epoch"], "warmup_s": summary["timing"]["warmup_s"],
            "allocator": summary["env"]["allocator_loaded"]}


def blog(args) -> dict:
    """One run of the blog's code (bench_train's baseline child, glibc, a fresh process)."""
    child = argparse.Namespace(data=args.data, threads=args.threads, seed=args.seed,
                               warmup_steps=args.warmup_steps,
                               eval_batch_size=bench_train.BATCH_SIZE)
    result = bench_train.baseline(child, "fp32", args.steps)
    return {**result, "allocator": "glibc"}


def figures(runs: list[dict]) -> dict:
    """Medians over one side's runs: ms per training step, the epoch's training part at that
    rate (s), the test pass (s) and the warm-up (s)."""
    step_ms = 1000 * statistics.median(r["train_s"] / r["steps"] for r in runs)
    return {"step_ms": step_ms, "train_epoch_s": step_ms * STEPS_PER_EPOCH / 1000,
            "eval_s": statistics.median(r["epoch_s"] - r["train_s"] for r in runs),
            "warmup_s": statistics.median(r["warmup_s"] for r in runs),
            "allocator": runs[0]["allocator"], "n": len(runs)}


def ratios(figs: dict[str, dict]) -> dict[str, tuple[float, float]]:
    """Per side: (the blog's ms per step / its, the best code's / its): per-epoch-rate
    ratios, above 1 where the side is faster."""
    return {side: (figs["blog"]["step_ms"] / f["step_ms"], figs["best"]["step_ms"] / f["step_ms"])
            for side, f in figs.items()}


def parse_extra(specs: list[str]) -> dict[str, str]:
    """``NAME=FLAGS`` pairs (``--extra``) as a mapping; a pair without ``=`` is refused."""
    out = {}
    for spec in specs:
        name, sep, flags = spec.partition("=")
        if not sep or not name.strip():
            raise SystemExit(f"--extra {spec!r}: expected NAME=FLAGS, e.g. "
                             "'graph=--implementation tuned-graph'")
        out[name.strip()] = flags
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--data", type=Path, default=Path("resources/mnist"))
    parser.add_argument("--steps", type=int, default=60, help="timed training steps per run")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--warmup-steps", type=int, default=None,
                        help="untimed warm-up steps on every side (default: mnistbench "
                        "train's)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads on every side (0: torch's default here)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"variants beyond the best code ({', '.join(VARIANTS)}; "
                        "comma-separated, empty for none)")
    parser.add_argument("--extra", action="append", default=[], metavar="NAME=FLAGS",
                        help="a further side: mnistbench train flags on top of the best code's")
    args = parser.parse_args(argv)
    if args.warmup_steps is None:
        args.warmup_steps = bench_train.train_default("warmup_steps")
    args.threads = args.threads or torch.get_num_threads()
    variants = {name: VARIANTS[name] for name in filter(None, args.variants.split(","))}
    variants.update(parse_extra(args.extra))
    sides = {"blog": None, "best": "", **variants}
    isa = torch.backends.cpu.get_cpu_capability()
    print(f"cpu: {bench_train.cpu_model()}, ISA {isa}; torch {torch.__version__}, "
          f"{args.threads} threads; fp32, batch {bench_train.BATCH_SIZE}, {args.steps} timed "
          f"steps per run after {args.warmup_steps} warm-up steps, {args.repeats} repeat(s), "
          "sides alternating, each a fresh process; medians", flush=True)
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    names = list(sides)
    for repeat in range(args.repeats):
        for side in names if repeat % 2 == 0 else names[::-1]:
            runs[side].append(blog(args) if side == "blog" else ours(args, sides[side]))
    figs = {side: figures(results) for side, results in runs.items()}
    for side, f in figs.items():
        flags = "the blog's code" if side == "blog" else (sides[side] or "tuned, resident")
        print(f"{side:10s} {f['step_ms']:8.1f} ms/step = {f['train_epoch_s']:6.1f} s per "
              f"epoch's training | test pass {f['eval_s']:5.1f} s | warm-up "
              f"{f['warmup_s']:5.1f} s | {f['allocator']} | {flags}", flush=True)
    print(f"\nISA {isa}; per-epoch rate (training) against the blog's code and the best code")
    print("side        vs blog   vs best   target")
    for side, (vs_blog, vs_best) in ratios(figs).items():
        verdict = "" if side == "blog" else (
            f">= {TARGET}x: {'met' if vs_blog >= TARGET else 'missed'}")
        print(f"{side:10s} {vs_blog:7.2f}x {vs_best:8.2f}x   {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
