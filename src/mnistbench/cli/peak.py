"""``mnistbench peak``: the device's measured FLOP/s limit written as JSON
(:func:`mnistbench.steps.write_peak`), or the record of a limit not measured (unavailable,
failed) with that status's exit code."""

from __future__ import annotations

import sys

from mnistbench.cli.common import CliError, import_measure
from mnistbench.core.options import path_of, threads_of


def register(sub) -> None:
    from mnistbench.core.devices import DEVICES, PRECISIONS

    p = sub.add_parser(
        "peak", help="measure the device's FLOP/s limit and write it as JSON",
        description="Time a dense matmul and the study's second convolution on DEVICE at "
        "each PRECISION, with the cell's threads, and write the measured GFLOP/s (with the "
        "shapes, calls and seconds) to --out atomically (mnistbench.measure.peak). As with "
        "`train`, a device that does not exist here writes a record of status unavailable "
        "and exits 10, a measurement that fails one of status failed and exits 12 "
        "(mnistbench.steps; the fields: docs/columns.md).")
    p.add_argument("--device", choices=DEVICES, default="cpu", help="the device to measure")
    p.add_argument("--precision", action="append", choices=PRECISIONS, default=None,
                   dest="precisions", metavar="PRECISION",
                   help=f"a precision to measure ({', '.join(PRECISIONS)}; repeatable; "
                   "default: fp32)")
    p.add_argument("--threads", type=threads_of, default=0,
                   help="torch intra-op CPU threads (0: torch's default)")
    p.add_argument("--out", type=path_of, required=True, help="the JSON file to write")
    p.add_argument("--record-failure", metavar="REASON", default=None,
                   help="measure nothing: write a record of status failed with REASON (the "
                   "workflow's peak rule does when the measuring process itself failed, so "
                   "the study goes on); needs no torch")
    p.set_defaults(func=command, parser=p, cleans_up=True)


def command(args) -> int:
    from mnistbench import steps
    from mnistbench.core import devices

    if args.record_failure is not None:
        try:
            print(steps.write_peak_status(args.out, args.device, "failed",
                                          args.record_failure))
        except steps.StepError as exc:
            raise CliError(str(exc)) from None
        return 0
    precisions = tuple(dict.fromkeys(args.precisions or ["fp32"]))
    for precision in precisions:
        if not devices.is_supported(args.device, precision):
            args.parser.error(f"precision {precision!r} is not supported on {args.device}; "
                              f"allowed on {args.device}: "
                              f"{', '.join(devices.SUPPORTED[args.device])}")
    # A fork server this workflow run started may still be importing torch on one core: the
    # measurement waits for that to end (its socket appears), as a train client does.
    from mnistbench.launch import forkserver

    forkserver.wait_while_starting()
    import_measure("peak")
    from mnistbench.measure import backends

    try:
        print(steps.write_peak(args.out, args.device, precisions, args.threads))
    except backends.DeviceUnavailable as exc:
        print(f"mnistbench peak: {args.device} unavailable: {exc}", file=sys.stderr)
        return _peak_status(steps, args, "unavailable", str(exc))
    except steps.StepError as exc:
        raise CliError(str(exc)) from None
    except Exception as exc:  # a failed measurement is a result, as a failed cell is
        import traceback

        traceback.print_exc()
        return _peak_status(steps, args, "failed", f"{type(exc).__name__}: {exc}")
    return 0


def _peak_status(steps, args, status: str, reason: str) -> int:
    """Record that ``args.device``'s limit was not measured; the status's exit code."""
    from mnistbench.core import schema

    try:
        print(steps.write_peak_status(args.out, args.device, status, reason))
    except steps.StepError as exc:
        raise CliError(str(exc)) from None
    return schema.EXIT_CODES[status]
