"""Command-line option types, and the options of `mnistbench train` (flags, allowed values,
defaults), torch-free: the CLI declares `train` with them, the docker runner reads a cell's
--data, --out and --device with the same parser, and the study model's cell flags are tested
against it.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from mnistbench.core.cpuruntime import ALLOCATORS, allocator_option
from mnistbench.core.devices import (
    DEVICES,
    GRAPH_IMPLEMENTATION,
    IMPLEMENTATIONS,
    LOADERS,
    PRECISIONS,
    Loader,
)
from mnistbench.core.study import TIP_NAMES

#: torch.compile modes a cell may ask for (params.compile; empty: eager).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
#: The largest batch size ``--max-batch`` tries, in samples, on an accelerator and on a CPU (a
#: CPU has no device memory to fill: beyond this each step only takes longer, and the tips
#: experiment's stock bf16 cells on a CPU without native bf16 would outgrow the default
#: study's hour).
MAX_BATCH_CAP = 16384
CPU_MAX_BATCH_CAP = 1024
#: The samples of MNIST's training and test splits: ``--train-limit`` and ``--test-limit`` go
#: up to them, and ``--batch-size`` up to the training samples a cell uses.
MNIST_TRAIN_SAMPLES = 60_000
MNIST_TEST_SAMPLES = 10_000
#: Every enumerated setting of a cell and the values it may take, from their one home in
#: core (devices, precisions and loaders: mnistbench.core.devices; allocators:
#: mnistbench.core.cpuruntime; tips: mnistbench.core.study): what results are checked against
#: (mnistbench.results.validate), so a cell recorded with a ``tpu`` device is refused.
SETTING_CHOICES: dict[str, tuple[str, ...]] = {
    "device": DEVICES, "precision": PRECISIONS, "loader": LOADERS,
    "implementation": IMPLEMENTATIONS, "compile": COMPILE_MODES, "tip": TIP_NAMES,
    "allocator": ALLOCATORS,
}
#: The widest network a cell may train (``--width``; the config's ``$defs.width`` maximum,
#: workflow/schemas/config.schema.yaml): x16 is 256x the FLOPs of x1 already.
MAX_WIDTH = 16
#: The most intra-op threads and DataLoader workers a cell may ask for, and its longest time
#: limit in s (the config's maxima of threads, workers and time_limit; a test holds each to
#: the schema's number): torch.set_num_threads(100000) crashed the process (SIGSEGV), 100000
#: workers hung it, and a limit of 1e308 s overflowed the clock.
MAX_THREADS = 1024
MAX_WORKERS = 64
MAX_TIME_LIMIT_S = 604_800
#: The most timed epochs, warm-up steps and steps per epoch a cell may take (the config's
#: $defs maxima: 99999999999999999999 warm-up steps was an OverflowError traceback).
MAX_EPOCHS = 1000
MAX_WARMUP_STEPS = 10_000
MAX_STEPS = 1_000_000
#: The resource sampler's period, in s: from 10 ms (a shorter one busy-loops beside the timed
#: work) to an hour (1e308 overflowed the clock). Not a config key.
SAMPLE_INTERVAL_S = (0.01, 3600.0)
#: Flags that only a ``dataloader`` cell uses; a ``resident`` cell records them as null (not
#: applicable), whatever was passed (the workflow passes the study-wide values to every cell).
DATALOADER_ONLY = ("workers", "pin_memory")

#: The `train` subcommand's help line and description.
TRAIN_HELP = "train and time one cell of the study"
TRAIN_DESCRIPTION = (
    "Train the study's CNN for one cell (device x precision x batch size x loader), time every "
    "phase of every epoch, and write summary.json, epochs.csv and resources.csv into --out. A "
    "cell that cannot run still writes its summary with status unavailable, oom or failed, and "
    "exits 10, 11 or 12.")


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every ``mnistbench`` parser's help formatter: each option's help ends with its
    default, ``(default: X)``, unless the help already says it (``%(default)s``, or
    ``default:`` in words) or there is none to show (None, False, an empty string or list: a
    flag that is off, an option that is unset)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("%(default)" in text or "default:" in text or default is argparse.SUPPRESS
                or default is None or (default is False and not isinstance(
                    action, argparse.BooleanOptionalAction)) or default in ("", [], ())):
            return text
        if not action.option_strings and action.nargs not in (argparse.OPTIONAL,
                                                              argparse.ZERO_OR_MORE):
            return text
        if isinstance(action, argparse.BooleanOptionalAction):
            # The flag in effect, not True or False.
            on, off = action.option_strings[0], action.option_strings[-1]
            return f"{text} (default: {on if default else off})"
        return f"{text} (default: %(default)s)"


def use_defaults_help(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Give ``parser`` and every subcommand parser under it :class:`DefaultsHelpFormatter`;
    return ``parser``."""
    parser.formatter_class = DefaultsHelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                use_defaults_help(sub)
    return parser


def positive_int(text: str) -> int:
    """An int of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An int of 0 or more."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def width_of(text: str) -> int:
    """A channel width multiplier, 1 to :data:`MAX_WIDTH` (argparse type)."""
    value = positive_int(text)
    if value > MAX_WIDTH:
        raise argparse.ArgumentTypeError(
            f"{value} is wider than {MAX_WIDTH}, the widest network the study trains (config "
            f"key experiments.scale.widths caps it too): pass 1 to {MAX_WIDTH}")
    return value


def capped_int(high: int, key: str, low: int = 0):
    """An argparse type: an int from ``low`` (0 or 1) to ``high``, the config ``key``'s
    maximum."""
    def parse(text: str) -> int:
        value = positive_int(text) if low else non_negative_int(text)
        if value > high:
            raise argparse.ArgumentTypeError(
                f"{value} is more than {high}, the most a cell of the study takes (config key "
                f"{key} caps it too): pass {low} to {high}")
        return value
    parse.__name__ = "count"
    return parse


#: ``--threads`` of train, peak and run-peak: 0 (torch's default) to :data:`MAX_THREADS`.
threads_of = capped_int(MAX_THREADS, "threads")


def float_between(low: float, high: float, what: str):
    """An argparse type: a finite float from ``low`` to ``high`` (``what``: its unit and why,
    for the message)."""
    def parse(text: str) -> float:
        value = float(text)
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(
                f"must be a finite number from {low:g} to {high:g} {what}, got {value:g}")
        return value
    parse.__name__ = "number"
    return parse


def limit_of(total: int, what: str):
    """An argparse type: an int from 0 to ``total`` (the samples of a split, ``what``)."""
    def parse(text: str) -> int:
        value = non_negative_int(text)
        if value > total:
            raise argparse.ArgumentTypeError(
                f"must be {total} or less (MNIST has {total} {what} samples; 0: all), got "
                f"{value}")
        return value
    parse.__name__ = "samples"
    return parse


def batch_problem(batch_size: int, train_limit: int, max_batch: bool = False) -> str | None:
    """Why ``--batch-size`` cannot be what a cell records (None when it can): larger than the
    training samples the cell uses, every step would hold fewer samples than recorded."""
    samples = train_limit or MNIST_TRAIN_SAMPLES
    if batch_size <= samples:
        return None
    where = (f"--train-limit {train_limit}" if train_limit
             else f"all {MNIST_TRAIN_SAMPLES} of MNIST")
    fix = f"pass --batch-size {samples} or less"
    if train_limit and batch_size <= MNIST_TRAIN_SAMPLES:
        fix += f", or a --train-limit of {batch_size} or more"
    start = " (the start of --max-batch's search)" if max_batch else ""
    return (f"--batch-size {batch_size}{start} is larger than the {samples} training samples "
            f"the cell uses ({where}): each step would hold {samples} samples while the cell "
            f"recorded {batch_size}; {fix}")


def path_of(text: str) -> Path:
    """A path given on the command line; an empty one (``--out ""``, an unset shell
    variable) is refused rather than read as the current folder, which wrote into it or
    aggregated it without a word."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"is empty ({text!r}): give a path (. for the "
                                         "current folder); an unset shell variable, perhaps")
    return Path(text)


def folder_name_of(text: str) -> str:
    """A name that files a cell (``--env``, ``--experiment``, ``--cell``): a plain folder
    name under results/runs, used as given or refused, never renamed (``../x`` was recorded
    as it was, and the cell refused only at the aggregate)."""
    from mnistbench.core.study import MAX_NAME_LEN, safe_name

    name = safe_name(text, default="")
    if not text or name != text:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a plain folder name under results/runs (A-Z a-z 0-9 . _ -, at "
            f"most {MAX_NAME_LEN} characters, not starting or ending with . _ -): "
            + (f"pass {name!r}" if name else "pass a name such as 'lab-gpu'"))
    return text


def tip_of(text: str) -> str:
    """A lever of the tips experiment (:data:`mnistbench.core.study.TIP_NAMES`), or empty for
    none; anything else would record a tip no result may hold."""
    if text and text not in TIP_NAMES:
        raise argparse.ArgumentTypeError(f"{text!r} is not a tip of the study; pass one of "
                                         f"{', '.join(TIP_NAMES)}, or leave --tip out")
    return text


def positive_float(text: str) -> float:
    """A finite float greater than 0 (NaN and inf are refused)."""
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number greater than 0, got {value}")
    return value


def non_negative_float(text: str) -> float:
    """A finite float of 0 or more (NaN and inf are refused)."""
    value = float(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number, 0 or more, got {value}")
    return value


def add_train_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Declare every option of `mnistbench train` on ``p`` and return it."""
    p.add_argument("--data", type=path_of, default=Path("resources/mnist"),
                   help="folder with the four verified MNIST IDX files (default: %(default)s)")
    p.add_argument("--out", type=path_of, required=True, help="output folder of the cell")
    p.add_argument("--device", choices=DEVICES, default="cpu",
                   help="cpu; cuda (NVIDIA CUDA, or AMD ROCm/HIP with torch's ROCm build); xpu "
                   "(Intel GPU); mps (Apple silicon)")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="fp32; tf32 (cuda); bf16 autocast (every device); fp16 autocast with "
                   "GradScaler (cuda, xpu, mps); a precision the device's capability query "
                   "refuses makes the cell unavailable")
    p.add_argument("--batch-size", type=positive_int, default=128,
                   help="samples per step: at most the training samples the cell uses "
                   f"(--train-limit, or all {MNIST_TRAIN_SAMPLES})")
    p.add_argument("--loader", choices=LOADERS, default=Loader.RESIDENT,
                   help="dataloader: Dataset + transform + torch DataLoader (the blog's "
                   "pipeline); resident: the normalised dataset as one tensor on the device")
    p.add_argument("--epochs", type=capped_int(MAX_EPOCHS, "epochs", low=1), default=1,
                   help="timed epochs")
    p.add_argument("--lr", type=positive_float, default=1e-3, help="Adam learning rate")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="seed of the initialisation, the shuffling and the dropout")
    p.add_argument("--threads", type=threads_of, default=0,
                   help="torch intra-op CPU threads (0: torch's default)")
    allocator_option(p)
    p.add_argument("--workers", type=capped_int(MAX_WORKERS, "workers"), default=0,
                   help="DataLoader worker processes (dataloader loader only; a resident "
                   "cell records none: not applicable)")
    p.add_argument("--pin-memory", action=argparse.BooleanOptionalAction, default=False,
                   help="DataLoader pin_memory (dataloader loader only; a resident cell "
                   "records none: not applicable)")
    p.add_argument("--compile", nargs="?", const="default", default="",
                   choices=COMPILE_MODES,
                   help="wrap the model in torch.compile with this mode (bare --compile: "
                   "default; reduce-overhead uses CUDA graphs on CUDA; default: none, eager)")
    p.add_argument("--implementation", choices=IMPLEMENTATIONS, default="tuned",
                   help="tuned: this project's formulation (Net: pool before ReLU, "
                   "bit dropout, channels_last, fused Adam); stock: the blog's code as written "
                   "(ReferenceNet, nn.Dropout, torch.optim.Adam, the default memory format); "
                   f"{GRAPH_IMPLEMENTATION}: tuned, its whole step (batch gather, forward, "
                   "backward, fused Adam) one CUDA graph replayed per step (resident loader; "
                   "off CUDA the same step runs eagerly; not fp16); all compute the same "
                   "function")
    p.add_argument("--width", type=width_of, default=1,
                   help="channel width multiplier of the network's convolutions (1: the "
                   "blog's network; the scale experiment widens it; mnistbench.core.network)")
    p.add_argument("--cudnn-benchmark", action=argparse.BooleanOptionalAction, default=True,
                   help="torch.backends.cudnn.benchmark on CUDA (autotuned during warm-up); "
                   "recorded, no effect elsewhere")
    p.add_argument("--max-batch", action="store_true",
                   help="find the largest batch size that fits (doubling from --batch-size "
                   f"until out of memory or {MAX_BATCH_CAP} samples; on a CPU, which has no "
                   f"device memory to fill, until half the available memory or "
                   f"{CPU_MAX_BATCH_CAP} samples) "
                   "and train at it, timing the same number of samples (--max-steps x "
                   "--batch-size) in fewer steps")
    p.add_argument("--warmup-steps", type=capped_int(MAX_WARMUP_STEPS, "warmup_steps"),
                   default=3,
                   help="untimed warm-up steps; the trajectory is restored afterwards")
    p.add_argument("--max-steps", type=capped_int(MAX_STEPS, "max_steps"), default=0,
                   help="cap on training steps per epoch (0: a full epoch)")
    p.add_argument("--train-limit", type=limit_of(MNIST_TRAIN_SAMPLES, "training"), default=0,
                   help=f"use only the first N training samples (0: all {MNIST_TRAIN_SAMPLES})")
    p.add_argument("--test-limit", type=limit_of(MNIST_TEST_SAMPLES, "test"), default=0,
                   help=f"use only the first N test samples (0: all {MNIST_TEST_SAMPLES})")
    p.add_argument("--eval-batch-size", type=non_negative_int, default=0,
                   help="batch size of the test-set evaluation (0: the training batch size, "
                   "the same shapes as training, which warm-up and autotuning already cover; "
                   f"{GRAPH_IMPLEMENTATION}: the whole test split in one batch); "
                   "recorded as at most the test samples the cell uses")
    p.add_argument("--sample-interval", type=float_between(*SAMPLE_INTERVAL_S, "s"),
                   default=0.5,
                   help="resource sampler period in seconds")
    p.add_argument("--time-limit", type=float_between(0, MAX_TIME_LIMIT_S, "s (0: none; a "
                   "week at most, the config's time_limit)"), default=0.0, metavar="SECONDS",
                   help="wall-clock limit of the warm-up and timed epochs; a cell that reaches "
                   "it is recorded as failed and exits 12 (0: no limit)")
    p.add_argument("--env", type=folder_name_of, default=None,
                   help="environment name recorded in the summary (default: $MNISTBENCH_ENV "
                   "or the host name)")
    p.add_argument("--experiment", type=folder_name_of, default="adhoc",
                   help="experiment name recorded")
    p.add_argument("--cell", type=folder_name_of, default=None,
                   help="cell id recorded (default: --out's name)")
    p.add_argument("--repeat", type=non_negative_int, default=0, help="repeat index recorded")
    p.add_argument("--tip", type=tip_of, default="",
                   help="the tips experiment's lever this cell measures (recorded; "
                   "mnistbench.core.study.TIPS; default: none)")
    p.add_argument("--quiet", action="store_true",
                   help="print nothing but errors: no progress bar, no result line, no "
                   "summary path (what the workflow passes)")
    p.add_argument("--json", action="store_true",
                   help="print the summary's headline figures (status, exit code, the cell's "
                   "settings, s/epoch, samples/s, accuracy, busy, disturbed epochs, the "
                   "summary's path) as one JSON object on stdout instead of the path; "
                   "printed with --quiet too")
    return p


def train_parser() -> argparse.ArgumentParser:
    """A stand-alone parser of `mnistbench train`'s options (exits 2 on a usage error)."""
    return add_train_arguments(argparse.ArgumentParser(
        prog="mnistbench train", description=TRAIN_DESCRIPTION,
        formatter_class=DefaultsHelpFormatter))
