"""``mnistbench fetch``: the four MNIST files from mirrors, verified
(:func:`mnistbench.data.mnist.fetch`)."""

from __future__ import annotations

import os
from pathlib import Path

from mnistbench.cli.common import CliError, to_stderr
from mnistbench.core.envvars import MIRROR_VAR
from mnistbench.core.options import non_negative_int, path_of, positive_float


def register(sub) -> None:
    p = sub.add_parser(
        "fetch",
        help="download and verify the four MNIST files",
        description="Fetch the four MNIST IDX files into DEST, trying mirrors in order, and "
        "verify their decompressed contents against the official MD5 digests. Files already "
        "present and verified are kept. Mirrors given with --mirror, then those in "
        f"${MIRROR_VAR} (separated by whitespace or commas), come before the defaults.",
    )
    p.add_argument("--dest", type=path_of, default=Path("resources/mnist"),
                   help="destination folder (default: %(default)s)")
    p.add_argument("--mirror", action="append", default=[], metavar="DIR_OR_URL",
                   help="a mirror tried before the defaults: a directory, file:// or "
                   "http(s):// URL holding the files, gzipped or not (repeatable)")
    p.add_argument("--no-default-mirrors", action="store_true",
                   help="try only the mirrors given with --mirror / $" + MIRROR_VAR)
    p.add_argument("--retries", type=non_negative_int, default=2,
                   help="retries per mirror and file after the first try (default: %(default)s)")
    p.add_argument("--timeout", type=positive_float, default=30.0,
                   help="network timeout in seconds (default: %(default)s)")
    p.add_argument("--file", action="append", dest="files", metavar="NAME",
                   help="fetch only this file, e.g. train-images-idx3-ubyte (repeatable; "
                   "default: all four); the workflow fetches one file per job")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    p.set_defaults(func=command, cleans_up=True)


def command(args) -> int:
    from mnistbench.data import files
    from mnistbench.data import mnist as data

    mirrors = list(args.mirror)
    env_value = os.environ.get(MIRROR_VAR, "")
    mirrors += [m for m in env_value.replace(",", " ").split() if m]
    if not args.no_default_mirrors:
        mirrors += list(files.DEFAULT_MIRRORS)
    if not mirrors:
        raise CliError("no mirror to fetch from: give --mirror DIR_OR_URL or drop "
                       "--no-default-mirrors.")
    try:
        paths = data.fetch(args.dest, mirrors, retries=args.retries, timeout=args.timeout,
                           log=None if args.quiet else to_stderr, names=args.files)
    except (data.DataError, ValueError) as exc:
        raise CliError(str(exc)) from None
    if not args.quiet:
        for path in paths:
            print(path)
    return 0
