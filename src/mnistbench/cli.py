"""The ``mnistbench`` command: a thin layer that parses and validates arguments, then hands off
to the package. Heavy modules (torch, pandas, matplotlib) are imported only by the subcommand
that needs them, so ``--help`` and ``fetch`` start fast.

Exit codes: 0 success; 1 bad input (data, results, config); 2 usage error; for ``train`` the
cell statuses of :data:`mnistbench.schema.EXIT_CODES` (10 unavailable, 11 oom, 12 failed).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from . import __version__, forkserver
from .devices import DEVICES, LOADERS, PRECISIONS

MIRROR_ENV = "MNISTBENCH_MIRROR"


class CliError(Exception):
    """A user-facing error: printed as one paragraph, exit code 1."""


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number, 0 or more, got {value}")
    return value


def _add_fetch(sub) -> None:
    p = sub.add_parser(
        "fetch",
        help="download and verify the four MNIST files",
        description="Fetch the four MNIST IDX files into DEST, trying mirrors in order, and "
        "verify their decompressed contents against the official MD5 digests. Files already "
        "present and verified are kept. Mirrors given with --mirror, then those in "
        f"${MIRROR_ENV} (separated by whitespace or commas), come before the defaults.",
    )
    p.add_argument("--dest", type=Path, default=Path("resources/mnist"),
                   help="destination folder (default: %(default)s)")
    p.add_argument("--mirror", action="append", default=[], metavar="DIR_OR_URL",
                   help="a mirror tried before the defaults: a directory, file:// or "
                   "http(s):// URL holding the files, gzipped or not (repeatable)")
    p.add_argument("--no-default-mirrors", action="store_true",
                   help="try only the mirrors given with --mirror / $" + MIRROR_ENV)
    p.add_argument("--retries", type=_non_negative_int, default=2,
                   help="retries per mirror and file after the first try (default: %(default)s)")
    p.add_argument("--timeout", type=_positive_float, default=30.0,
                   help="network timeout in seconds (default: %(default)s)")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    p.set_defaults(func=_cmd_fetch)


def _cmd_fetch(args) -> int:
    from . import data

    mirrors = list(args.mirror)
    env_value = os.environ.get(MIRROR_ENV, "")
    mirrors += [m for m in env_value.replace(",", " ").split() if m]
    if not args.no_default_mirrors:
        mirrors += list(data.DEFAULT_MIRRORS)
    if not mirrors:
        raise CliError("no mirror to fetch from: give --mirror DIR_OR_URL or drop "
                       "--no-default-mirrors.")
    try:
        paths = data.fetch(args.dest, mirrors, retries=args.retries, timeout=args.timeout,
                           log=None if args.quiet else _stderr)
    except data.DataError as exc:
        raise CliError(str(exc)) from None
    if not args.quiet:
        for path in paths:
            print(path)
    return 0


def _add_train(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train and time one cell of the study",
        description="Train the study's CNN for one cell (device x precision x batch size x "
        "loader), time every phase of every epoch, and write summary.json, epochs.csv and "
        "resources.csv into --out. A cell that cannot run still writes its summary with "
        "status unavailable, oom or failed, and exits 10, 11 or 12.",
    )
    p.add_argument("--data", type=Path, default=Path("resources/mnist"),
                   help="folder with the four verified MNIST IDX files (default: %(default)s)")
    p.add_argument("--out", type=Path, required=True, help="output folder of the cell")
    p.add_argument("--device", choices=DEVICES, default="cpu")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="fp32; tf32 (CUDA); bf16 autocast (CPU, CUDA); fp16 autocast with "
                   "GradScaler (CUDA)")
    p.add_argument("--batch-size", type=_positive_int, default=128, help="samples per step")
    p.add_argument("--loader", choices=LOADERS, default="resident",
                   help="dataloader: Dataset + transform + torch DataLoader (the blog's "
                   "pipeline); resident: the normalised dataset as one tensor on the device")
    p.add_argument("--epochs", type=_positive_int, default=1, help="timed epochs")
    p.add_argument("--lr", type=_positive_float, default=1e-3, help="Adam learning rate")
    p.add_argument("--seed", type=_non_negative_int, default=0)
    p.add_argument("--threads", type=_non_negative_int, default=0,
                   help="torch intra-op CPU threads (0: torch's default)")
    p.add_argument("--workers", type=_non_negative_int, default=0,
                   help="DataLoader worker processes (dataloader loader only)")
    p.add_argument("--pin-memory", action=argparse.BooleanOptionalAction, default=False,
                   help="DataLoader pin_memory (dataloader loader only)")
    p.add_argument("--compile", nargs="?", const="default", default="",
                   choices=["default", "reduce-overhead", "max-autotune"],
                   help="wrap the model in torch.compile with this mode (bare --compile: "
                   "default; reduce-overhead uses CUDA graphs on CUDA)")
    p.add_argument("--warmup-steps", type=_non_negative_int, default=3,
                   help="untimed warm-up steps; the trajectory is restored afterwards")
    p.add_argument("--max-steps", type=_non_negative_int, default=0,
                   help="cap on training steps per epoch (0: a full epoch)")
    p.add_argument("--train-limit", type=_non_negative_int, default=0,
                   help="use only the first N training samples (0: all)")
    p.add_argument("--test-limit", type=_non_negative_int, default=0,
                   help="use only the first N test samples (0: all)")
    p.add_argument("--eval-batch-size", type=_non_negative_int, default=0,
                   help="batch size of the test-set evaluation (0: the training batch size, "
                   "the same shapes as training, which warm-up and autotuning already cover)")
    p.add_argument("--sample-interval", type=_positive_float, default=0.5,
                   help="resource sampler period in seconds")
    p.add_argument("--time-limit", type=_non_negative_float, default=0.0, metavar="SECONDS",
                   help="wall-clock limit of the warm-up and timed epochs; a cell that reaches "
                   "it is recorded as failed and exits 12 (0: no limit)")
    p.add_argument("--env", default=None,
                   help="environment name recorded in the summary (default: $MNISTBENCH_ENV "
                   "or the host name)")
    p.add_argument("--experiment", default="adhoc", help="experiment name recorded")
    p.add_argument("--cell", default=None, help="cell id recorded (default: --out's name)")
    p.add_argument("--repeat", type=_non_negative_int, default=0, help="repeat index recorded")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_train)


def _cmd_train(args) -> int:
    from . import train

    config = train.TrainConfig.from_namespace(args)
    return train.run_cell(config)


def _add_env(sub) -> None:
    p = sub.add_parser("env", help="print the environment capture as JSON",
                       description="Print what every summary records about the machine: "
                       "versions, CPU, GPU, OS, host and git revision.")
    p.set_defaults(func=_cmd_env)


def _cmd_env(args) -> int:
    from . import sysinfo

    print(json.dumps(sysinfo.capture(), indent=2, sort_keys=True))
    return 0


def _add_aggregate(sub) -> None:
    p = sub.add_parser(
        "aggregate",
        help="merge cells into summary.csv, epochs.csv and resources.csv",
        description="Read every cell under RUNS (layout RUNS/{env}/{experiment}/{cell}/) and "
        "write tidy tables into --out-dir. Cells copied in from other machines merge.",
    )
    p.add_argument("runs", type=Path, nargs="?", default=Path("results/runs"),
                   help="runs folder (default: %(default)s)")
    p.add_argument("--out-dir", type=Path, default=Path("results"),
                   help="where the CSVs go (default: %(default)s)")
    p.set_defaults(func=_cmd_aggregate)


def _cmd_aggregate(args) -> int:
    from . import aggregate

    try:
        paths = aggregate.aggregate(args.runs, args.out_dir)
    except aggregate.AggregateError as exc:
        raise CliError(str(exc)) from None
    for path in paths:
        print(path)
    return 0


def _add_report(sub) -> None:
    p = sub.add_parser(
        "report",
        help="render the self-contained HTML report",
        description="Render one self-contained HTML file (CSS inline, charts embedded) from "
        "the aggregated tables and a cost model.",
    )
    p.add_argument("--results", type=Path, default=Path("results"),
                   help="folder with summary.csv, epochs.csv, resources.csv "
                   "(default: %(default)s)")
    p.add_argument("--cost-model", type=Path, default=None,
                   help="YAML or JSON file with the cost model (prices, power, life); "
                   "default: the built-in model")
    p.add_argument("--out", type=Path, default=Path("results/report/index.html"))
    p.add_argument("--figures-dir", type=Path, default=None,
                   help="also write each chart as a PNG file here")
    p.add_argument("--command", default=None,
                   help="the command that reproduces this report, shown in the methodology")
    p.set_defaults(func=_cmd_report)


def _cmd_report(args) -> int:
    from . import report

    try:
        path = report.render_report(args.results, args.out, cost_model_path=args.cost_model,
                                    figures_dir=args.figures_dir, command=args.command)
    except report.ReportError as exc:
        raise CliError(str(exc)) from None
    print(path)
    return 0


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _add_docker(sub) -> None:
    p = sub.add_parser(
        "docker",
        help="the workflow's docker runner: check the engine, build an image, run a cell",
        description="Run timed cells in the project's container images (what the workflow "
        "does with runner: docker; docs/docker.md). `check` asks the Docker engine for its "
        "version; `build` builds an image and records its ID; `run` runs one `mnistbench "
        "train` cell in a recorded image.",
    )
    verbs = p.add_subparsers(dest="docker_command", required=True, metavar="ACTION")
    option_help = ("one argument passed to docker %s as it is (repeatable; write "
                   "--docker-option=VALUE for values that start with -)")

    check = verbs.add_parser("check", help="print the Docker server version, or why none "
                             "answers (exit 1)")
    check.set_defaults(func=_cmd_docker_check)

    build = verbs.add_parser(
        "build", help="build an image and write its record (ID, tag, inputs) as JSON",
        description="docker build -f DOCKERFILE -t TAG CONTEXT, then write RECORD (image ID, "
        "tag, Dockerfile digest, build arguments, engine version, build time) atomically. "
        "IMAGE_NAME (the tag), REVISION (git revision) and CREATED (now) are passed as build "
        "arguments unless given. A failed build leaves no record.")
    build.add_argument("--dockerfile", type=Path, required=True)
    build.add_argument("--tag", required=True, help="image name:tag")
    build.add_argument("--context", type=Path, default=Path("."),
                       help="build context: the project's root folder (default: %(default)s)")
    build.add_argument("--build-arg", type=_key_value, action="append", default=[],
                       metavar="KEY=VALUE", help="a build argument (repeatable)")
    build.add_argument("--docker-option", action="append", default=[], metavar="ARG",
                       help=option_help % "build")
    build.add_argument("--record", type=Path, required=True, help="JSON record to write")
    build.set_defaults(func=_cmd_docker_build)

    run = verbs.add_parser(
        "run", help="run one `mnistbench train` cell in a recorded image",
        description="docker run --rm the image of RECORD (by ID) with `mnistbench train ARGS`: "
        "--data mounted read-only, the results folder mounted at /work/results (the cell's "
        "files belong to that folder's owner), --network none, --gpus for cuda cells. Exits "
        "with the trainer's code (10 unavailable, 11 oom, 12 failed); a cuda cell whose "
        "container Docker cannot give a GPU records status unavailable.",
        usage="mnistbench docker run [-h] --record RECORD [--results DIR] [--shm-size SIZE] "
        "[--docker-option=ARG ...] -- train ARGS...")
    run.add_argument("--record", type=Path, required=True,
                     help="image record written by `mnistbench docker build`")
    run.add_argument("--results", type=Path, default=Path("results"), metavar="DIR",
                     help="host folder mounted at /work/results; the train command's --out "
                     "must lie in it (default: %(default)s)")
    run.add_argument("--shm-size", default="2g", metavar="SIZE",
                     help="shared memory of the container, e.g. 512m or 2g (DataLoader "
                     "workers pass batches through it; default: %(default)s)")
    run.add_argument("--docker-option", action="append", default=[], metavar="ARG",
                     help=option_help % "run")
    run.add_argument("train_args", nargs=argparse.REMAINDER, metavar="-- train ARGS",
                     help="the mnistbench train command of the cell")
    run.set_defaults(func=_cmd_docker_run)


def _cmd_docker_check(args) -> int:
    from . import container

    try:
        print(container.check_engine())
    except container.ContainerError as exc:
        raise CliError(str(exc)) from None
    return 0


def _cmd_docker_build(args) -> int:
    from . import container

    try:
        record = container.build_image(args.dockerfile, args.tag, dict(args.build_arg),
                                       args.docker_option, args.context, args.record)
    except container.ContainerError as exc:
        raise CliError(str(exc)) from None
    print(record["image_id"])
    return 0


def _cmd_docker_run(args) -> int:
    from . import container

    train_args = list(args.train_args)
    if train_args[:1] == ["--"]:
        train_args = train_args[1:]
    if not re.fullmatch(r"[1-9][0-9]*[bkmg]?", args.shm_size):
        raise CliError(f"--shm-size {args.shm_size!r}: give a number of bytes with an "
                       "optional unit b, k, m or g, e.g. 2g.")
    try:
        return container.run_cell(args.record, train_args, args.results, args.shm_size,
                                  args.docker_option)
    except container.ContainerError as exc:
        raise CliError(str(exc)) from None


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="mnistbench",
        description="How much faster, and at what cost, does a GPU train a CNN than a CPU?",
    )
    parser.add_argument("--version", action="version", version=f"mnistbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_fetch, _add_train, _add_env, _add_aggregate, _add_report,
                _add_docker):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mnistbench`` console script. With $MNISTBENCH_FORKSERVER set,
    ``train`` runs in that fork server (forkserver.py) when it serves it."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["train"] and os.environ.get(forkserver.SOCKET_ENV):
        code = forkserver.delegate(argv)
        if code is not None:
            return code
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CliError as exc:
        print(f"mnistbench {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"mnistbench {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
