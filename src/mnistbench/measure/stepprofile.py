"""Where a cell's training steps spend their time on a GPU: the device operations (kernels,
copies, fills) each step launches, the share of the steps' device span the device was busy,
and the profiler's table of them. What a lease records where the whole-step capture misses
its target (issue 39; ``scripts/gpu-study run --profile-capture``): a probe outside the study,
never aggregated, written under ``probes/``.

The cell is set up as ``mnistbench train`` sets it up (the same flags, loaders, trainer,
warm-up, and for ``--implementation tuned-graph`` the same captured graphs), then ``steps``
training steps of the first epoch run under ``torch.profiler`` with device activity only (no
host-op tracing, which would slow a host-bound loop and so understate the busy share). The
busy share is the union of the device operations' intervals over the span from the first
one's start to the last one's end: a host-bound loop shows as gaps between them.

Off CUDA there are no device operations: the figures are empty and the table lists the host
ops (``torch.profiler`` with CPU activity), so the probe's logic runs in the CPU tests.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path

#: The files a profile writes into its ``--out`` folder.
PROFILE_JSON = "profile.json"
PROFILE_TABLE = "profile.txt"
#: Training steps profiled unless ``--profile-steps`` says otherwise.
DEFAULT_STEPS = 50
#: Rows of the profiler's table kept (by device time, else host time).
TABLE_ROWS = 25


def busy_us(intervals: Iterable[tuple[float, float]]) -> float:
    """The length of the union of ``(start, end)`` intervals (overlaps counted once)."""
    total, end_so_far = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= end_so_far:
            continue
        total += end - max(start, end_so_far)
        end_so_far = end
    return total


def summarise(intervals: list[tuple[float, float]], steps: int) -> dict[str, float | int | None]:
    """The figures of ``steps`` profiled steps whose device operations ran over
    ``intervals`` (µs): operations in all and per step, the device span (first start to last
    end), the busy time in it and its share (%); empty figures without any operation."""
    if not intervals or steps < 1:
        return {"steps": steps, "device_ops": len(intervals), "device_ops_per_step": None,
                "span_us": None, "busy_us": None, "busy_pct": None}
    span = max(e for _, e in intervals) - min(s for s, _ in intervals)
    busy = busy_us(intervals)
    return {"steps": steps, "device_ops": len(intervals),
            "device_ops_per_step": len(intervals) / steps, "span_us": span, "busy_us": busy,
            "busy_pct": 100.0 * busy / span if span > 0 else None}


def _run_steps(trainer, loaders, steps: int) -> None:
    """``steps`` training steps of the first epoch: replays of the captured graphs, or the
    trainer's eager steps over the timed loader."""
    from mnistbench.measure.trainer import NullTimer

    graphs = trainer.graphs
    if graphs is not None:
        graphs.begin_epoch(loaders.train.epoch_order())
        for step in range(steps):
            graphs.replay(step)
        return
    trainer.begin_epoch(steps)
    for done, (x, y) in enumerate(loaders.train, start=1):
        trainer.step(x, y, NullTimer())
        if done == steps:
            break


def profile_cell(cfg, steps: int = DEFAULT_STEPS) -> tuple[dict, str]:
    """Set ``cfg``'s cell up (a :class:`mnistbench.measure.cellconfig.TrainConfig`), warm it
    up and profile ``steps`` training steps (fewer where an epoch has fewer): the figures of
    :func:`summarise` with the cell's settings, and the profiler's table."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from mnistbench.core import options
    from mnistbench.measure import backends, capture
    from mnistbench.measure.cellconfig import stream_seeds
    from mnistbench.measure.epochs import steps_per_epoch_of
    from mnistbench.measure.loaders import build_loaders
    from mnistbench.measure.timing import synchronize
    from mnistbench.measure.trainer import Trainer
    from mnistbench.measure.warmup import warm_up

    cfg.validate()
    cfg.fill_eval_batch_size()
    if cfg.threads:  # as the cell's own process sets them
        torch.set_num_threads(cfg.threads)
    device = backends.pick_device(cfg.device)
    seeds = stream_seeds(cfg.seed)
    torch.manual_seed(seeds["dropout"])
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = cfg.cudnn_benchmark
    loaders = build_loaders(cfg, device, torch.Generator().manual_seed(seeds["shuffle"]))
    trainer = Trainer(cfg, device, seeds["init"])
    per_epoch = steps_per_epoch_of(loaders, cfg)
    if cfg.implementation == options.GRAPH_IMPLEMENTATION:
        trainer.graphs = capture.StepGraphs(trainer, loaders.train.images, loaders.train.labels,
                                            cfg.batch_size, per_epoch,
                                            capture=device.type == "cuda")
    warm_up(trainer, loaders, cfg)
    steps = min(steps, per_epoch)
    on_device = device.type == "cuda"
    activity = ProfilerActivity.CUDA if on_device else ProfilerActivity.CPU
    synchronize(cfg.device)
    with profile(activities=[activity]) as prof:
        _run_steps(trainer, loaders, steps)
        synchronize(cfg.device)
    intervals = [(e.time_range.start, e.time_range.end) for e in prof.events()
                 if on_device and getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA]
    figures = {"device": cfg.device, "precision": cfg.precision,
               "implementation": cfg.implementation, "batch_size": cfg.batch_size,
               "cuda_graphs": trainer.graphs is not None and trainer.graphs.capture,
               **summarise(intervals, steps)}
    sort = "device_time_total" if on_device else "cpu_time_total"
    table = prof.key_averages().table(sort_by=sort, row_limit=TABLE_ROWS)
    return figures, table


def main(argv: list[str]) -> int:
    """``mnistbench train``'s flags and ``--profile-steps N``: profile the cell, write
    :data:`PROFILE_JSON` and :data:`PROFILE_TABLE` into ``--out`` and print one line."""
    from mnistbench.core import options
    from mnistbench.measure.cellconfig import TrainConfig

    parser = options.train_parser()
    parser.prog = "mnistbench.measure.stepprofile"
    parser.add_argument("--profile-steps", type=int, default=DEFAULT_STEPS,
                        help="training steps to profile after the warm-up")
    args = parser.parse_args(argv)
    if args.profile_steps < 1:
        parser.error(f"--profile-steps must be at least 1, got {args.profile_steps}")
    cfg = TrainConfig.from_namespace(args)
    figures, table = profile_cell(cfg, args.profile_steps)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / PROFILE_JSON).write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n",
                                    encoding="utf-8")
    (out / PROFILE_TABLE).write_text(table + "\n", encoding="utf-8")
    print(describe(figures))
    return 0


def describe(figures: dict) -> str:
    """One line of a profile's figures: "48.0 device ops per step, device busy 45 % of
    its span (50 steps, fp32, tuned-graph, CUDA graphs)"."""
    per_step, busy = figures.get("device_ops_per_step"), figures.get("busy_pct")
    what = (f"{per_step:.1f} device ops per step, device busy "
            f"{'?' if busy is None else f'{busy:.0f}'} % of its span" if per_step is not None
            else "no device operations recorded (not a CUDA cell?)")
    graphs = "CUDA graphs" if figures.get("cuda_graphs") else "eager"
    return (f"{what} ({figures.get('steps')} steps, {figures.get('precision')}, "
            f"{figures.get('implementation')}, {graphs})")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
