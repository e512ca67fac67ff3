"""Side-by-side speed of one training epoch: a plain pytorch/examples-style loop against
``mnistbench train --loader resident``, in one run, on the same data and machine, with the
same warm-up policy and the same loader settings on both sides.

Baseline (what the blog ran): torchvision's MNIST dataset with ToTensor + Normalize, a
DataLoader, the reference network (dropout from torch.nn), Adam with lr 1e-3 (default
implementation), cross-entropy, then the test-set evaluation (summed loss and accuracy).

Symmetry (each side runs in a fresh process, as ``mnistbench train`` does in the workflow):

- Warm-up: both sides run the same untimed warm-up as ``mnistbench train`` (measure/warmup.py's
  ``warm_up``): ``--warmup-steps`` full training steps (default: ``mnistbench train``'s default,
  passed explicitly to both sides), one step at the epoch's last (partial) batch size on a full
  epoch, and one evaluation batch of each test-pass shape; then the model, optimizer and
  torch RNG states are restored (deep copies of the state_dicts, ``torch.get_rng_state``), so
  the timed trajectory is the one an un-warmed run takes. The warm-up's seconds are measured
  on both sides and reported. ``--warmup-steps 0`` turns it off on both sides.
- Loader settings: batch 128; shuffling on both sides (ours always shuffles its resident
  data; pytorch/examples does not shuffle on CPU, only with an accelerator, but for the
  baseline it costs next to nothing: one ``randperm`` of 60000 per epoch, and random access
  to torchvision's in-memory MNIST tensor costs what sequential access does: 100 batches of
  128 through the baseline's DataLoader, 8 runs each, interleaved, on the shared 2-core
  development machine took 0.96 s shuffled vs 0.87 s in order at best and 1.37 vs 1.38 s
  median, noise that bounds the cost below 1% of a baseline epoch); ``num_workers`` 0; the
  test pass at the same batch size on both sides
  (``--eval-batch-size``, default 128: ``mnistbench train`` evaluates at the training batch
  size by default; pytorch/examples uses 1000); the same number of torch threads
  (``--threads``, default: torch's default here, passed explicitly to both).
- Timed epoch: one epoch, training then the test pass, wall time (data loading and process
  start-up are outside it on both sides).

Two ratios per precision: **warm-up excluded on both sides** (timed epoch against timed
epoch; what the targets are judged on) and **warm-up included on both sides** (warm-up + timed
epoch: one epoch's wall time as a user of each side sees it, less process start-up and data
loading). The sides alternate (the first side swaps from repeat to repeat), so drift in the
machine hits both; figures are medians over ``--repeats``.

fp32: full epochs by default (``--fp32-steps N`` caps both sides at N steps for a quick run).
bf16: PyTorch's CPU bf16 kernels are so slow on CPUs without native bf16 that a baseline epoch
takes many minutes; both sides then run the same number of timed steps (``--bf16-steps``) after
the same warm-up, and the epoch is extrapolated on both sides the same way: median time per
timed step x 469 steps + the measured test pass. (A capped run warms no partial-batch step on
either side, as ``mnistbench train --max-steps`` does not.)

Allocators (``--allocators``): our side runs once per allocator (``mnistbench train
--allocator X``: glibc as it comes, glibc tuned with mallopt, jemalloc, tcmalloc; the ones not
installed are left out), the baseline always with the stock allocator (glibc, nothing
preloaded), so each row's ratio says what the implementation and that allocator are worth
together, and the rows side by side what the allocator alone is worth. Our side with glibc is
the code as it ran before the allocator was a setting.

Targets: resident at least 2.0x faster per epoch than the plain loop in fp32, and in bf16 4x on
CPUs with native bf16 (2.0x elsewhere), warm-up excluded on both sides.

Usage: python benchmarks/bench_train.py --data resources/mnist [--repeats 1] [--bf16-steps 40]
       [--fp32-steps 0] [--warmup-steps 3] [--precisions fp32,bf16]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.nn import functional as F

from mnistbench.measure.model import ReferenceNet

TARGETS = {"fp32": 2.0, "bf16": 2.0}
#: bf16 target on CPUs with native bf16 (AVX512-BF16 or AMX).
NATIVE_BF16_TARGET = 4.0
BATCH_SIZE = 128
TRAIN_SIZE = 60000
SIDES = ("baseline", "resident")


def train_default(name: str):
    """The default of one ``mnistbench train`` option (e.g. ``warmup_steps``), from its parser."""
    from mnistbench.cli import build_parser

    return getattr(build_parser().parse_args(["train", "--out", "unused"]), name)


def warmup_shapes(train_size: int, batch_size: int, warmup_steps: int, max_steps: int,
                  test_size: int, eval_batch_size: int) -> tuple[list[int], list[int]]:
    """Batch sizes of the untimed warm-up, as ``mnistbench train`` runs it: training steps
    (``warmup_steps`` full batches, then the epoch's partial last batch on a full epoch) and
    evaluation batches (one of each test-pass shape); no warm-up when ``warmup_steps`` is 0."""
    if warmup_steps == 0:
        return [], []
    train = [min(batch_size, train_size)] * warmup_steps
    if train_size % batch_size and not max_steps:
        train.append(train_size % batch_size)
    evals = {min(eval_batch_size, test_size)}
    if test_size % eval_batch_size:
        evals.add(test_size % eval_batch_size)
    return train, sorted(evals)


def epoch_seconds(result: dict, steps_per_epoch: int) -> float:
    """Timed epoch seconds (train + eval) of one run: measured on a full epoch, else the
    time per step x ``steps_per_epoch`` + the rest of the measured epoch (the test pass)."""
    if result["steps"] >= steps_per_epoch:
        return result["epoch_s"]
    return (result["train_s"] / result["steps"] * steps_per_epoch
            + result["epoch_s"] - result["train_s"])


def side_figures(results: list[dict], steps_per_epoch: int) -> dict:
    """Medians over repeats of one side: warm-up s, timed epoch s, both together, ms per
    step, the test pass s and test accuracy."""
    return {
        "warmup_s": statistics.median(r["warmup_s"] for r in results),
        "epoch_s": statistics.median(epoch_seconds(r, steps_per_epoch) for r in results),
        "with_warmup_s": statistics.median(r["warmup_s"] + epoch_seconds(r, steps_per_epoch)
                                           for r in results),
        "step_ms": 1000 * statistics.median(r["train_s"] / r["steps"] for r in results),
        "eval_s": statistics.median(r["epoch_s"] - r["train_s"] for r in results),
        "steps": results[0]["steps"],
        "acc": statistics.median(r["acc"] for r in results),
    }


def speedups(figures: dict[str, dict], side: str = "resident") -> dict[str, float]:
    """Baseline / ``side`` (one of ours), warm-up excluded and included on both sides."""
    base, ours_ = figures["baseline"], figures[side]
    return {"excluded": base["epoch_s"] / ours_["epoch_s"],
            "included": base["with_warmup_s"] / ours_["with_warmup_s"]}


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (platform's guess elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


# -- the baseline: a plain pytorch/examples-style loop ------------------------------------------


def baseline_warm_up(model, opt, train_ds, test_ds, train_shapes, eval_shapes, autocast) -> float:
    """The untimed warm-up on the first samples of each split (the shuffling is untouched),
    then model, optimizer and torch RNG restored; seconds."""
    if not train_shapes and not eval_shapes:
        return 0.0
    start = time.perf_counter()
    state = (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()),
             torch.get_rng_state())
    collate = torch.utils.data.default_collate
    model.train()
    for size in train_shapes:
        x, y = collate([train_ds[i] for i in range(size)])
        opt.zero_grad()
        with autocast:
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad(), autocast:
        for size in eval_shapes:
            x, y = collate([test_ds[i] for i in range(size)])
            F.cross_entropy(model(x).float(), y, reduction="sum").item()
    model.load_state_dict(state[0])
    opt.load_state_dict(state[1])
    torch.set_rng_state(state[2])
    return time.perf_counter() - start


def baseline_epoch(model, opt, train_loader, test_loader, autocast, max_steps: int) -> dict:
    """One timed epoch (training, then the test pass): seconds, steps, test loss and accuracy."""
    start = time.perf_counter()
    model.train()
    steps = 0
    for x, y in train_loader:
        opt.zero_grad()
        with autocast:
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        steps += 1
        if steps == max_steps:
            break
    train_s = time.perf_counter() - start
    model.eval()
    test_loss = 0.0
    correct = count = 0
    with torch.no_grad(), autocast:
        for x, y in test_loader:
            out = model(x)
            test_loss += F.cross_entropy(out.float(), y, reduction="sum").item()
            correct += (out.argmax(1) == y).sum().item()
            count += len(y)
    epoch_s = time.perf_counter() - start
    return {"epoch_s": epoch_s, "train_s": train_s, "steps": steps,
            "test_loss": test_loss / max(count, 1), "acc": 100.0 * correct / max(count, 1)}


def mnist_datasets(data: Path, root: Path):
    """torchvision's MNIST train and test sets (ToTensor + Normalize) over the IDX files in
    ``data``, linked into ``root`` as torchvision expects them."""
    from torchvision import datasets, transforms

    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for f in data.iterdir():
        if not (raw / f.name).exists():
            (raw / f.name).symlink_to(f.resolve())
    tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    return (datasets.MNIST(root, train=True, download=False, transform=tf),
            datasets.MNIST(root, train=False, download=False, transform=tf))


def run_baseline(train_ds, test_ds, precision: str, max_steps: int, *, seed: int = 0,
                 warmup_steps: int, batch_size: int = BATCH_SIZE,
                 eval_batch_size: int = BATCH_SIZE) -> dict:
    """Model, optimizer and loaders of the plain loop, its warm-up, then one timed epoch."""
    torch.manual_seed(seed)
    model = ReferenceNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    train_loader = torch.utils.data.DataLoader(train_ds, batch_size=batch_size, shuffle=True,
                                               num_workers=0)
    test_loader = torch.utils.data.DataLoader(test_ds, batch_size=eval_batch_size,
                                              shuffle=False, num_workers=0)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
    shapes = warmup_shapes(len(train_ds), batch_size, warmup_steps, max_steps, len(test_ds),
                           eval_batch_size)
    warmup_s = baseline_warm_up(model, opt, train_ds, test_ds, *shapes, autocast)
    return {**baseline_epoch(model, opt, train_loader, test_loader, autocast, max_steps),
            "warmup_s": warmup_s}


def baseline_child(args) -> int:
    """The baseline in this (fresh) process; its result as one JSON line on stdout."""
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        train_ds, test_ds = mnist_datasets(args.data, Path(tmp))
        result = run_baseline(train_ds, test_ds, args.child_precision, args.child_max_steps,
                              seed=args.seed, warmup_steps=args.warmup_steps,
                              eval_batch_size=args.eval_batch_size)
    print(json.dumps(result), flush=True)
    return 0


# -- the two sides, each in a fresh process ------------------------------------------------------


def native_bf16() -> bool:
    """Whether this CPU has native bf16 (AVX512-BF16 or AMX-BF16), from /proc/cpuinfo."""
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def installed_allocators(wanted: str) -> list[str]:
    """The allocators of ``wanted`` (comma-separated) this machine has."""
    from mnistbench.core import cpuruntime

    out = []
    for name in [a.strip() for a in wanted.split(",") if a.strip()]:
        try:
            cpuruntime.resolve(name)
        except cpuruntime.AllocatorError as exc:
            print(f"skipping allocator {name}: {exc}", flush=True)
            continue
        out.append(name)
    return out


def baseline(args, precision: str, max_steps: int) -> dict:
    """One baseline run in a fresh process (so the warm-up is as cold as ours), with the
    stock allocator (nothing preloaded)."""
    from mnistbench.core import cpuruntime

    cmd = [sys.executable, str(Path(__file__).resolve()), "--data", str(args.data),
           "--threads", str(args.threads), "--seed", str(args.seed),
           "--warmup-steps", str(args.warmup_steps),
           "--eval-batch-size", str(args.eval_batch_size),
           "--child-precision", precision, "--child-max-steps", str(max_steps)]
    env = cpuruntime.preload_environment(os.environ, None)
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def ours(args, precision: str, max_steps: int, allocator: str = "glibc") -> dict:
    """One epoch through the real console script (a fresh process, as the workflow runs it;
    it preloads the allocator's library itself)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "mnistbench.console", "train", "--data", str(args.data),
               "--allocator", allocator,
               "--out", tmp, "--loader", "resident", "--precision", precision,
               "--batch-size", str(BATCH_SIZE), "--eval-batch-size", str(args.eval_batch_size),
               "--threads", str(args.threads), "--warmup-steps", str(args.warmup_steps),
               "--epochs", "1", "--seed", str(args.seed), "--max-steps", str(max_steps),
               "--quiet"]
        subprocess.run(cmd, check=True)
        summary = json.loads((Path(tmp) / "summary.json").read_text())
    if summary["status"] != "ok":
        raise RuntimeError(f"mnistbench train: {summary['status']}: {summary['reason']}")
    r = summary["results"]
    return {"epoch_s": r["epoch_s_median"], "train_s": r["train_s_median"],
            "steps": r["steps_per_epoch"], "test_loss": r["final_test_loss"],
            "acc": r["final_test_acc"], "warmup_s": summary["timing"]["warmup_s"],
            "allocator": summary["env"]["allocator_loaded"]}


def _verdict(ratio: float, target: float) -> str:
    return "meets" if ratio >= target else "MISSES"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--data", type=Path, default=Path("resources/mnist"))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--bf16-steps", type=int, default=40,
                        help="timed steps per side in bf16, epoch extrapolated (0: full epochs; "
                        "slow)")
    parser.add_argument("--fp32-steps", type=int, default=0,
                        help="timed steps per side in fp32, epoch extrapolated (0: full epochs, "
                        "the default; a small number for a quick check)")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--warmup-steps", type=int, default=None,
                        help="untimed warm-up steps on both sides (default: mnistbench train's "
                        "default); 0: no warm-up on either side")
    parser.add_argument("--eval-batch-size", type=int, default=BATCH_SIZE,
                        help="batch size of the test pass on both sides (default 128, the "
                        "training batch size, as mnistbench train)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads on both sides (0: torch's default here)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--allocators", default="glibc,glibc-tuned,jemalloc,tcmalloc",
                        help="our side once per allocator (comma-separated; those not "
                        "installed are skipped); the baseline always runs with glibc")
    # Internal: run one baseline in this process (the parent starts a fresh one per run).
    parser.add_argument("--child-precision", help=argparse.SUPPRESS)
    parser.add_argument("--child-max-steps", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.warmup_steps is None:
        args.warmup_steps = train_default("warmup_steps")
    args.threads = args.threads or torch.get_num_threads()
    if args.child_precision:
        return baseline_child(args)

    steps_per_epoch = -(-TRAIN_SIZE // BATCH_SIZE)
    allocators = installed_allocators(args.allocators)
    sides = ("baseline", *(f"ours:{a}" for a in allocators))
    isa = torch.backends.cpu.get_cpu_capability()
    print(f"cpu: {cpu_model()}, ISA {isa}, native bf16 {'yes' if native_bf16() else 'no'}; "
          f"torch {torch.__version__}, {args.threads} threads", flush=True)
    warmup = (f"warm-up {args.warmup_steps} steps + the partial batch (full epochs) + each "
              "test-pass shape, untimed, state restored" if args.warmup_steps
              else "no warm-up (--warmup-steps 0)")
    print(f"both sides: batch {BATCH_SIZE}, shuffled, num_workers 0, test pass at batch "
          f"{args.eval_batch_size}; {warmup}; {args.repeats} repeat(s), sides alternating; "
          "medians; baseline with glibc", flush=True)
    summary = []
    for precision in args.precisions.split(","):
        max_steps = args.bf16_steps if precision == "bf16" else args.fp32_steps
        runs: dict[str, list[dict]] = {side: [] for side in sides}
        for repeat in range(args.repeats):
            order = sides if repeat % 2 == 0 else sides[::-1]
            for side in order:
                if side == "baseline":
                    runs[side].append(baseline(args, precision, max_steps))
                else:
                    runs[side].append(ours(args, precision, max_steps, side.split(":")[1]))
        figures = {side: side_figures(results, steps_per_epoch) for side, results in runs.items()}
        extrapolated = figures["baseline"]["steps"] < steps_per_epoch
        for side, f in figures.items():
            print(f"{precision:5s} {side:17s} warm-up {f['warmup_s']:5.1f} s | timed epoch "
                  f"{f['epoch_s']:7.1f} s{' (extrapolated)' if extrapolated else ''} | with "
                  f"warm-up {f['with_warmup_s']:7.1f} s | {f['step_ms']:7.1f} ms/step, test pass "
                  f"{f['eval_s']:5.1f} s, {f['steps']} timed steps, test acc {f['acc']:6.2f}%",
                  flush=True)
        target = TARGETS.get(precision, 0.0)
        if precision == "bf16" and native_bf16():
            target = NATIVE_BF16_TARGET
        for side in sides[1:]:
            ratio = speedups(figures, side)
            gain = figures["ours:glibc"]["epoch_s"] / figures[side]["epoch_s"] \
                if "ours:glibc" in figures else float("nan")
            summary.append((precision, side.split(":")[1], ratio, gain, target))
    print(f"\nISA {isa}; speed-up of resident over the plain loop (baseline: glibc), and of each "
          "allocator over glibc on our side; warm-up excluded on both sides unless said")
    print("precision  allocator    vs plain loop  (warm-up incl.)  vs our glibc  target")
    for precision, allocator, ratio, gain, target in summary:
        print(f"{precision:9s}  {allocator:11s}  {ratio['excluded']:12.2f}x  "
              f"{ratio['included']:14.2f}x  {gain:11.2f}x  >= {target}x: "
              f"{_verdict(ratio['excluded'], target)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
