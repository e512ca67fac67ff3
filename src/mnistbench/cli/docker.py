"""``mnistbench docker check|build|run``: the workflow's docker runner, which checks the
engine, builds an image and records it, and runs one ``train`` cell in a recorded image
(:mod:`mnistbench.launch.container`; docs/docker.md)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from mnistbench.cli.common import CliError
from mnistbench.core.options import path_of


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def register(sub) -> None:
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
    check.set_defaults(func=check_command)

    build = verbs.add_parser(
        "build", help="build an image and write its record (ID, tag, inputs) as JSON",
        description="docker build -f DOCKERFILE -t TAG CONTEXT, then write RECORD (image ID, "
        "tag, Dockerfile digest, build arguments, engine version, build time) atomically. "
        "IMAGE_NAME (the tag), REVISION (git revision) and CREATED (now) are passed as build "
        "arguments unless given. A failed build leaves no record.")
    build.add_argument("--dockerfile", type=path_of, required=True,
                       help="the Dockerfile, e.g. docker/cpu.Dockerfile")
    build.add_argument("--tag", required=True, help="image name:tag")
    build.add_argument("--context", type=path_of, default=Path("."),
                       help="build context: the project's root folder (default: %(default)s)")
    build.add_argument("--build-arg", type=_key_value, action="append", default=[],
                       metavar="KEY=VALUE", help="a build argument (repeatable)")
    build.add_argument("--docker-option", action="append", default=[], metavar="ARG",
                       help=option_help % "build")
    build.add_argument("--record", type=path_of, required=True, help="JSON record to write")
    build.set_defaults(func=build_command)

    run = verbs.add_parser(
        "run", help="run one `mnistbench train` cell in a recorded image",
        description="docker run --rm the image of RECORD (by ID) with `mnistbench train ARGS`: "
        "--data mounted read-only, the results folder mounted at /work/results (the cell's "
        "files belong to that folder's owner), --network none, --gpus for cuda cells. Exits "
        "with the trainer's code (10 unavailable, 11 oom, 12 failed); a cuda cell whose "
        "container Docker cannot give a GPU records status unavailable.",
        usage="mnistbench docker run [-h] --record RECORD [--results DIR] [--shm-size SIZE] "
        "[--docker-option=ARG ...] -- train ARGS...")
    run.add_argument("--record", type=path_of, required=True,
                     help="image record written by `mnistbench docker build`")
    run.add_argument("--results", type=path_of, default=Path("results"), metavar="DIR",
                     help="host folder mounted at /work/results; the train command's --out "
                     "must lie in it (default: %(default)s)")
    run.add_argument("--shm-size", default="2g", metavar="SIZE",
                     help="shared memory of the container, e.g. 512m or 2g (DataLoader "
                     "workers pass batches through it; default: %(default)s)")
    run.add_argument("--docker-option", action="append", default=[], metavar="ARG",
                     help=option_help % "run")
    run.add_argument("train_args", nargs=argparse.REMAINDER, metavar="-- train ARGS",
                     help="the mnistbench train command of the cell")
    run.set_defaults(func=run_command)


def check_command(args) -> int:
    from mnistbench.launch import container

    try:
        print(container.check_engine())
    except container.ContainerError as exc:
        raise CliError(str(exc)) from None
    return 0


def build_command(args) -> int:
    from mnistbench.launch import container

    try:
        record = container.build_image(args.dockerfile, args.tag, dict(args.build_arg),
                                       args.docker_option, args.context, args.record)
    except container.ContainerError as exc:
        raise CliError(str(exc)) from None
    print(record["image_id"])
    return 0


def run_command(args) -> int:
    from mnistbench.launch import container

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
