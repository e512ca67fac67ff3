"""Side-by-side speed of one training epoch: a plain pytorch/examples-style loop against
``mnistbench train --loader resident``, in one run, on the same data and machine.

Baseline (what the blog ran): torchvision's MNIST dataset with ToTensor + Normalize, a
DataLoader with num_workers=0, the reference network (dropout from torch.nn), Adam with
lr 1e-3 (default implementation), cross-entropy, then the test-set evaluation with a
DataLoader of batch 1000. The two alternate, so drift in the machine hits both.

fp32: full epochs, accuracy compared at the end. bf16: PyTorch's CPU bf16 kernels are so slow
on CPUs without native bf16 that a baseline epoch takes many minutes; both sides then run the
same fixed number of steps (``--bf16-steps``), and per-epoch time is extrapolated from
the per-step time (469 steps per epoch at batch 128).

Targets (issue: core): resident at least 1.6x faster per epoch in fp32, 2.0x in bf16.

Usage: python benchmarks/bench_train.py --data resources/mnist [--repeats 1] [--bf16-steps 40]
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

import torch
from torch.nn import functional as F

from mnistbench.model import ReferenceNet

TARGETS = {"fp32": 1.6, "bf16": 2.0}


def baseline(data: Path, precision: str, max_steps: int, seed: int = 0) -> dict:
    """One epoch of the plain loop; seconds per epoch (train + eval) and test accuracy."""
    from torchvision import datasets, transforms

    root = Path(tempfile.mkdtemp()) / "MNIST" / "raw"
    root.mkdir(parents=True)
    for f in data.iterdir():
        (root / f.name).symlink_to(f.resolve())
    tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    train = datasets.MNIST(root.parent.parent, train=True, download=False, transform=tf)
    test = datasets.MNIST(root.parent.parent, train=False, download=False, transform=tf)
    torch.manual_seed(seed)
    model = ReferenceNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    train_loader = torch.utils.data.DataLoader(train, batch_size=128, shuffle=True)
    test_loader = torch.utils.data.DataLoader(test, batch_size=1000)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
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
    correct = 0
    with torch.no_grad(), autocast:
        for x, y in test_loader:
            correct += (model(x).argmax(1) == y).sum().item()
    epoch_s = time.perf_counter() - start
    return {"epoch_s": epoch_s, "train_s": train_s, "eval_s": epoch_s - train_s,
            "steps": steps, "acc": 100.0 * correct / len(test)}


def ours(data: Path, precision: str, max_steps: int, seed: int = 0) -> dict:
    """One epoch through the real CLI (a fresh process, as the workflow runs it)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "mnistbench.cli", "train", "--data", str(data), "--out",
               tmp, "--loader", "resident", "--precision", precision, "--batch-size", "128",
               "--epochs", "1", "--seed", str(seed), "--max-steps", str(max_steps), "--quiet"]
        subprocess.run(cmd, check=True)
        summary = json.loads((Path(tmp) / "summary.json").read_text())
    r = summary["results"]
    return {"epoch_s": r["epoch_s_median"], "train_s": r["train_s_median"], "eval_s": r["eval_s"],
            "steps": r["steps_per_epoch"], "acc": r["final_test_acc"],
            "warmup_s": summary["timing"]["warmup_s"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("resources/mnist"))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--bf16-steps", type=int, default=40,
                        help="steps per side in bf16 (0: full epochs; slow)")
    parser.add_argument("--precisions", default="fp32,bf16")
    args = parser.parse_args()
    steps_per_epoch = -(-60000 // 128)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch 128", flush=True)
    rows = []
    for precision in args.precisions.split(","):
        max_steps = args.bf16_steps if precision == "bf16" else 0
        runs: dict[str, list[dict]] = {"baseline": [], "resident": []}
        for _ in range(args.repeats):
            runs["baseline"].append(baseline(args.data, precision, max_steps))
            runs["resident"].append(ours(args.data, precision, max_steps))
        per_epoch = {}
        for side, results in runs.items():
            train_step = statistics.median(r["train_s"] / r["steps"] for r in results)
            eval_s = statistics.median(r["eval_s"] for r in results)
            per_epoch[side] = train_step * steps_per_epoch + eval_s
            acc = statistics.median(r["acc"] for r in results)
            print(f"{precision:5s} {side:9s} {per_epoch[side]:8.1f} s/epoch "
                  f"({train_step * 1000:6.1f} ms/step, eval {eval_s:5.1f} s, "
                  f"{results[0]['steps']} steps) test acc {acc:6.2f}%", flush=True)
        ratio = per_epoch["baseline"] / per_epoch["resident"]
        verdict = "meets" if ratio >= TARGETS[precision] else "MISSES"
        rows.append((precision, ratio))
        print(f"{precision:5s} speed-up resident / plain loop: {ratio:.2f}x "
              f"({verdict} the {TARGETS[precision]}x target)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
