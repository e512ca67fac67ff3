"""What the report's sections select from the aggregated tables, each in one place: the
columns and keys that group cells, the ok cells of each experiment, the busy repeats and
their discount, the environments (with their hardware, the reference one, why a device is
absent) and the few measures several sections share (the GPU's speed-up, the phases of an
epoch, the seed-to-seed spread, the share of waiting in a run's cost).

:class:`Inputs` holds the tables and the cost model with what is computed from them once
(the cells at the blog's settings, the cost of a run); every section reads it.

Columns read beyond :mod:`mnistbench.core.schema` when present: ``tip`` (the tips
experiment's lever, text), ``busy`` (true when other processes used more than 25 % of the
machine while the cell ran) and ``system_load_mean`` (machine-wide CPU busy %, 100 = all
cores). Summaries without them (older ones) render as before, with no cell flagged.
Likewise the device limits of :data:`LIMIT_COLUMNS` (from a ``mnistbench peak`` run in the
cell's environment) and the cells of the :data:`SCALE_EXPERIMENT`: without them the report
says "not measured".
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from mnistbench.core import schema, study
from mnistbench.report import blog
from mnistbench.report.formatting import missing, num, plain, plural
from mnistbench.results import aggregate, cost, stats

#: Experiment whose cells measure the blog's tips, and its lever column.
TIPS_EXPERIMENT = "tips"
TIP_COLUMN = "tip"
#: Optional per-cell system-load columns (absent in older summaries).
BUSY_COLUMN = "busy"
LOAD_COLUMN = "system_load_mean"
#: The share of the machine (%) others must use beyond a cell's own processes for the trainer
#: to mark it busy: the report only reads the flag, this is for its prose.
BUSY_SHARE_PCT = 25
#: The experiment of the blog's network at several channel widths (``width``: 1, 2, 4, 8;
#: data held in memory, batch 128, tuned code): model size against throughput.
SCALE_EXPERIMENT = "scale"
#: The measured limit of a cell's device and precision in its environment (``mnistbench
#: peak``): ``limit_gflops`` (GFLOP/s), ``limit_kernel`` (text: the kernel and its shape),
#: ``limit_share_pct`` (%: achieved_gflops / limit_gflops x 100) and ``limit_source`` (text:
#: where the figure came from, "measured: ..."). Absent or empty in older summaries.
LIMIT_COLUMNS = ("limit_gflops", "limit_kernel", "limit_share_pct", "limit_source")
#: The two devices the study compares (mnistbench.core.devices.DEVICES names all it drives):
#: the headline always shows them, with their reason when absent.
COMPARED_DEVICES = ("cpu", "cuda")
DEVICE_NAMES = {"cpu": "CPU", "cuda": "GPU"}

# ---------------------------------------------------------------------------- grouping keys

#: The settings that tell a cell from another but for its repeat (and its tip and width, where
#: the summary has them: :func:`with_tip`).
SETTINGS = ("env", "experiment", "device", "precision", "loader", "batch_size")
#: What makes two cells of different environments the same measurement: a cell but its env.
SAME_CELL = tuple(c for c in SETTINGS if c != "env")
#: The column :class:`Inputs` adds to the summary: which code a cell ran
#: (:func:`mnistbench.core.study.code_kind`: "blog", "best" or "").
CODE = "code"
#: One row of the per-run tables (headline, time, convergence, resources): a cell but for its
#: repeat, with the kind of code it ran (a speed-up compares cells of one kind only).
RUN = ("env", "device", "loader", CODE)
#: What each loader is called in the report's words.
LOADER_NAMES = {"dataloader": "DataLoader", "resident": "data held in memory"}


#: Settings that only some experiments vary, absent in older summaries: the scale
#: experiment's network width and the tips experiment's lever (:func:`with_tip`).
OPTIONAL_SETTINGS = ("width", TIP_COLUMN)


def with_tip(frame, keys) -> list[str]:
    """``keys`` and the settings of :data:`OPTIONAL_SETTINGS` that ``frame`` has: the tips
    experiment's lever and the scale experiment's width (cells of different widths are
    different measurements, not repeats)."""
    return [*keys, *(c for c in OPTIONAL_SETTINGS if c in frame.columns)]


def device_name(device: str) -> str:
    """CPU, GPU, or the device as it is named."""
    return DEVICE_NAMES.get(device, device)


def loader_name(loader) -> str:
    """"DataLoader", "data held in memory", or the loader as it is named."""
    return LOADER_NAMES.get(str(loader), str(loader))


def loader_phrase(loader) -> str:
    """A loader as a sentence names it: "the DataLoader", "data held in memory"."""
    return "the DataLoader" if str(loader) == "dataloader" else loader_name(loader)


# ---------------------------------------------------------------------------- kinds of code

def _param(value, default):
    return default if missing(value) or value == "" else value


def code_of(cell) -> str:
    """The kind of code a cell (a summary row as a mapping) ran, from what it recorded:
    "blog", "best" or "" (:func:`mnistbench.core.study.code_kind`)."""
    workers = _param(cell.get("workers"), 0)
    if isinstance(workers, str) and workers.replace(".", "", 1).isdigit():
        workers = float(workers)
    return study.code_kind(cell.get("loader"), _param(cell.get("implementation"), ""),
                           _param(cell.get("allocator_loaded"), ""), workers)


def with_code(summary):
    """``summary`` with the column :data:`CODE` (the kind of code of every cell)."""
    if summary.empty:
        return summary.assign(**{CODE: []}) if CODE not in summary else summary
    return summary.assign(**{CODE: [code_of(r) for r in summary.to_dict("records")]})


def code_label(cells) -> str:
    """What code ``cells`` (rows of one kind) ran, in words: the blog's code as written, this
    project's best code, or, for other settings, what they are (e.g. "other settings: this
    project's tuned code with the DataLoader and the tcmalloc allocator")."""
    kinds = sorted(set(cells[CODE])) if CODE in cells and len(cells) else [""]
    if kinds != [""] and len(kinds) == 1:
        return study.CODE_LABELS[kinds[0]]
    if len(kinds) > 1:
        return "mixed kinds of code"
    implementation = distinct(cells, "implementation")
    loaders = distinct(cells, "loader")
    allocators = [a for a in distinct(cells, "allocator_loaded") if a != "glibc"]
    workers = [w for w in distinct(cells, "workers") if w not in ("0", "")]
    code = {"tuned": "this project's tuned code", "stock": "the blog's model code"}.get(
        "/".join(implementation), f"{'/'.join(implementation) or 'unrecorded'} code")
    text = f"{study.CODE_LABELS['']}: {code} with " + (
        " or ".join("the DataLoader" if x == "dataloader" else loader_name(x)
                    for x in loaders) or "an unrecorded loader")
    extras = []
    if allocators:
        extras.append(f"the {'/'.join(allocators)} allocator")
    if workers:
        extras.append(f"{'/'.join(workers)} workers")
    return text + (f" and {' and '.join(extras)}" if extras else "")


def code_phrase(cells) -> str:
    """:func:`code_label` with the loader where the label does not say it: "this project's
    best code with data held in memory", "the blog's code as written with the DataLoader"."""
    label = code_label(cells)
    loaders = distinct(cells, "loader")
    if len(loaders) != 1 or "DataLoader" in label or "memory" in label:
        return label
    return f"{label} with {loader_phrase(loaders[0])}"


#: The kinds of code as a table cell names them.
CODE_SHORT = {"blog": "the blog's code", "best": "this project's best"}


def code_short(cells) -> str:
    """:func:`code_label` in a few words, for a table cell: "the blog's code", "this
    project's best", or "other: tuned code, DataLoader, tcmalloc"."""
    kinds = sorted(set(cells[CODE])) if CODE in cells and len(cells) else [""]
    if len(kinds) == 1 and kinds[0] in CODE_SHORT:
        return CODE_SHORT[kinds[0]]
    implementation = "/".join(distinct(cells, "implementation")) or "unrecorded"
    loaders = "/".join(loader_name(x) for x in distinct(cells, "loader"))
    extras = [a for a in distinct(cells, "allocator_loaded") if a != "glibc"]
    extras += [f"{w} workers" for w in distinct(cells, "workers") if w not in ("0", "")]
    return ", ".join([f"other: {implementation} code", loaders, *extras])


#: What each kind of code is, for the tables' legend.
CODE_LEGEND = ("Code: \"the blog's code\" is the blog's recipe as far as it can run (the "
               "DataLoader with a per-sample transform, Adam and its settings as printed, no "
               "workers, the C library's allocator, and the network its layer sizes describe: "
               "its printed model cannot run); \"this project's best\" is data held in "
               "memory with this project's tuned formulation of the same function; "
               "\"other\" names what else a cell ran.")


# ---------------------------------------------------------------------------- columns

def col(frame, name) -> list[float]:
    """The present values of column ``name`` of ``frame`` as floats (none when absent)."""
    if frame is None or name not in frame.columns:
        return []
    return [float(v) for v in frame[name].tolist() if not missing(v)]


def per_epoch(frame, column) -> list[float]:
    """Each cell's ``column`` (a total over its epochs) divided by its epochs."""
    out: list[float] = []
    if frame is None or frame.empty:
        return out
    for value, epochs in zip(frame[column].tolist(), frame["epochs"].tolist(), strict=True):
        if not missing(value) and not missing(epochs) and epochs > 0:
            out.append(float(value) / float(epochs))
    return out


def numeric_column(frame, name):
    """Column ``name`` of ``frame`` as floats (NaN where empty or absent), on ``frame``'s
    index."""
    import pandas as pd

    if name not in frame.columns:
        return pd.Series(float("nan"), index=frame.index, dtype=float)
    return pd.to_numeric(frame[name], errors="coerce").astype(float)


def limit_share(frame):
    """Each row's share of its device's measured limit (%): ``limit_share_pct``, else
    ``achieved_gflops / limit_gflops x 100`` where both are present; NaN where no limit was
    measured (a Series on ``frame``'s index)."""
    share = numeric_column(frame, "limit_share_pct")
    limit = numeric_column(frame, "limit_gflops")
    computed = numeric_column(frame, "achieved_gflops") / limit.where(limit > 0) * 100.0
    return share.where(share.notna(), computed)


def median(values) -> float | None:
    """The median of ``values``; None without any."""
    s = stats.spread(values)
    return None if s is None else s[0]


def value_range(values) -> float | None:
    """max - min of ``values`` (the spread over repeats), None below 2 values."""
    s = stats.spread(values)
    return None if s is None or s[3] < 2 else s[2] - s[1]


def distinct(frame, column) -> list[str]:
    """The distinct non-empty values of ``column`` in ``frame`` as text (none when absent)."""
    if column not in frame.columns:
        return []
    return sorted({plain(v) for v in frame[column].tolist() if not missing(v) and str(v)})


# ---------------------------------------------------------------------------- ok cells

def ok(summary, experiment: str | None = None):
    """The ok cells of ``summary`` (of one experiment when given)."""
    keep = summary["status"] == "ok"
    if experiment is not None:
        keep &= summary["experiment"] == experiment
    return summary[keep]


def sweep_medians(summary):
    """Median samples/s over repeats of every ok sweep cell with a throughput, one row per
    (env, device, precision, loader, batch size)."""
    cells = ok(summary, "sweep").dropna(subset=["samples_per_s"])
    if cells.empty:
        return cells
    return cells.groupby(["env", "device", "precision", "loader", "batch_size"])[
        "samples_per_s"].median().reset_index()


def tips_cells(summary):
    """The cells of the tips experiment that name their tip (always with a ``tip`` column)."""
    if TIP_COLUMN not in summary.columns:
        return summary.iloc[0:0].assign(**{TIP_COLUMN: None})
    return summary[(summary["experiment"] == TIPS_EXPERIMENT)
                   & summary[TIP_COLUMN].map(lambda v: isinstance(v, str) and bool(v))]


# ---------------------------------------------------------------------------- busy cells

def _is_busy(value) -> bool:
    """Whether a ``busy`` value says the machine was busy (bool, "True"/"False" text, 1/0)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    if missing(value):
        return False
    try:
        return bool(float(value))
    except (TypeError, ValueError):
        return False


def busy_mask(frame):
    """A boolean Series: which rows of ``frame`` ran on a busy machine (all False when the
    summary has no ``busy`` column)."""
    import pandas as pd

    if BUSY_COLUMN not in frame.columns:
        return pd.Series(False, index=frame.index, dtype=bool)
    return frame[BUSY_COLUMN].map(_is_busy).astype(bool)


def discount_busy(summary):
    """(summary without the busy ok cells whose group (env, experiment, device, precision,
    loader, batch size and tip: the repeats of one cell) has a quiet ok cell too, how many
    were left out): what the findings use. A group whose every ok cell was busy keeps them
    (and is flagged)."""
    busy = busy_mask(summary)
    if not busy.any():
        return summary, 0
    is_ok = summary["status"] == "ok"
    quiet = (is_ok & ~busy).groupby([summary[c] for c in with_tip(summary, SETTINGS)],
                                    dropna=False).transform("any")
    drop = busy & is_ok & quiet
    return summary[~drop], int(drop.sum())


def busy_note(group) -> str:
    """"2 of 3 busy (machine 81–95 % busy)" for the busy rows of ``group``; "" when none."""
    busy = busy_mask(group)
    n = int(busy.sum())
    if n == 0:
        return ""
    load = col(group[busy], LOAD_COLUMN)
    span = ""
    if load:
        low, high = min(load), max(load)
        span = (f" (machine {num(low, 2)} % busy)" if round(low) == round(high)
                else f" (machine {num(low, 2)}–{num(high, 2)} % busy)")
    return f"{n} of {len(group)} busy{span}"


# ---------------------------------------------------------------------------- environments

def devices(summary) -> list[str]:
    """cpu and cuda always, then any other device of the study."""
    return [*COMPARED_DEVICES, *sorted(set(summary["device"]) - set(COMPARED_DEVICES))]


def envs_with_gpu(cells) -> list[str]:
    """The environments with a cuda cell among ``cells``, by name."""
    return sorted(set(cells.loc[cells["device"] == "cuda", "env"]))


def scheduled(summary, env) -> bool:
    """Whether ``env``'s cells ran in a container or as SLURM jobs (not the local runner)."""
    part = summary[summary["env"] == env]
    return any(str(v) for column in ("container", "slurm_partition") if column in part.columns
               for v in part[column].fillna(""))


def primary_env(summary) -> str:
    """The environment the findings describe when none has a GPU: the one with the most ok
    cells (the full study, not a container's part of it), then the local runner's, then the
    first by name."""
    done = ok(summary)
    return min(summary["env"].unique(), key=lambda env: (
        -int((done["env"] == env).sum()), scheduled(summary, env), env))


def reference_env(envs, part) -> str:
    """The environment the others of one hardware are compared with: the local runner's
    (cells neither in a container nor SLURM jobs), else the one with most cells, else the
    first by name."""
    return min(envs, key=lambda env: (scheduled(part, env), -int((part["env"] == env).sum()),
                                      env))


def hardware(summary, env: str, device: str) -> str:
    """The hardware of ``device`` in ``env``: the aggregate's ``hardware`` label of its cells
    where there is one (e.g. "AMD EPYC 7B13 · AVX2"), else the CPU model or GPU name."""
    cells = summary[summary["env"] == env]
    names = distinct(cells[cells["device"] == device], "hardware")
    if not names:
        names = distinct(cells, "cpu_model" if device == "cpu" else "gpu_name")
    return ", ".join(names) if names else "–"


def hardware_line(summary, env: str) -> str:
    """One line of an environment's hardware: CPU model with cores and threads, GPU and
    driver (or "no GPU")."""
    cells = summary[summary["env"] == env]
    cpu = ", ".join(distinct(cells, "cpu_model")) or "CPU model not recorded"
    cores = distinct(cells, "cpu_cores_physical")
    threads = distinct(cells, "cpu_cores_logical")
    detail = []
    if cores:
        detail.append(plural("/".join(cores), "core"))
    if threads:
        detail.append(plural("/".join(threads), "thread"))
    line = f"CPU {cpu}" + (f" ({', '.join(detail)})" if detail else "")
    gpus = distinct(cells, "gpu_name")
    if gpus:
        drivers = distinct(cells, "gpu_driver")
        line += f"; GPU {', '.join(gpus)}" + (f", driver {', '.join(drivers)}" if drivers
                                             else "")
    else:
        line += "; no GPU"
    return line


def absent_reason(summary, env: str, device: str) -> str:
    """Why ``env`` has no ok ``device`` cell at the blog's settings: the commonest status and
    reason of its cells, or that the study has none."""
    cells = summary[(summary["env"] == env) & (summary["device"] == device)]
    if cells.empty:
        if device == "cuda":
            return ("not in this study: no cuda cells (no GPU was found when the study was "
                    "planned, or the config's devices leave it out)")
        return f"not in this study: no {device} cells"
    bad = cells[cells["status"] != "ok"]
    if bad.empty:
        return "no ok cell at the blog's settings (batch 128, fp32)"
    (status, reason), n = next(iter(failure_counts(bad).items()))
    return f"{status} ({plural(n, 'cell')}): {reason}"


def failure_counts(bad):
    """How many of the cells ``bad`` (none ok) share each (status, reason), commonest first."""
    return bad.assign(reason=bad["reason"].fillna("(no reason recorded)")).groupby(
        ["status", "reason"]).size().sort_values(ascending=False)


# ---------------------------------------------------------------------------- shared measures

def speedup(cells, env, loader, device="cuda", column="epoch_s_median", code=None,
            cpu_env=None):
    """The CPU's median epoch time over ``device``'s, in one env with one loader and, where
    ``cells`` have the column :data:`CODE`, one kind of code: ``code``, or the kind of
    ``device``'s cells (None when they ran several kinds). Like for like only; ``cpu_env``:
    the CPU of that environment instead (across machines: say so where it is shown)."""
    loader_ok = cells["loader"] == loader
    if CODE in cells.columns:
        if code is None:
            kinds = set(cells.loc[loader_ok & (cells["env"] == env)
                                  & (cells["device"] == device), CODE])
            if len(kinds) != 1:
                return None
            code = kinds.pop()
        loader_ok &= cells[CODE] == code
    cpu = cells[loader_ok & (cells["env"] == (cpu_env or env)) & (cells["device"] == "cpu")]
    other = cells[loader_ok & (cells["env"] == env) & (cells["device"] == device)]
    return stats.ratio_ci(col(cpu, column), col(other, column))


def phases(group) -> dict[str, float] | None:
    """Median seconds per epoch of each phase (and "other": the rest of the epoch) over the
    cells of ``group``; None without complete phase times."""
    columns = [f"{p}_s" for p in schema.PHASES]
    group = group.dropna(subset=[*columns, "epochs", "epoch_s_median"])
    if group.empty:
        return None
    out = {p: median(per_epoch(group, f"{p}_s")) for p in schema.PHASES}
    epoch = median(col(group, "epoch_s_median"))
    out["other"] = max(0.0, epoch - sum(out.values()))
    out["epoch"] = epoch
    return out


def seed_spread(cells) -> float | None:
    """The seed-to-seed spread of final test accuracy (points): the largest max - min over
    repeats of any (env, device, loader) group of ``cells``; None without 2 repeats."""
    spreads = [r for _, g in cells.groupby(list(RUN))
               if (r := value_range(col(g, "final_test_acc"))) is not None]
    return max(spreads) if spreads else None


def waiting_share(row: cost.CostRow) -> float | None:
    """The share of waiting in the total cost of one run; None without a total."""
    if row.total.value and row.waiting.value is not None and row.total.value > 0:
        return row.waiting.value / row.total.value
    return None


def blog_code(inputs: Inputs, device: str):
    """(cells, source) of the blog's code as written on ``device`` in one environment (the
    findings' first): the convergence cells of that kind at the blog's settings, else the
    tips experiment's baseline (short runs of the same code). ``source`` names them, e.g.
    "the tips experiment's baseline on vm-local, 2 runs of 40 steps". Empty cells, and why,
    when there are none."""
    first = primary_env(inputs.summary)
    for frame, what in ((inputs.cells, "convergence cells"),
                        (tips_cells(ok(inputs.summary)), "tips experiment's baseline")):
        part = frame[(frame["device"] == device) & (frame[CODE] == "blog")]
        if what.startswith("tips"):
            part = part[part[TIP_COLUMN] == blog.BASELINE]
        if part.empty:
            continue
        env = min(set(part["env"]), key=lambda e: (e != first, e))
        part = part[part["env"] == env]
        steps = distinct(part, "steps_per_epoch")
        runs = plural(len(part), "run") + (f" of {plural('/'.join(steps), 'step')}"
                                           if what.startswith("tips") and steps else "")
        where = f" on {env}" if inputs.multi_env else ""
        return part, f"the {what}{where}, {runs}"
    return frame.iloc[0:0], f"no cell ran the blog's code as written on the {device_name(device)}"


def blog_loader_first(loaders) -> list[str]:
    """``loaders`` by name, the blog's own loader first."""
    return sorted(sorted(set(loaders)), key=lambda x: x != blog.BLOG_LOADER)


# ---------------------------------------------------------------------------- the inputs

@dataclass
class Inputs:
    """What every section is built from: the aggregated tables, the cost model, the command
    and results folder of the header, and what is computed from them once."""

    tables: aggregate.Tables
    model: cost.CostModel
    command: str | None = None
    results: Path = Path("results")
    #: A publication's checks (its manifest's ``checks``: stale cells and why), None outside
    #: a publication (:mod:`mnistbench.report.sections.caveats`).
    checks: dict | None = None

    @cached_property
    def summary(self):
        """The summary with the kind of code of every cell (:data:`CODE`)."""
        return with_code(self.tables.summary)

    @property
    def epochs(self):
        return self.tables.epochs

    @cached_property
    def envs(self) -> list[str]:
        """Every environment of the study, by name."""
        return sorted(self.summary["env"].unique())

    @property
    def multi_env(self) -> bool:
        return len(self.envs) > 1

    @cached_property
    def _blog_cells(self):
        return blog.blog_cells(self.summary)

    @property
    def cells(self):
        """The ok cells at the blog's settings (:func:`mnistbench.report.blog.blog_cells`)."""
        return self._blog_cells[0]

    @property
    def cells_source(self) -> str:
        """Where :attr:`cells` come from (which experiment, at which settings)."""
        return self._blog_cells[1]

    @cached_property
    def cost_report(self) -> cost.CostReport:
        """The cost of a run of every ok convergence cell, with the break-even."""
        return cost.compute(self.summary, self.epochs, self.model)


# ---------------------------------------------------------------------------- the first screen

def focus_env(summary, cells) -> str:
    """The environment the first screen describes ("this machine"): the first with a GPU
    cell at the blog's settings, else :func:`primary_env`."""
    gpu = envs_with_gpu(cells)
    return gpu[0] if gpu else primary_env(summary)


def gpu_absence(summary) -> str | None:
    """Why the study has no GPU/CPU speed-up at the blog's settings, in a few words; None
    when it has one."""
    cuda = summary[summary["device"] == "cuda"]
    if cuda.empty:
        return "no GPU in this study"
    done = cuda[cuda["status"] == "ok"]
    if done.empty:
        (status, reason), _ = next(iter(failure_counts(cuda).items()))
        few = str(reason).split("(")[0].split(":")[0].strip()
        few = few if len(few) <= 60 else few[:59].rstrip() + "…"
        return f"its GPU cells were {status}" + (f" ({few})" if few else "")
    cells, _ = blog.blog_cells(done)
    return None if not cells.empty else "no GPU cell at the blog's settings"


# ---------------------------------------------------------------------------- one machine
# The headline experiment (both codes on every device of one environment, short cells,
# repeats interleaved) and the threads experiment (both codes on the CPU at 1, 2, 4, ...
# threads): absent from older studies, whose report shows neither.

#: The headline experiment's intervals: 6 repeats a side give a ratio at least 93.9 %.
ONE_MACHINE_CONFIDENCE = stats.HEADLINE_CONFIDENCE
#: A convergence cell's epochs from this one on are its steady rate (on an AMD Zen 4 the
#: blog's code took 64 s in epoch 3 and 59 s from epoch 4 on).
STEADY_FROM_EPOCH = 4
#: A short cell's rate agrees with the steady epochs of the same code within this share.
AGREEMENT_TOLERANCE = 0.05
#: The rate the headline and threads experiments compare (training samples per second of the
#: timed steps; evaluation is not part of it).
RATE = "samples_per_s"


def short_cells(summary, experiment: str):
    """The ok cells of the headline or threads ``experiment`` that ran one of the two codes
    (blog, best) and recorded a rate."""
    part = ok(summary, experiment)
    if part.empty:
        return part
    part = part[part[CODE].isin(("blog", "best"))]
    return part[numeric_column(part, RATE).notna()]


@dataclass(frozen=True)
class OneMachine:
    """The headline experiment's figures of one environment: GPU over CPU per code (by
    accelerator device) and best over blog per device, each a ratio of median rates with its
    interval, and why this environment leads."""

    env: str
    why: str
    devices: tuple[str, ...]
    gpu_over_cpu: dict  # (device, code) -> stats.Estimate | None
    best_over_blog: dict  # device -> stats.Estimate | None

    @property
    def has_gpu(self) -> bool:
        return any(d != "cpu" for d in self.devices) and "cpu" in self.devices


def one_machine_env(summary) -> tuple[str, str] | None:
    """(env, why) of the environment the answer is measured on: of those with ok headline
    cells, one that measured its CPU and an accelerator, else any; then the most ok headline
    cells, the local runner (not a container or SLURM job), the name. Same-hardware
    environments (local, container, SLURM) are never pooled: the others are listed apart."""
    cells = short_cells(summary, study.HEADLINE_EXPERIMENT)
    if cells.empty:
        return None
    envs = sorted(set(cells["env"]))

    def both(env) -> bool:
        here = set(cells.loc[cells["env"] == env, "device"])
        return "cpu" in here and bool(here - {"cpu"})

    with_both = [e for e in envs if both(e)]
    pool = with_both or envs
    env = min(pool, key=lambda e: (-int((cells["env"] == e).sum()), scheduled(summary, e), e))
    if with_both:
        why = ("the environment that measured its CPU and its GPU on one machine"
               if len(with_both) == 1 else
               f"of {len(with_both)} environments that measured both devices, the one with "
               "the most runs (they are not pooled)")
    else:
        why = ("the environment of the headline runs" if len(envs) == 1 else
               f"of {len(envs)} environments with headline runs (same hardware is not "
               "pooled), the one with the most runs, the local runner first")
    return env, why


def one_machine(summary, env: str, why: str = "",
                confidence: float = ONE_MACHINE_CONFIDENCE) -> OneMachine:
    """The ratios of ``env``'s headline cells: rate of the GPU over the CPU's per code, and of
    this project's best over the blog's code per device (faster is larger)."""
    cells = short_cells(summary, study.HEADLINE_EXPERIMENT)
    cells = cells[cells["env"] == env]
    found = [d for d in devices(summary) if d in set(cells["device"])]

    def rates(device, code):
        return col(cells[(cells["device"] == device) & (cells[CODE] == code)], RATE)

    gpu = {(d, code): stats.ratio_ci(rates(d, code), rates("cpu", code), confidence)
           for d in found if d != "cpu" for code in ("blog", "best")
           if rates(d, code) and rates("cpu", code)}
    best = {d: stats.ratio_ci(rates(d, "best"), rates(d, "blog"), confidence)
            for d in found if rates(d, "best") and rates(d, "blog")}
    return OneMachine(env, why, tuple(found), gpu, best)


def steady_agreement(summary, epochs, env: str, device: str, code: str):
    """(short cells' median rate, steady epochs' median rate, short / steady - 1, steady
    epochs counted) of one code on one device of ``env``: the headline cells against the
    convergence cells' quiet epochs from :data:`STEADY_FROM_EPOCH` on; None where either
    side is missing."""
    short = short_cells(summary, study.HEADLINE_EXPERIMENT)
    short = short[(short["env"] == env) & (short["device"] == device) & (short[CODE] == code)]
    conv = ok(summary, "convergence")
    conv = conv[(conv["env"] == env) & (conv["device"] == device) & (conv[CODE] == code)]
    if short.empty or conv.empty or epochs is None or epochs.empty:
        return None
    rows = epochs[(epochs["env"] == env) & (epochs["experiment"] == "convergence")
                  & epochs["cell"].isin(set(conv["cell"]))]
    rows = rows[numeric_column(rows, "epoch") >= STEADY_FROM_EPOCH]
    if "disturbed" in rows.columns:
        rows = rows[rows["disturbed"].map(lambda v: missing(v) or str(v) == "")]
    fast, steady = median(col(short, RATE)), median(col(rows, RATE))
    if fast is None or steady is None or steady <= 0:
        return None
    return fast, steady, fast / steady - 1.0, len(col(rows, RATE))


def threads_of(frame):
    """Each row's threads asked for (``threads_asked``), else those it got (``threads``)."""
    asked = numeric_column(frame, "threads_asked")
    return asked.where(asked > 0, numeric_column(frame, "threads"))


def threads_curve(summary, env: str, code: str) -> list[dict]:
    """The threads experiment of one code in ``env``, by threads ascending: threads asked
    and got, the DataLoader's threads, the rates (median, min, max, n), the CPU use, and
    the speed-up over the fewest threads with its interval (None on that row)."""
    cells = short_cells(summary, study.THREADS_EXPERIMENT)
    cells = cells[(cells["env"] == env) & (cells[CODE] == code)]
    if cells.empty:
        return []
    cells = cells.assign(_threads=threads_of(cells))
    counts = sorted(int(t) for t in set(cells["_threads"].dropna()))
    base = col(cells[cells["_threads"] == counts[0]], RATE)
    out = []
    for n in counts:
        part = cells[cells["_threads"] == n]
        rates = col(part, RATE)
        out.append({
            "threads": n, "got": distinct(part, "threads"),
            "loader_threads": distinct(part, "loader_threads"),
            "rate": stats.spread(rates), "cpu_pct": median(col(part, "cpu_pct_mean")),
            "speedup": None if n == counts[0] else stats.ratio_ci(rates, base),
            "part": part,
        })
    return out


def threads_envs(summary) -> list[str]:
    """The environments with ok threads cells, by name."""
    return sorted(set(short_cells(summary, study.THREADS_EXPERIMENT)["env"]))
